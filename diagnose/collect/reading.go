package collect

import (
	"math"

	"github.com/infergate/infergate/diagnose"
)

// first returns the first of names the scrape has.
func first(s *Scrape, names ...string) string {
	for _, n := range names {
		if s.Has(n) {
			return n
		}
	}
	return ""
}

func sumOrNaN(s *Scrape, names ...string) float64 {
	if n := first(s, names...); n != "" {
		if v, ok := s.Sum(n); ok {
			return v
		}
	}
	return math.NaN()
}

func maxOrNaN(s *Scrape, names ...string) float64 {
	if n := first(s, names...); n != "" {
		if v, ok := s.Max(n); ok {
			return v
		}
	}
	return math.NaN()
}

// histOf reads the first of names that is a histogram (or a summary).
func histOf(s *Scrape, names ...string) diagnose.Hist {
	for _, n := range names {
		if h, ok := s.Hist(n); ok {
			return h
		}
	}
	return diagnose.Hist{}
}

// Detect names the server whose metrics s holds.
func Detect(s *Scrape) string {
	switch {
	case first(s, "vllm:num_requests_running", "vllm:num_requests_waiting") != "":
		return diagnose.ServerVLLM
	case first(s, "sglang:num_running_reqs", "sglang:num_queue_reqs") != "":
		return diagnose.ServerSGLang
	case first(s, "tgi_queue_size", "tgi_batch_current_size") != "":
		return diagnose.ServerTGI
	case first(s, "llamacpp:requests_processing", "llamacpp:requests_deferred") != "":
		return diagnose.ServerLlamaCpp
	}
	return diagnose.ServerUnknown
}

// Read turns a backend's scrape into a Reading. Several engines or
// models behind one endpoint are summed (KV usage: the fullest).
func Read(s *Scrape) diagnose.Reading {
	r := diagnose.NewReading(s.At, Detect(s))
	switch r.Server {
	case diagnose.ServerVLLM:
		r.Running = sumOrNaN(s, "vllm:num_requests_running")
		r.Waiting = sumOrNaN(s, "vllm:num_requests_waiting")
		r.KVUsage = maxOrNaN(s, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
		r.Preemptions = sumOrNaN(s, "vllm:num_preemptions_total", "vllm:num_preemptions")
		r.PromptTokens = sumOrNaN(s, "vllm:prompt_tokens_total", "vllm:prompt_tokens")
		r.OutputTokens = sumOrNaN(s, "vllm:generation_tokens_total", "vllm:generation_tokens")
		// vLLM 0.9 renamed gpu_prefix_cache_* to prefix_cache_*.
		r.PrefixQueries = sumOrNaN(s, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
		r.PrefixHits = sumOrNaN(s, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
		r.TTFT = histOf(s, "vllm:time_to_first_token_seconds")
		r.Queue = histOf(s, "vllm:request_queue_time_seconds")
		r.ITL = histOf(s, "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
		if v, ok := s.LabelNumber("vllm:cache_config_info", "max_num_seqs"); ok && v > 0 {
			r.MaxRunning = v
		}
		blocks, ok1 := s.LabelNumber("vllm:cache_config_info", "num_gpu_blocks")
		size, ok2 := s.LabelNumber("vllm:cache_config_info", "block_size")
		if ok1 && ok2 && blocks > 0 && size > 0 {
			r.KVTokens = blocks * size
		}
	case diagnose.ServerSGLang:
		r.Running = sumOrNaN(s, "sglang:num_running_reqs")
		r.Waiting = sumOrNaN(s, "sglang:num_queue_reqs")
		r.KVUsage = maxOrNaN(s, "sglang:token_usage")
		// Retractions are SGLang's preemptions: a counter in some
		// versions, a gauge of the step's retractions in others.
		if n := first(s, "sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"); n != "" {
			if s.IsCounter(n) || n == "sglang:num_retracted_reqs_total" {
				r.Preemptions = sumOrNaN(s, n)
			} else {
				r.Retracting = sumOrNaN(s, n)
			}
		}
		r.PromptTokens = sumOrNaN(s, "sglang:prompt_tokens_total")
		r.OutputTokens = sumOrNaN(s, "sglang:generation_tokens_total")
		r.TTFT = histOf(s, "sglang:time_to_first_token_seconds")
		r.Queue = histOf(s, "sglang:queue_time_seconds")
		r.ITL = histOf(s, "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
		r.MaxRunning = sumOrNaN(s, "sglang:max_running_requests")
		r.KVTokens = sumOrNaN(s, "sglang:max_total_num_tokens")
	case diagnose.ServerTGI:
		r.Running = sumOrNaN(s, "tgi_batch_current_size")
		r.Waiting = sumOrNaN(s, "tgi_queue_size")
		r.Queue = histOf(s, "tgi_request_queue_duration")
		r.ITL = histOf(s, "tgi_request_mean_time_per_token_duration")
		// TGI counts tokens in per-request histograms: their sums.
		if h := histOf(s, "tgi_request_input_length"); h.Reported {
			r.PromptTokens = h.Sum
		}
		if h := histOf(s, "tgi_request_generated_tokens"); h.Reported {
			r.OutputTokens = h.Sum
		}
	case diagnose.ServerLlamaCpp:
		// Busy slots, and requests deferred because no slot was free: the
		// server's own queue. Its slot count is in /props, not here (see
		// ParseProps); current servers report no KV-cache usage (older
		// ones had kv_cache_usage_ratio).
		r.Running = sumOrNaN(s, "llamacpp:requests_processing")
		r.Waiting = sumOrNaN(s, "llamacpp:requests_deferred")
		r.KVUsage = maxOrNaN(s, "llamacpp:kv_cache_usage_ratio")
		// prompt_tokens_total leaves out the tokens reused from the
		// cache, which prompt_tokens_cached_total counts: together they
		// are every prompt token, as vLLM counts them, and the cached
		// ones are the prefix cache's hits.
		uncached := sumOrNaN(s, "llamacpp:prompt_tokens_total")
		r.PromptTokens = uncached
		if cached := sumOrNaN(s, "llamacpp:prompt_tokens_cached_total"); !math.IsNaN(cached) && !math.IsNaN(uncached) {
			r.PromptTokens = uncached + cached
			r.PrefixQueries, r.PrefixHits = uncached+cached, cached
		}
		r.OutputTokens = sumOrNaN(s, "llamacpp:tokens_predicted_total")
		// n_busy_slots_per_decode is a mean since start: times the decode
		// count it is a counter of busy slots, whose rate over the
		// decodes' is the window's mean batch.
		r.Decodes = sumOrNaN(s, "llamacpp:n_decode_total")
		r.BusySlotDecodes = sumOrNaN(s, "llamacpp:n_busy_slots_per_decode") * r.Decodes
	}
	if r.KVUsage > 1.5 { // a percentage, not a share
		r.KVUsage /= 100
	}
	return r
}

// GPUUtil is the DCGM exporter's GPU utilisation (DCGM_FI_DEV_GPU_UTIL,
// percent), averaged over the GPUs; NaN when absent. A sim's /metrics
// carries it too.
func GPUUtil(s *Scrape) float64 {
	if v, ok := s.Mean("DCGM_FI_DEV_GPU_UTIL"); ok {
		return v
	}
	return math.NaN()
}

// ReadGateway turns an infergate gateway's scrape into a reading; ok is
// false when the scrape is not a gateway's.
func ReadGateway(s *Scrape) (diagnose.GatewayReading, bool) {
	if !s.Has("infergate_queue_depth") {
		return diagnose.GatewayReading{}, false
	}
	g := diagnose.GatewayReading{At: s.At}
	g.Queued, _ = s.Sum("infergate_queue_depth")
	global := [][2]string{{"level", "global"}, {"unit", "requests"}}
	g.InFlight, _ = s.Sum("infergate_shaping_in_flight", global...)
	g.Limit, _ = s.Sum("infergate_shaping_limit", global...)
	g.Upstream, _ = s.Sum("infergate_upstream_in_flight")
	g.Admitted, _ = s.Sum("infergate_shaping_admitted_total")
	g.Rejected, _ = s.Sum("infergate_shaping_rejections_total")
	g.Requests, _ = s.Sum("infergate_requests_total")
	g.QueueWait, _ = s.Hist("infergate_queue_wait_seconds")
	return g, true
}

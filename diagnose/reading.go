package diagnose

import (
	"math"
	"time"
)

// Servers diagnose recognises, by the metrics they expose.
const (
	ServerVLLM     = "vllm"
	ServerSGLang   = "sglang"
	ServerTGI      = "tgi"
	ServerLlamaCpp = "llamacpp"
	ServerUnknown  = "unknown"
)

// Reading is one backend's state at one instant, in common terms. A
// figure the server does not report is NaN.
type Reading struct {
	At     time.Time
	Server string
	// Running and Waiting are the requests in the running batch and in
	// the server's own queue.
	Running, Waiting float64
	// KVUsage is the share of the KV cache in use, 0 to 1.
	KVUsage float64
	// Preemptions counts preemptions (SGLang: retractions) since start;
	// Retracting is SGLang's gauge of requests being retracted now.
	Preemptions, Retracting float64
	// MaxRunning is the running batch's bound, where the server says it
	// (vLLM's max_num_seqs as a cache_config_info label, SGLang's
	// max_running_requests).
	MaxRunning float64
	// KVTokens is the KV cache's size in tokens, where the server says it
	// (vLLM: num_gpu_blocks × block_size; SGLang: max_total_num_tokens).
	KVTokens float64
	// PromptTokens and OutputTokens are token counters since start.
	PromptTokens, OutputTokens float64
	// TTFT, Queue and ITL are the server's histograms of time to first
	// token, queue time and inter-token latency (seconds).
	TTFT, Queue, ITL          Hist
	hasTTFT, hasQueue, hasITL bool
}

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
func histOf(s *Scrape, names ...string) (Hist, bool) {
	for _, n := range names {
		if h, ok := s.Hist(n); ok {
			return h, true
		}
	}
	return Hist{}, false
}

// Detect names the server whose metrics s holds.
func Detect(s *Scrape) string {
	switch {
	case first(s, "vllm:num_requests_running", "vllm:num_requests_waiting") != "":
		return ServerVLLM
	case first(s, "sglang:num_running_reqs", "sglang:num_queue_reqs") != "":
		return ServerSGLang
	case first(s, "tgi_queue_size", "tgi_batch_current_size") != "":
		return ServerTGI
	case first(s, "llamacpp:requests_processing", "llamacpp:requests_deferred") != "":
		return ServerLlamaCpp
	}
	return ServerUnknown
}

// Read turns a backend's scrape into a Reading. Several engines or
// models behind one endpoint are summed (KV usage: the fullest).
func Read(s *Scrape) Reading {
	nan := math.NaN()
	r := Reading{At: s.At, Server: Detect(s), Running: nan, Waiting: nan, KVUsage: nan, Preemptions: nan,
		Retracting: nan, MaxRunning: nan, KVTokens: nan, PromptTokens: nan, OutputTokens: nan}
	switch r.Server {
	case ServerVLLM:
		r.Running = sumOrNaN(s, "vllm:num_requests_running")
		r.Waiting = sumOrNaN(s, "vllm:num_requests_waiting")
		r.KVUsage = maxOrNaN(s, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
		r.Preemptions = sumOrNaN(s, "vllm:num_preemptions_total", "vllm:num_preemptions")
		r.PromptTokens = sumOrNaN(s, "vllm:prompt_tokens_total", "vllm:prompt_tokens")
		r.OutputTokens = sumOrNaN(s, "vllm:generation_tokens_total", "vllm:generation_tokens")
		r.TTFT, r.hasTTFT = histOf(s, "vllm:time_to_first_token_seconds")
		r.Queue, r.hasQueue = histOf(s, "vllm:request_queue_time_seconds")
		r.ITL, r.hasITL = histOf(s, "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
		if v, ok := s.LabelNumber("vllm:cache_config_info", "max_num_seqs"); ok && v > 0 {
			r.MaxRunning = v
		}
		blocks, ok1 := s.LabelNumber("vllm:cache_config_info", "num_gpu_blocks")
		size, ok2 := s.LabelNumber("vllm:cache_config_info", "block_size")
		if ok1 && ok2 && blocks > 0 && size > 0 {
			r.KVTokens = blocks * size
		}
	case ServerSGLang:
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
		r.TTFT, r.hasTTFT = histOf(s, "sglang:time_to_first_token_seconds")
		r.Queue, r.hasQueue = histOf(s, "sglang:queue_time_seconds")
		r.ITL, r.hasITL = histOf(s, "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
		r.MaxRunning = sumOrNaN(s, "sglang:max_running_requests")
		r.KVTokens = sumOrNaN(s, "sglang:max_total_num_tokens")
	case ServerTGI:
		r.Running = sumOrNaN(s, "tgi_batch_current_size")
		r.Waiting = sumOrNaN(s, "tgi_queue_size")
		r.Queue, r.hasQueue = histOf(s, "tgi_request_queue_duration")
		r.ITL, r.hasITL = histOf(s, "tgi_request_mean_time_per_token_duration")
		// TGI counts tokens in per-request histograms: their sums.
		if h, ok := histOf(s, "tgi_request_input_length"); ok {
			r.PromptTokens = h.Sum
		}
		if h, ok := histOf(s, "tgi_request_generated_tokens"); ok {
			r.OutputTokens = h.Sum
		}
	case ServerLlamaCpp:
		r.Running = sumOrNaN(s, "llamacpp:requests_processing")
		r.Waiting = sumOrNaN(s, "llamacpp:requests_deferred")
		r.KVUsage = maxOrNaN(s, "llamacpp:kv_cache_usage_ratio")
		r.PromptTokens = sumOrNaN(s, "llamacpp:prompt_tokens_total")
		r.OutputTokens = sumOrNaN(s, "llamacpp:tokens_predicted_total")
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

// GatewayReading is an infergate gateway's state at one instant, read
// from its /metrics.
type GatewayReading struct {
	At time.Time
	// Queued waits for a slot; InFlight holds one (the global cap's
	// count); Limit is the global cap (0: none).
	Queued, InFlight, Limit float64
	// Upstream is requests in flight to the backends.
	Upstream float64
	// Admitted, Rejected and Requests are counters since start.
	Admitted, Rejected, Requests float64
	// QueueWait is the histogram of time spent queued (seconds).
	QueueWait Hist
}

// ReadGateway turns an infergate gateway's scrape into a reading; ok is
// false when the scrape is not a gateway's.
func ReadGateway(s *Scrape) (GatewayReading, bool) {
	if !s.Has("infergate_queue_depth") {
		return GatewayReading{}, false
	}
	g := GatewayReading{At: s.At}
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

// Package engine knows what an inference server's metrics mean: which
// server it is (vLLM, SGLang, TGI, llama.cpp) and its running batch,
// queue, KV-cache use, token and prefix-cache counters and latency
// histograms, as one Reading in common terms; and llama.cpp's slot
// count, which its /metrics leaves out (GET /props, else GET /slots), and
// SGLang's uncached prompt tokens waiting to prefill (GET /v1/loads).
// The gateway's load routing and diagnose both read servers through it.
// It knows no HTTP library: the caller fetches (package promtext parses
// the exposition; FetchSlots takes a get function).
package engine

import (
	"math"
	"time"

	"github.com/infergate/infergate/internal/promtext"
)

// The servers whose metrics are read, named as Reading.Server says them.
const (
	VLLM     = "vllm"
	SGLang   = "sglang"
	TGI      = "tgi"
	LlamaCpp = "llamacpp"
	Unknown  = "unknown"
)

// Reading is one server's state at one instant, in common terms. A
// figure the server does not report is NaN; NewReading starts with all
// of them NaN.
type Reading struct {
	At time.Time
	// Server is one of the constants above.
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
	// Slots is llama.cpp's slot count (GET /props total_slots, or the
	// length of GET /slots): its batch bound, set by -np/--parallel.
	// SlotContext is each slot's context in tokens (-c split between the
	// slots unless --kv-unified). Read leaves them NaN: they are not in
	// /metrics (see FetchSlots and Slots.Apply).
	Slots, SlotContext float64
	// Decodes counts llama.cpp's llama_decode() calls since start
	// (n_decode_total) and BusySlotDecodes the busy slots summed over
	// them (n_busy_slots_per_decode × n_decode_total), so a window's mean
	// batch is the difference of one over the difference of the other.
	Decodes, BusySlotDecodes float64
	// PromptTokens and OutputTokens are token counters since start.
	PromptTokens, OutputTokens float64
	// PrefixQueries and PrefixHits are the prefix cache's counters since
	// start, in tokens (vLLM's prefix_cache_queries and _hits).
	PrefixQueries, PrefixHits float64
	// TTFT, Queue and ITL are the server's histograms of time to first
	// token, queue time and inter-token latency (seconds).
	TTFT, Queue, ITL promtext.Hist
}

// NewReading is a reading at at from server with every figure unknown
// (NaN), for a reader to fill in what the server reports.
func NewReading(at time.Time, server string) Reading {
	nan := math.NaN()
	return Reading{At: at, Server: server, Running: nan, Waiting: nan, KVUsage: nan, Preemptions: nan,
		Retracting: nan, MaxRunning: nan, KVTokens: nan, Slots: nan, SlotContext: nan, Decodes: nan, BusySlotDecodes: nan,
		PromptTokens: nan, OutputTokens: nan, PrefixQueries: nan, PrefixHits: nan}
}

// first returns the first of names the scrape has.
func first(s *promtext.Scrape, names ...string) string {
	for _, n := range names {
		if s.Has(n) {
			return n
		}
	}
	return ""
}

func sumOrNaN(s *promtext.Scrape, names ...string) float64 {
	if n := first(s, names...); n != "" {
		if v, ok := s.Sum(n); ok {
			return v
		}
	}
	return math.NaN()
}

func maxOrNaN(s *promtext.Scrape, names ...string) float64 {
	if n := first(s, names...); n != "" {
		if v, ok := s.Max(n); ok {
			return v
		}
	}
	return math.NaN()
}

// histOf reads the first of names that is a histogram (or a summary).
func histOf(s *promtext.Scrape, names ...string) promtext.Hist {
	for _, n := range names {
		if h, ok := s.Hist(n); ok {
			return h
		}
	}
	return promtext.Hist{}
}

// Detect names the server whose metrics s holds.
func Detect(s *promtext.Scrape) string {
	switch {
	case first(s, "vllm:num_requests_running", "vllm:num_requests_waiting") != "":
		return VLLM
	case first(s, "sglang:num_running_reqs", "sglang:num_queue_reqs") != "":
		return SGLang
	case first(s, "tgi_queue_size", "tgi_batch_current_size") != "":
		return TGI
	case first(s, "llamacpp:requests_processing", "llamacpp:requests_deferred") != "":
		return LlamaCpp
	}
	return Unknown
}

// Read turns a backend's scrape into a Reading. Several engines or
// models behind one endpoint are summed (KV usage: the fullest).
func Read(s *promtext.Scrape) Reading {
	r := NewReading(s.At, Detect(s))
	switch r.Server {
	case VLLM:
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
	case SGLang:
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
	case TGI:
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
	case LlamaCpp:
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

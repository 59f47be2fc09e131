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
// figure the server does not report is NaN; NewReading starts with all
// of them NaN.
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
	// Slots is llama.cpp's slot count (GET /props total_slots, or the
	// length of GET /slots): its batch bound, set by -np/--parallel.
	// SlotContext is each slot's context in tokens (-c split between the
	// slots unless --kv-unified).
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
	TTFT, Queue, ITL Hist
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

// Hist is a histogram's running sum and count: the mean over a window is
// the difference of sums over the difference of counts.
type Hist struct {
	Sum, Count float64
	// Reported is set when the server exposes the histogram at all.
	Reported bool
}

// NewReading is a reading at at from server with every figure unknown
// (NaN), for a reader to fill in what the server reports.
func NewReading(at time.Time, server string) Reading {
	nan := math.NaN()
	return Reading{At: at, Server: server, Running: nan, Waiting: nan, KVUsage: nan, Preemptions: nan,
		Retracting: nan, MaxRunning: nan, KVTokens: nan, Slots: nan, SlotContext: nan, Decodes: nan, BusySlotDecodes: nan,
		PromptTokens: nan, OutputTokens: nan, PrefixQueries: nan, PrefixHits: nan}
}

package adminapi

import (
	"time"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/openai"
)

// Quantiles are a figure's percentiles (milliseconds, or tokens/s for
// speed), by the one rule (package quantile: nearest rank, p90 from 10
// values, p99 from 100); nil when no request had the figure.
type Quantiles = quantile.Three

// GroupStats are the recent figures of one model and backend (or of all,
// with both names empty).
type GroupStats struct {
	Model   string `json:"model,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Requests and Errors are exact over the window; RPS is Requests
	// over the window.
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"rps"`
	// Samples is how many of the newest requests the figures below
	// cover.
	Samples int        `json:"samples"`
	TTFT    *Quantiles `json:"ttft_ms,omitempty"`
	TPOT    *Quantiles `json:"tpot_ms,omitempty"`
	Speed   *Quantiles `json:"output_tokens_per_s,omitempty"`
	Total   *Quantiles `json:"total_ms,omitempty"`
	// Attribution is the mean of each part over requests that reached a
	// backend: means add up to the mean total, as the parts of each
	// request add up to its total.
	Attribution *openai.Timing `json:"attribution_ms,omitempty"`
}

// Stats is what GET /admin/stats answers: the live view of the last
// window (tracing.Recent computes it) and the gateway's state now.
type Stats struct {
	Time    time.Time    `json:"time"`
	Window  float64      `json:"window_s"`
	All     GroupStats   `json:"all"`
	Groups  []GroupStats `json:"groups"`
	Gateway GatewayState `json:"gateway"`
}

// GatewayState is what is in flight now.
type GatewayState struct {
	InFlight int64          `json:"in_flight"`
	Queued   int            `json:"queued"`
	Backends []BackendState `json:"backends"`
	// Share is what this replica shared of its placements with the
	// others; nil when it shares none (no Redis, or no prefix pool).
	Share *ShareState `json:"share,omitempty"`
	// Classes is each service class's state, highest first; nil when
	// classes are off.
	Classes []ClassState `json:"classes,omitempty"`
}

// ClassState is one service class on this replica: what waits and holds
// a slot now, and its counts since the gateway started (the same counts
// as the infergate_class_* metrics).
type ClassState struct {
	Class    string `json:"class"`
	Waiting  int    `json:"waiting"`
	InFlight int64  `json:"in_flight"`
	// Admitted were given a slot; Queued had to wait for it.
	Admitted int64 `json:"admitted"`
	Queued   int64 `json:"queued"`
	// Shed were taken out of a full queue for a higher class; Preempted
	// lost their slot to a higher class before their first byte;
	// TimedOut waited past the class's queue_timeout.
	Shed      int64 `json:"shed"`
	Preempted int64 `json:"preempted"`
	TimedOut  int64 `json:"timed_out"`
	// SLOTTFT is the class's objective (ms; 0: none); of the requests
	// answered or refused since start (Judged), SLOMet met it.
	SLOTTFT float64 `json:"slo_ttft_ms,omitempty"`
	Judged  int64   `json:"slo_judged,omitempty"`
	SLOMet  int64   `json:"slo_met,omitempty"`
}

// ShareState counts the placements a replica shared with the other
// replicas through Redis, and those it learnt from them, since it
// started (the same counts as the infergate_share_* metrics).
type ShareState struct {
	// Up: the last call to Redis worked. While down the replica routes on
	// what it learns itself.
	Up bool `json:"up"`
	// Replica is this replica's id in the batches (hex).
	Replica string `json:"replica"`
	// Placements sent, dropped at a full queue, lost to a Redis that
	// failed.
	Published int64 `json:"published"`
	Dropped   int64 `json:"dropped"`
	Lost      int64 `json:"lost"`
	// Placements received from the others, applied to this replica's
	// index, ignored (a pool or backend it lacks).
	Received int64 `json:"received"`
	Applied  int64 `json:"applied"`
	Ignored  int64 `json:"ignored"`
	// Batches sent; malformed batches refused; failed calls to Redis.
	Batches int64 `json:"batches"`
	Invalid int64 `json:"invalid_batches"`
	Errors  int64 `json:"errors"`
}

// BackendState is one backend now.
type BackendState struct {
	Pool     string `json:"pool"`
	Name     string `json:"name"`
	InFlight int64  `json:"in_flight"`
	Breaker  string `json:"breaker"`
	Up       bool   `json:"available"`
	// Selection is the pool's policy; Load, Prefix and Routes are set for
	// selection load and prefix.
	Selection string         `json:"selection,omitempty"`
	Load      *BackendLoad   `json:"load,omitempty"`
	Prefix    *BackendPrefix `json:"prefix,omitempty"`
	// Routes counts the picks of this backend by why it was chosen.
	Routes map[string]int64 `json:"routes,omitempty"`
}

// BackendLoad is a backend's load as selection load and prefix see it.
type BackendLoad struct {
	// Source is "metrics" when the backend's own reading is used, or
	// "gateway" when its scrape failed or is stale and the gateway's own
	// in-flight count stands in (Error says why).
	Source string `json:"source"`
	Server string `json:"server,omitempty"`
	// The last good reading: running, waiting, KV usage, and its age.
	Running *float64 `json:"running,omitempty"`
	Waiting *float64 `json:"waiting,omitempty"`
	KVUsage *float64 `json:"kv_usage,omitempty"`
	// MaxRunning is the batch's bound, where the server says it (vLLM's
	// max_num_seqs, SGLang's max_running_requests, llama.cpp's slots
	// from /props): requests beyond it wait.
	MaxRunning *float64 `json:"max_running,omitempty"`
	AgeMs      float64  `json:"age_ms,omitempty"`
	// Estimate is the requests in the backend's batch and queue as the
	// next pick counts them: the reading corrected by what the gateway
	// sent and saw end since.
	Estimate float64 `json:"estimate"`
	// PrefillTokens is the uncached prompt tokens the backend still has
	// to prefill as the next pick counts them: its own figure (SGLang's
	// /v1/loads, WaitingUncachedTokens) corrected by the gateway's sends
	// since, else the gateway's count of its requests with no first
	// token yet.
	PrefillTokens         float64  `json:"prefill_tokens"`
	WaitingUncachedTokens *float64 `json:"waiting_uncached_tokens,omitempty"`
	// HeldMs is how much longer the backend is held back from picks after
	// refusing a request at admission (its queue full); Refusals counts
	// those refusals by reason (queued_requests, queued_tokens).
	HeldMs         float64          `json:"held_ms,omitempty"`
	Refusals       map[string]int64 `json:"refusals,omitempty"`
	Error          string           `json:"error,omitempty"`
	ScrapeFailures int64            `json:"scrape_failures,omitempty"`
}

// BackendPrefix is the prefix affinity's account of a backend: the share
// of prompt blocks the gateway expected it to hold, against what it
// reports (in its answers' cached_tokens, and in its own counters).
type BackendPrefix struct {
	RoutedBlocks   int64    `json:"routed_blocks"`
	ExpectedBlocks int64    `json:"expected_blocks"`
	ExpectedRatio  *float64 `json:"expected_hit_ratio,omitempty"`
	// From the answers' usage.prompt_tokens_details.
	PromptTokens  int64    `json:"prompt_tokens"`
	CachedTokens  int64    `json:"cached_tokens"`
	ReportedRatio *float64 `json:"reported_hit_ratio,omitempty"`
	// From the backend's metrics (vllm:prefix_cache_hits/queries), since
	// it started: every client's requests, not only the gateway's.
	BackendRatio *float64 `json:"backend_hit_ratio,omitempty"`
	// Exact is the backend's KV-event stream, with prefix.exact.
	Exact *BackendExact `json:"exact,omitempty"`
}

// BackendExact is what exact mode knows of a backend's engine: whether
// its event stream is in sync (else its pool routes approximately), the
// blocks indexed, and the stream's counts.
type BackendExact struct {
	Synced   bool   `json:"synced"`
	Blocks   int    `json:"blocks"`
	Batches  int64  `json:"batches"`
	Gaps     int64  `json:"gaps"`
	Replayed int64  `json:"replayed"`
	Cleared  int64  `json:"cleared"`
	Rejected int64  `json:"rejected"`
	Restarts int64  `json:"restarts"`
	Connects int64  `json:"connects"`
	LastSeq  uint64 `json:"last_seq"`
}

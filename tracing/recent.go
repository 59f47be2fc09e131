package tracing

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/openai"
)

// RecentWindow is how far back the live view looks.
const RecentWindow = time.Minute

// recentSamples bounds the samples kept per model and backend: at high
// rates the percentiles cover the newest ones within the window.
const recentSamples = 1024

// Recent keeps the latest requests per model and backend for the live
// view (GET /admin/stats, infergate top): exact counts per second over
// the window and the timings of the newest requests. It is safe for
// concurrent use; Add takes one short lock and allocates nothing once a
// group exists.
type Recent struct {
	window time.Duration
	mu     sync.Mutex
	groups map[groupKey]*group
}

type groupKey struct{ model, backend string }

// group is one model and backend: a ring of samples and per-second
// counts.
type group struct {
	samples [recentSamples]sample
	n, next int
	secs    []second // one per second of the window, by Unix second
}

type second struct {
	unix         int64
	requests, ko int
}

// sample is one finished request.
type sample struct {
	at                time.Time
	ok                bool
	ttft, total, tpot time.Duration
	speed             float64 // output tokens per second of decode
	parts             Attribution
	outputTokens      int
	hasTTFT, reached  bool // a content event went out; a backend was called
}

// NewRecent returns an empty view over window.
func NewRecent(window time.Duration) *Recent {
	return &Recent{window: window, groups: map[groupKey]*group{}}
}

// Add records a finished request; ok is false when it failed.
func (r *Recent) Add(tl *Timeline, model, backend string, ok bool) {
	s := sample{at: tl.Done, ok: ok, total: tl.Duration(), outputTokens: tl.OutputTokens}
	if !tl.Sent.IsZero() {
		s.parts = tl.Attribute(tl.Done)
		s.reached = true
	}
	if ttft := tl.TTFT(); ttft > 0 {
		s.ttft, s.hasTTFT = ttft, true
		// Without the backend's usage, content events stand in for tokens
		// (one each on vLLM, SGLang and TGI streams).
		out := tl.OutputTokens
		if out == 0 {
			out = tl.ContentEvents
		}
		if span := since(tl.FirstTokenIn, tl.LastTokenIn); span > 0 && out > 1 {
			s.tpot = span / time.Duration(out-1)
			s.speed = float64(out-1) / span.Seconds()
		}
	}
	if s.at.IsZero() {
		s.at = time.Now()
	}
	k := groupKey{model, backend}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil {
		g = &group{secs: make([]second, int(r.window/time.Second)+1)}
		r.groups[k] = g
	}
	g.samples[g.next] = s
	g.next = (g.next + 1) % recentSamples
	g.n = min(g.n+1, recentSamples)
	unix := s.at.Unix()
	n := int64(len(g.secs))
	c := &g.secs[(unix%n+n)%n]
	if c.unix != unix {
		*c = second{unix: unix}
	}
	c.requests++
	if !ok {
		c.ko++
	}
}

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

// Snapshot is what GET /admin/stats returns.
type Snapshot struct {
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
	Estimate       float64 `json:"estimate"`
	Error          string  `json:"error,omitempty"`
	ScrapeFailures int64   `json:"scrape_failures,omitempty"`
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
}

// Snapshot computes the figures of the window ending at now; the
// gateway's state is the caller's to fill in.
func (r *Recent) Snapshot(now time.Time) Snapshot {
	snap := Snapshot{Time: now, Window: r.window.Seconds(), Groups: []GroupStats{}}
	from := now.Add(-r.window)
	var all []sample
	allCounts := GroupStats{}
	r.mu.Lock()
	type taken struct {
		k       groupKey
		samples []sample
		counts  GroupStats
	}
	var groups []taken
	for k, g := range r.groups {
		t := taken{k: k}
		for i := range g.n {
			if s := g.samples[i]; !s.at.Before(from) {
				t.samples = append(t.samples, s)
			}
		}
		for _, c := range g.secs {
			if c.unix > from.Unix() && c.unix <= now.Unix() {
				t.counts.Requests += c.requests
				t.counts.Errors += c.ko
			}
		}
		if t.counts.Requests == 0 && len(t.samples) == 0 {
			continue
		}
		groups = append(groups, t)
	}
	r.mu.Unlock()
	for _, t := range groups {
		gs := summarize(t.samples, t.counts, r.window)
		gs.Model, gs.Backend = t.k.model, t.k.backend
		snap.Groups = append(snap.Groups, gs)
		all = append(all, t.samples...)
		allCounts.Requests += t.counts.Requests
		allCounts.Errors += t.counts.Errors
	}
	sort.Slice(snap.Groups, func(i, j int) bool {
		a, b := snap.Groups[i], snap.Groups[j]
		return a.Model < b.Model || a.Model == b.Model && a.Backend < b.Backend
	})
	snap.All = summarize(all, allCounts, r.window)
	return snap
}

func summarize(ss []sample, counts GroupStats, window time.Duration) GroupStats {
	gs := counts
	gs.RPS = float64(gs.Requests) / window.Seconds()
	gs.Samples = len(ss)
	var ttft, tpot, speed, total []float64
	var sum Attribution
	var sumTTFT time.Duration
	reached := 0
	for _, s := range ss {
		total = append(total, msOf(s.total))
		if !s.ok {
			continue
		}
		if s.hasTTFT {
			ttft = append(ttft, msOf(s.ttft))
		}
		if s.tpot > 0 {
			tpot = append(tpot, msOf(s.tpot))
			speed = append(speed, s.speed)
		}
		if s.reached {
			reached++
			sumTTFT += s.ttft
			p := s.parts
			sum.Queue += p.Queue
			sum.Gateway += p.Gateway
			sum.Connect += p.Connect
			sum.Network += p.Network
			sum.ModelTTFT += p.ModelTTFT
			sum.Decode += p.Decode
			sum.Total += p.Total
		}
	}
	gs.TTFT, gs.TPOT, gs.Speed, gs.Total = quantiles(ttft), quantiles(tpot), quantiles(speed), quantiles(total)
	if reached > 0 {
		n := time.Duration(reached)
		mean := Attribution{Queue: sum.Queue / n, Gateway: sum.Gateway / n, Connect: sum.Connect / n, Network: sum.Network / n,
			ModelTTFT: sum.ModelTTFT / n, Decode: sum.Decode / n, Total: sum.Total / n}
		gs.Attribution = NewTiming(mean, sumTTFT/n)
	}
	return gs
}

// quantiles are v's percentiles (v is sorted here); nil for none.
func quantiles(v []float64) *Quantiles {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	q := quantile.ThreeOfSorted(v)
	return &q
}

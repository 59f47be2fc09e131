package tracing

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/quantile"
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

// Snapshot computes the figures of the window ending at now; the
// gateway's state is the caller's to fill in.
func (r *Recent) Snapshot(now time.Time) adminapi.Stats {
	snap := adminapi.Stats{Time: now, Window: r.window.Seconds(), Groups: []adminapi.GroupStats{}}
	from := now.Add(-r.window)
	var all []sample
	allCounts := adminapi.GroupStats{}
	r.mu.Lock()
	type taken struct {
		k       groupKey
		samples []sample
		counts  adminapi.GroupStats
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

func summarize(ss []sample, counts adminapi.GroupStats, window time.Duration) adminapi.GroupStats {
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
func quantiles(v []float64) *adminapi.Quantiles {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	q := quantile.ThreeOfSorted(v)
	return &q
}

package proxy

import (
	"math"
	"sync"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/tracing"
)

// Selection by the backends' load and by prefix affinity: every candidate
// scored at each pick, none of it under a pool-wide lock.

// Why a pick chose its backend: on the request's span and log line, and
// counted per backend.
const (
	routeLeast          = "least_outstanding"
	routeLoad           = "load"
	routeWarm           = "prefix_warm"            // the backend expected to hold the longest prefix
	routeCold           = "prefix_cold"            // no backend holds any of it: the least loaded
	routeSpillQueue     = "prefix_spill_queue"     // the warm backend queues requests
	routeSpillKV        = "prefix_spill_kv"        // the warm backend's KV cache is near full
	routeSpillImbalance = "prefix_spill_imbalance" // the warm backend carries far more than the least loaded
)

// routeReasons lists them, for metrics and stats.
var routeReasons = [...]string{routeLeast, WeightedRoundRobinPolicy, PowerOfTwoPolicy, routeLoad, routeWarm, routeCold, routeSpillQueue, routeSpillKV, routeSpillImbalance}

func reasonIndex(r string) int {
	for i, x := range routeReasons {
		if x == r {
			return i
		}
	}
	return 0
}

// scratch is one pick's working memory, pooled: the candidates'
// positions in the pool and their estimates.
type scratch struct {
	idx     []int
	est     []loadEstimate
	matched [affinity.MaxBackends]int
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{idx: make([]int, 0, 16), est: make([]loadEstimate, 0, 16)}
}}

// pickScored is pick for selection load and prefix. k is the request's
// prefix (nil or empty: none).
func (p *pool) pickScored(tried []*backend, now time.Time, k *affinity.Key) (*backend, func(error), string, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.idx, sc.est = sc.idx[:0], sc.est[:0]
	for i, b := range p.backends {
		if b.Available(now) && !contains(tried, b) {
			sc.idx = append(sc.idx, i)
			sc.est = append(sc.est, b.estimate(now, p.load.StaleAfter))
		}
	}
	for len(sc.idx) > 0 {
		c, why, matched := p.choose(sc, k)
		i := sc.idx[c]
		b := p.backends[i]
		if done, err := b.cb.Allow(); err == nil {
			if p.index != nil && k != nil && k.Blocks > 0 {
				p.index.Add(k, i)
				b.promptBlocks.Add(int64(k.Blocks))
				b.expectedBlocks.Add(int64(matched))
			}
			b.reasons[reasonIndex(why)].Add(1)
			return b, done, why, nil
		}
		// Open or half-open with its probes in use: the others.
		sc.idx = append(sc.idx[:c], sc.idx[c+1:]...)
		sc.est = append(sc.est[:c], sc.est[c+1:]...)
	}
	return nil, nil, "", ErrNoBackend
}

// choose returns the chosen candidate's position in sc, why, and the
// prefix blocks it is expected to hold.
func (p *pool) choose(sc *scratch, k *affinity.Key) (int, string, int) {
	// loadOf is a candidate's requests per unit of weight; costOf the
	// wait a new request there can expect: its requests, the new one
	// included, times how much slower than the fastest it decodes
	// (clamped to 8). A backend without a stream yet counts as the
	// fastest.
	loadOf := func(c int) float64 { return sc.est[c].total / float64(p.backends[sc.idx[c]].weight) }
	fastest := math.Inf(1)
	for _, i := range sc.idx {
		if t := p.backends[i].tpotAverage(); t > 0 {
			fastest = min(fastest, t)
		}
	}
	costOf := func(c int) float64 {
		b := p.backends[sc.idx[c]]
		f := 1.0
		if t := b.tpotAverage(); t > 0 && !math.IsInf(fastest, 1) {
			f = min(t/fastest, 8)
		}
		return (sc.est[c].total + 1) * f / float64(b.weight)
	}
	minLoad, minWaiting, minKV := math.Inf(1), math.Inf(1), math.Inf(1)
	for c := range sc.idx {
		minLoad = min(minLoad, loadOf(c))
		if w := sc.est[c].waiting; !math.IsNaN(w) {
			minWaiting = min(minWaiting, w)
		}
		if kv := sc.est[c].kv; !math.IsNaN(kv) {
			minKV = min(minKV, kv)
		}
	}
	why := routeLoad
	prefix := p.index != nil && k != nil && k.Len() > 0
	if prefix {
		why = routeCold
		var set uint64
		for _, i := range sc.idx {
			set |= 1 << (uint(i) % affinity.MaxBackends)
		}
		sc.matched = [affinity.MaxBackends]int{}
		if p.index.Match(k, set, &sc.matched) != 0 {
			best, bestM := -1, 0
			for c, i := range sc.idx {
				m := sc.matched[i%affinity.MaxBackends]
				if m > bestM || (m == bestM && m > 0 && loadOf(c) < loadOf(best)) {
					best, bestM = c, m
				}
			}
			// A spill costs a whole prefill elsewhere: only worth it when
			// another backend is clearly better off, or a fleet that is
			// queueing everywhere thrashes every cache at once.
			e, g := sc.est[best], &p.prefix
			switch {
			case e.waiting >= g.SpillWaiting && e.waiting-minWaiting >= g.SpillWaiting:
				why = routeSpillQueue
			case e.kv >= g.SpillKVUsage && minKV < g.SpillKVUsage:
				why = routeSpillKV
			case loadOf(best)-minLoad >= float64(g.SpillImbalance) && g.SpillImbalance > 0:
				why = routeSpillImbalance
			default:
				return best, routeWarm, bestM
			}
		}
	}
	// The least costly. Among equals: the one holding more of the prefix,
	// then a rendezvous hash of the prompt's start, so that gateways that
	// do not share their index send a new prefix to the same backend; for
	// selection load, a rotating start.
	best := -1
	var first uint64
	if prefix {
		first = k.First()
	} else {
		first = p.rr.Add(1)
	}
	var bestTie uint64
	for c, i := range sc.idx {
		l := costOf(c)
		m := 0
		if prefix {
			m = sc.matched[i%affinity.MaxBackends]
		}
		tie := mix64(first ^ p.backends[i].nameHash)
		if best < 0 {
			best, bestTie = c, tie
			continue
		}
		bl := costOf(best)
		bm := 0
		if prefix {
			bm = sc.matched[sc.idx[best]%affinity.MaxBackends]
		}
		if l < bl || (l == bl && (m > bm || (m == bm && tie > bestTie))) {
			best, bestTie = c, tie
		}
	}
	m := 0
	if prefix {
		m = sc.matched[sc.idx[best]%affinity.MaxBackends]
	}
	return best, why, m
}

// mix64 is splitmix64's finaliser: a well-spread hash of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// routingState fills in what selection load and prefix know of b.
func (p *pool) routingState(b *backend, now time.Time, bs *tracing.BackendState) {
	bs.Selection = LoadPolicy
	if p.index != nil {
		bs.Selection = PrefixPolicy
	}
	e := b.estimate(now, p.load.StaleAfter)
	l := &tracing.BackendLoad{Source: "gateway", Estimate: e.total}
	if e.fromMetrics {
		l.Source = "metrics"
	}
	st := b.load.Load()
	var last *loadReading
	if st != nil {
		last = st.last
		l.ScrapeFailures = st.failures
		if st.err != nil {
			l.Error = st.err.Error()
		}
	}
	if last != nil {
		l.Server, l.AgeMs = last.server, float64(now.Sub(last.at).Microseconds())/1000
		l.Running, l.Waiting, l.KVUsage, l.MaxRunning = finite(last.running), finite(last.waiting), finite(last.kv), finite(last.maxRunning)
		if !e.fromMetrics && l.Error == "" {
			l.Error = "the last reading is older than load.stale_after"
		}
	} else if l.Error == "" {
		l.Error = "no reading yet"
	}
	bs.Load = l
	bs.Routes = b.routes()
	if p.index == nil {
		return
	}
	x := &tracing.BackendPrefix{RoutedBlocks: b.promptBlocks.Load(), ExpectedBlocks: b.expectedBlocks.Load(),
		PromptTokens: b.usagePrompt.Load(), CachedTokens: b.usageCached.Load()}
	x.ExpectedRatio = ratio(x.ExpectedBlocks, x.RoutedBlocks)
	x.ReportedRatio = ratio(x.CachedTokens, x.PromptTokens)
	if last != nil && last.prefixQueries > 0 {
		r := last.prefHit / last.prefixQueries
		x.BackendRatio = &r
	}
	bs.Prefix = x
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func ratio(a, b int64) *float64 {
	if b <= 0 {
		return nil
	}
	r := float64(a) / float64(b)
	return &r
}

// routes is b's picks by reason, those with any.
func (b *backend) routes() map[string]int64 {
	out := map[string]int64{}
	for i, r := range routeReasons {
		if n := b.reasons[i].Load(); n > 0 {
			out[r] = n
		}
	}
	return out
}

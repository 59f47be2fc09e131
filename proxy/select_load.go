package proxy

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/tracing"
)

// loadSelector is selection load: the backend where a new request can
// expect the shortest wait, by the backends' own metrics (load.go scrapes
// them) corrected by what the gateway sent since, and by how fast each
// decodes. Every candidate is scored at each pick, none of it under a
// pool-wide lock.
type loadSelector struct {
	cfg LoadConfig
	rr  atomic.Uint64 // a rotating start among equals
}

// Select implements selector.
func (l *loadSelector) Select(s *pick) (int, reason) {
	l.estimate(s)
	return cheapest(s, l.rr.Add(1), false), reasonLoad
}

// estimate fills s.est with the candidates' load.
func (l *loadSelector) estimate(s *pick) {
	s.est = s.est[:0]
	for _, b := range s.cands {
		s.est = append(s.est, b.estimate(s.now, l.cfg.StaleAfter))
	}
}

// loadOf is candidate c's requests per unit of weight.
func (s *pick) loadOf(c int) float64 { return s.est[c].total / float64(s.cands[c].weight) }

// cheapest returns the candidate where a new request can expect the
// shortest wait: its requests, the new one included, times how much slower
// than the fastest it decodes (clamped to 8; a backend without a stream
// yet counts as the fastest), per unit of weight. Among equals: with
// byPrefix, the one holding more of the prefix; then a rendezvous hash of
// seed and the backend, so that gateways that do not share their index
// send a new prefix (seed: the prompt's start) to the same backend.
func cheapest(s *pick, seed uint64, byPrefix bool) int {
	fastest := math.Inf(1)
	for _, b := range s.cands {
		if t := b.tpotAverage(); t > 0 {
			fastest = min(fastest, t)
		}
	}
	best, bestCost, bestM, bestTie := -1, 0.0, 0, uint64(0)
	for c, b := range s.cands {
		f := 1.0
		if t := b.tpotAverage(); t > 0 && !math.IsInf(fastest, 1) {
			f = min(t/fastest, 8)
		}
		cost := (s.est[c].total + 1) * f / float64(b.weight)
		m := 0
		if byPrefix {
			m = s.matched[s.pos[c]%affinity.MaxBackends]
		}
		tie := mix64(seed ^ b.nameHash)
		if best < 0 || cost < bestCost || (cost == bestCost && (m > bestM || (m == bestM && tie > bestTie))) {
			best, bestCost, bestM, bestTie = c, cost, m, tie
		}
	}
	return best
}

// mix64 is splitmix64's finaliser: a well-spread hash of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// state fills in what selection load knows of b, for /admin/stats; it
// returns b's last reading (nil: none yet).
func (l *loadSelector) state(b *backend, now time.Time, bs *tracing.BackendState) *loadReading {
	bs.Selection = LoadPolicy
	e := b.estimate(now, l.cfg.StaleAfter)
	ld := &tracing.BackendLoad{Source: "gateway", Estimate: e.total}
	if e.fromMetrics {
		ld.Source = "metrics"
	}
	st := b.load.Load()
	var last *loadReading
	if st != nil {
		last = st.last
		ld.ScrapeFailures = st.failures
		if st.err != nil {
			ld.Error = st.err.Error()
		}
	}
	if last != nil {
		ld.Server, ld.AgeMs = last.server, float64(now.Sub(last.at).Microseconds())/1000
		ld.Running, ld.Waiting, ld.KVUsage, ld.MaxRunning = finite(last.running), finite(last.waiting), finite(last.kv), finite(last.maxRunning)
		if !e.fromMetrics && ld.Error == "" {
			ld.Error = "the last reading is older than load.stale_after"
		}
	} else if ld.Error == "" {
		ld.Error = "no reading yet"
	}
	bs.Load = ld
	return last
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

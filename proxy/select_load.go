package proxy

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/adminapi"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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

// estimate fills s.est with the candidates' load, and what a pick weighs
// of it: requests + prefill tokens / load.prefill_tokens (prefill.go),
// plus refusedPenalty while a backend is held back after an admission
// refusal (refusal.go), so it is picked only when every candidate is.
func (l *loadSelector) estimate(s *pick) {
	s.est = s.est[:0]
	for _, b := range s.cands {
		e := b.estimate(s.now, l.cfg.StaleAfter)
		if e.held {
			e.total += refusedPenalty
		}
		e.cost = e.total + e.prefill/l.cfg.PrefillTokens
		s.est = append(s.est, e)
	}
}

// loadOf is candidate c's requests per unit of weight.
func (s *pick) loadOf(c int) float64 { return s.est[c].total / float64(s.cands[c].weight) }

// cheapest returns the candidate where a new request can expect the
// shortest wait (pick.cost). Among equals: with byPrefix, the one
// holding more of the prefix; then a rendezvous hash of seed and the
// backend, so that gateways that do not share their index send a spilled
// prefix (seed: the prompt's start) to the same backend.
func cheapest(s *pick, seed uint64, byPrefix bool) int {
	fastest := s.fastestTPOT()
	best, bestCost, bestM, bestTie := -1, 0.0, 0, uint64(0)
	for c, b := range s.cands {
		cost := s.cost(c, fastest)
		m := 0
		if byPrefix {
			m = s.matched[s.pos[c]%affinity.MaxBackends]
		}
		tie := affinity.Mix(seed ^ b.nameHash)
		if best < 0 || cost < bestCost || (cost == bestCost && (m > bestM || (m == bestM && tie > bestTie))) {
			best, bestCost, bestM, bestTie = c, cost, m, tie
		}
	}
	return best
}

// state fills in what selection load knows of b, for /admin/stats; it
// returns b's last reading (nil: none yet).
func (l *loadSelector) state(b *backend, now time.Time, bs *adminapi.BackendState) *loadReading {
	bs.Selection = LoadPolicy
	e := b.estimate(now, l.cfg.StaleAfter)
	ld := &adminapi.BackendLoad{Source: "gateway", Estimate: e.total, PrefillTokens: e.prefill}
	if e.held {
		ld.HeldMs = float64(b.refusedUntil.Load()-now.UnixNano()) / 1e6
	}
	for r := range numRefusals {
		if n := b.refusals[r].Load(); n > 0 {
			if ld.Refusals == nil {
				ld.Refusals = map[string]int64{}
			}
			ld.Refusals[r.String()] = n
		}
	}
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
		ld.WaitingUncachedTokens = finite(last.waitingTokens)
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

// observeLoad registers, for the pools of selection load and prefix, each
// backend's picks by reason, its estimated load and its failed scrapes.
func (g *Gateway) observeLoad(meter metric.Meter) error {
	in := instruments{meter: meter}
	routed := in.counter("infergate.route.decisions", "{request}", "Picks of each backend by selection load and prefix, by reason (load, prefix_warm, prefix_cold, prefix_spill_queue, prefix_spill_kv, prefix_spill_imbalance, session_new, session_sticky, session_moved).")
	estimate := in.gauge("infergate.backend.load", "{request}", "Requests in each backend's batch and queue as selection load and prefix count them; source metrics (its own reading, corrected by the gateway's since) or gateway (its scrape failed or is stale).")
	scrapeFail := in.counter("infergate.backend.load_scrape_failures", "{scrape}", "Failed scrapes of each backend's metrics by selection load and prefix.")
	prefill := in.gauge("infergate.backend.prefill_tokens", "{token}", "Uncached prompt tokens each backend still has to prefill as selection load and prefix count them: its own figure (SGLang's /v1/loads) corrected by the gateway's sends, else the gateway's count of requests with no first token yet.")
	refusals := in.counter("infergate.backend.admission_refusals", "{request}", "Requests each backend refused at admission with vLLM's queue-full 503 (reason queued_requests or queued_tokens), each tried elsewhere or answered 503 by the gateway; any selection.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		for _, p := range g.state.Load().pools {
			for _, b := range p.backends {
				for r := range numRefusals {
					if n := b.refusals[r].Load(); n > 0 {
						o.ObserveInt64(refusals, n, backendAttrs(p, b, attribute.String("reason", r.String())))
					}
				}
			}
			if p.load == nil {
				continue
			}
			for _, b := range p.backends {
				for r := range numReasons {
					if n := b.reasons[r].Load(); n > 0 {
						o.ObserveInt64(routed, n, backendAttrs(p, b, attribute.String("reason", r.String())))
					}
				}
				e := b.estimate(now, p.load.cfg.StaleAfter)
				src := "gateway"
				if e.fromMetrics {
					src = "metrics"
				}
				o.ObserveInt64(estimate, int64(math.Round(e.total)), backendAttrs(p, b, attribute.String("source", src)))
				o.ObserveInt64(prefill, int64(math.Round(e.prefill)), backendAttrs(p, b))
				if st := b.load.Load(); st != nil {
					o.ObserveInt64(scrapeFail, st.failures, backendAttrs(p, b))
				}
			}
		}
		return nil
	})
}

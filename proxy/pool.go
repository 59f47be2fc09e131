package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/supervise"
)

// errAttemptFailed is what a failed attempt reports to its breaker.
var errAttemptFailed = errors.New("proxy: upstream attempt failed")

// pool is a named set of backends with a selection policy and, when
// configured, an active health checker. Close stops the checker.
type pool struct {
	name     string
	backends []*backend
	sel      selector
	placer   placer // sel, when it learns where requests went
	health   *backendLoops
	// Selection load and prefix read the backends' load (the scraper's);
	// prefix also the request's prompt. nil for the other selections.
	load    *loadSelector
	prefix  *prefixSelector
	scraper *backendLoops
}

// newPool builds a pool. A backend of reuse whose settings are unchanged
// is taken over (and removed from reuse) instead of made anew, so a reload
// keeps its connections, outstanding count, health and breaker state.
func newPool(name string, pc PoolConfig, connect time.Duration, log *slog.Logger, reuse map[string]*backend) (*pool, error) {
	p := &pool{name: name, sel: newSelector(name, pc)}
	p.placer, _ = p.sel.(placer)
	switch s := p.sel.(type) {
	case *loadSelector:
		p.load = s
	case *prefixSelector:
		p.load, p.prefix = &s.loadSelector, s
		var err error
		if s.exact, err = newExactIndex(pc, log); err != nil {
			return nil, fmt.Errorf("pool %s: %w", name, err)
		}
	}
	for _, bc := range pc.Backends {
		key := backendKey(bc, pc, connect)
		b, ok := reuse[key]
		if ok {
			delete(reuse, key)
		} else {
			var err error
			if b, err = newBackend(bc, pc, connect); err != nil {
				return nil, fmt.Errorf("pool %s: %w", name, err)
			}
			b.key = key
		}
		p.backends = append(p.backends, b)
	}
	if pc.Health.Path != "" {
		p.health = startHealth(p, pc.Health, log)
	}
	if p.load != nil {
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		p.scraper = startLoad(p, pc.Load, log)
	}
	return p, nil
}

// Backends returns the pool's backends.
func (p *pool) Backends() []*backend { return p.backends }

// Ready reports whether at least one backend is available.
func (p *pool) Ready(now time.Time) bool {
	for _, b := range p.backends {
		if b.Available(now) {
			return true
		}
	}
	return false
}

// pick chooses an available backend not in tried, by the pool's
// selector, and takes a breaker permit for it. The permit must be settled
// (Backend.settle) with the outcome. k is the request's prefix, for
// selection prefix (nil: none); the reason says why the backend was
// chosen, and blocks how many of k's blocks the index expects it to hold
// (0 without selection prefix).
func (p *pool) pick(tried []*backend, now time.Time, k *affinity.Key) (*backend, func(error), reason, int, error) {
	s := pickPool.Get().(*pick)
	defer s.release()
	s.key, s.now, s.blocks = k, now, 0
	for i, b := range p.backends {
		if b.Available(now) && !contains(tried, b) {
			s.cands = append(s.cands, b)
			s.pos = append(s.pos, i)
		}
	}
	for len(s.cands) > 0 {
		c, why := p.sel.Select(s)
		b := s.cands[c]
		if done, err := b.cb.Allow(); err == nil {
			if p.placer != nil {
				p.placer.placed(s, c, why)
			}
			b.reasons[why].Add(1)
			return b, done, why, s.blocks, nil
		}
		// Open or half-open with its probes in use: the others.
		s.drop(c)
	}
	return nil, nil, 0, 0, ErrNoBackend
}

// settle reports an attempt's outcome to b's breaker, through the permit
// pick gave, and to its ejection count.
func (b *backend) settle(permit func(error), ok bool) {
	if ok {
		permit(nil)
	} else {
		permit(errAttemptFailed)
	}
	b.result(ok, time.Now())
}

func contains(s []*backend, b *backend) bool {
	for _, x := range s {
		if x == b {
			return true
		}
	}
	return false
}

// Close stops health checks and drops idle connections. Safe to call twice.
func (p *pool) Close() { p.closeExcept(nil) }

// closeExcept is Close that leaves the connections of kept backends alone
// (a reload handed them to a new pool).
func (p *pool) closeExcept(kept map[*backend]bool) {
	if p.prefix != nil {
		p.prefix.exact.close()
	}
	if p.health != nil {
		p.health.close()
	}
	if p.scraper != nil {
		p.scraper.close()
	}
	for _, b := range p.backends {
		if !kept[b] {
			b.close()
		}
	}
}

// backendLoops runs one supervised loop per backend of a pool (health
// checks, load scrapes) until closed: a loop that panics is logged,
// counted and restarted.
type backendLoops struct {
	panics atomic.Int64 // recovered and restarted
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// startLoops starts run for every backend of p; what names the loop in
// the log of a panic.
func startLoops(p *pool, log *slog.Logger, what string, run func(b *backend, stop <-chan struct{}, log *slog.Logger)) *backendLoops {
	l := &backendLoops{stop: make(chan struct{})}
	for _, b := range p.backends {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			blog := log.With("pool", p.name, "backend", b.name)
			supervise.Loop(l.stop, func() { run(b, l.stop, blog) }, func(v any, stack []byte) {
				l.panics.Add(1)
				blog.Error("panic in a "+what+"; restarting it", "panic", fmt.Sprint(v), "stack", string(stack))
			})
		}()
	}
	return l
}

func (l *backendLoops) close() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// startHealth checks every backend of p on an interval.
func startHealth(p *pool, hc HealthConfig, log *slog.Logger) *backendLoops {
	return startLoops(p, log, "health check", func(b *backend, stop <-chan struct{}, log *slog.Logger) { runHealth(b, hc, stop, log) })
}

func runHealth(b *backend, hc HealthConfig, stop <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(hc.Interval)
	defer t.Stop()
	passes, fails := 0, 0
	for {
		err := b.probe(hc.Path, hc.Timeout)
		if err == nil {
			passes, fails = passes+1, 0
			if !b.healthy.Load() && passes >= hc.HealthyThreshold {
				b.healthy.Store(true)
				log.Info("backend healthy")
			}
		} else {
			passes, fails = 0, fails+1
			if b.healthy.Load() && fails >= hc.UnhealthyThreshold {
				b.healthy.Store(false)
				log.Warn("backend unhealthy", "err", err)
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

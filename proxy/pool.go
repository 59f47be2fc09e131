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
	"github.com/infergate/infergate/openai"
)

// errAttemptFailed is what a failed attempt reports to its breaker.
var errAttemptFailed = errors.New("proxy: upstream attempt failed")

// pool is a named set of backends with a selection policy and, when
// configured, an active health checker. Close stops the checker.
type pool struct {
	name     string
	backends []*backend
	sel      selector
	health   *backendLoops
	// Selection load and prefix: scored picks (route_select.go), the
	// backends' scraped load, and for prefix the index of prefixes.
	scored  bool
	load    LoadConfig
	prefix  PrefixConfig
	scraper *backendLoops
	index   *affinity.Index
	rr      atomic.Uint64
	// plainReason counts the picks of the other selections.
	plainReason int
}

// newPool builds a pool. A backend of reuse whose settings are unchanged
// is taken over (and removed from reuse) instead of made anew, so a reload
// keeps its connections, outstanding count, health and breaker state.
func newPool(name string, pc PoolConfig, connect time.Duration, log *slog.Logger, reuse map[string]*backend) (*pool, error) {
	p := &pool{name: name, sel: newSelector(pc.Selection), load: pc.Load, prefix: pc.Prefix,
		scored: pc.Selection == LoadPolicy || pc.Selection == PrefixPolicy, plainReason: reasonIndex(pc.Selection)}
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
	if p.scored {
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		p.scraper = startLoad(p, pc.Load, log)
	}
	if pc.Selection == PrefixPolicy {
		p.index = affinity.NewIndex(pc.Prefix.IndexEntries)
	}
	return p, nil
}

// hashPrefix writes the prefix key of a request body into k, for a pool
// of selection prefix; it reports whether it did.
func (p *pool) hashPrefix(body []byte, env *openai.Envelope, k *affinity.Key) bool {
	if p.index == nil {
		return false
	}
	var h affinity.Hasher
	h.Reset(k, p.prefix.BlockBytes, p.prefix.MaxPrefixBytes/p.prefix.BlockBytes)
	h.Request(body, env)
	return true
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

// pick chooses an available backend not in tried and takes a breaker
// permit for it. The permit must be settled (Backend.settle) with the
// outcome. k is the request's prefix, for selection prefix (nil: none);
// the reason says why the backend was chosen.
func (p *pool) pick(tried []*backend, now time.Time, k *affinity.Key) (*backend, func(error), string, error) {
	if p.scored {
		return p.pickScored(tried, now, k)
	}
	b, done, err := p.pickPlain(tried, now)
	if err == nil {
		b.reasons[p.plainReason].Add(1)
	}
	return b, done, "", err
}

// pickPlain is pick for the selectors that need nothing of the request.
func (p *pool) pickPlain(tried []*backend, now time.Time) (*backend, func(error), error) {
	var only *backend
	n := 0
	for _, b := range p.backends {
		if b.Available(now) && !contains(tried, b) {
			only = b
			n++
		}
	}
	switch n {
	case 0:
		return nil, nil, ErrNoBackend
	case 1:
		// Nothing to choose (the common single-backend pool): no list to
		// build for the selector.
		if done, err := only.cb.Allow(); err == nil {
			return only, done, nil
		}
		return nil, nil, ErrNoBackend
	}
	sp := candsPool.Get().(*[]*backend)
	defer candsPool.Put(sp)
	cands := (*sp)[:0]
	for _, b := range p.backends {
		if b.Available(now) && !contains(tried, b) {
			cands = append(cands, b)
		}
	}
	defer func() { clear(cands); *sp = cands[:0] }()
	for len(cands) > 0 {
		b := p.sel.Select(cands)
		done, err := b.cb.Allow()
		if err == nil {
			return b, done, nil
		}
		// Open or half-open with its probes in use: try the others.
		cands = remove(cands, b)
	}
	return nil, nil, ErrNoBackend
}

// candsPool holds pick's candidate lists: the selector is an interface,
// so a list on pick's stack would escape to the heap on every request.
var candsPool = sync.Pool{New: func() any { s := make([]*backend, 0, 16); return &s }}

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

func remove(s []*backend, b *backend) []*backend {
	for i, x := range s {
		if x == b {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// Close stops health checks and drops idle connections. Safe to call twice.
func (p *pool) Close() { p.closeExcept(nil) }

// closeExcept is Close that leaves the connections of kept backends alone
// (a reload handed them to a new pool).
func (p *pool) closeExcept(kept map[*backend]bool) {
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

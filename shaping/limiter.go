package shaping

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/reqctx"
	"github.com/redis/go-redis/v9"
)

// Sentinel errors of Acquire. A refusal wraps ErrQueueFull or
// ErrQueueTimeout, and also ErrTenantCap when the tenant's own cap was
// what was full (the proxy answers 429 then, 503 otherwise).
var (
	// ErrSharedDown refuses a request while Redis is down in fail-closed
	// mode.
	ErrSharedDown   = errors.New("shaping: shared caps unavailable (redis down, fail-closed)")
	ErrQueueFull    = errors.New("shaping: queue full")
	ErrQueueTimeout = errors.New("shaping: waited past the queue timeout")
	ErrTenantCap    = errors.New("shaping: tenant's cap reached")
	// ErrClassCap is wrapped like ErrTenantCap when the request's class
	// cap was what was full (the proxy answers 429 then).
	ErrClassCap = errors.New("shaping: class's cap reached")
	// ErrShed: the request waited in the queue and was taken out for a
	// request of a higher class when the queue was full.
	ErrShed = errors.New("shaping: shed from the queue for a request of a higher class")
)

// Request is what a request asks of the caps.
type Request struct {
	Tenant, Pool, Model string
	// Tokens is the request's token budget: prompt tokens plus the output
	// it may ask for. It counts against token caps only.
	Tokens int64
	// Class is the request's service class (with classes enabled; the
	// zero value is ClassDefault).
	Class Class
}

// counter is one cap's in-flight count. Guarded by the limiter's mutex.
type counter struct {
	reqs, toks       int64
	maxReqs, maxToks int64
	// heldReqs and heldToks are what class k may not take of the cap: the
	// reserves of the classes above it (classes.<class>.reserved). Set on
	// global, pool and model caps only.
	heldReqs, heldToks [NumClasses]int64
}

// fits reports whether the cap has room for a request of tokens, of the
// highest class (nothing held from it).
func (c *counter) fits(tokens int64) bool {
	return (c.maxReqs == 0 || c.reqs < c.maxReqs) && (c.maxToks == 0 || c.toks+tokens <= c.maxToks || c.toks == 0)
}

// fitsAs is fits for a request of class k: the reserves above k count as
// taken. A request larger than a whole token cap still goes alone.
func (c *counter) fitsAs(tokens int64, k Class) bool {
	return (c.maxReqs == 0 || c.reqs < c.maxReqs-c.heldReqs[k]) &&
		(c.maxToks == 0 || c.toks+tokens <= c.maxToks-c.heldToks[k] || c.toks == 0)
}

// setMax sets the cap's limits, n requests and t tokens as configured,
// and what each class may not take of them (the reserves above it, in
// this process's share when the caps are shared and Redis is down).
func (l *Limiter) setMax(c *counter, n, t int64) {
	c.maxReqs, c.maxToks = l.localCap(n), l.localCap(t)
	for _, k := range ClassesByRank {
		hr, ht := l.cfg.Classes.HeldFrom(k)
		c.heldReqs[k], c.heldToks[k] = 0, 0
		if n > 0 && hr > 0 {
			c.heldReqs[k] = c.maxReqs - l.localCap(max(n-hr, 1))
		}
		if t > 0 && ht > 0 {
			c.heldToks[k] = c.maxToks - l.localCap(max(t-ht, 1))
		}
	}
}

// Limiter admits requests under the caps of a Config. It is safe for
// concurrent use. One mutex guards all its state: every section under it
// is a few comparisons, so it is cheaper than atomics that would have to
// roll back when a later cap is full.
type Limiter struct {
	mu      sync.Mutex
	cfg     Config
	global  counter
	pools   map[string]*counter
	models  map[string]*counter
	tenants map[string]*tenant
	// classes are the class caps, and armed the requests that may be
	// preempted, per class, oldest first (preempt.go).
	classes [NumClasses]counter
	armed   [NumClasses]list.List
	// spare is the last tenant forgotten, made again for the next new
	// name: the anonymous tenant and a client's one-off key come and go
	// with every request, and would otherwise cost an allocation each.
	spare *tenant
	q     fairQueue
	// holdEWMA is the mean time a permit is held, for Retry-After.
	holdEWMA time.Duration
	stats    Stats

	// Shared mode (shared.go); shared is nil when the caps are local.
	shared *sharedCaps
	// posted is what the dispatcher last posted to the waiting board
	// (board.go), and when.
	posted   [NumClasses]int
	postedAt time.Time
	// boardStreak counts lower-class tries in a row a shared cap refused
	// (boardFor); guarded by mu.
	boardStreak int
	sharedUp    atomic.Bool
	panics      atomic.Int64 // recovered in shared mode's loops
	// relOverflow counts leases the release queue had no room for, since
	// the releaser last looked; leasesExpiring all of them.
	relOverflow, leasesExpiring atomic.Int64
	leaseN                      atomic.Uint64
	leases                      map[string]lease // held in Redis, renewed by the renewer
	// orphans are slots granted under local caps while Redis was down;
	// they are registered in Redis when it answers again (adopt).
	orphans map[*lease]orphan
	wake    chan struct{} // the shared dispatcher's doorbell
	relq    chan lease    // leases to give back, off the request path
	stop    chan struct{}
	wg      sync.WaitGroup
	log     *slog.Logger
}

// New returns a limiter for cfg (after Defaults). With cfg.Redis.Addr
// set the caps are shared through Redis and the limiter runs goroutines
// until Close; log receives Redis's changes of state (nil: discarded).
func New(cfg Config, log *slog.Logger) (*Limiter, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Limiter{pools: map[string]*counter{}, models: map[string]*counter{}, tenants: map[string]*tenant{}, log: log}
	l.apply(cfg)
	if cfg.Redis.Addr != "" {
		// No retries inside go-redis: a failed call counts Redis down at
		// once and on_failure applies; the dispatcher's ping brings it back.
		rc := redis.NewClient(&redis.Options{Addr: cfg.Redis.Addr, Username: cfg.Redis.Username, Password: os.Getenv(cfg.Redis.PasswordEnv),
			DB: cfg.Redis.DB, DialTimeout: cfg.Redis.OpTimeout, ReadTimeout: cfg.Redis.OpTimeout, WriteTimeout: cfg.Redis.OpTimeout, MaxRetries: -1})
		l.startShared(rc, cfg.Redis)
	}
	return l, nil
}

// Reconfigure changes the caps. Requests in flight keep their slots and
// are counted against the new caps; waiters that now fit are admitted.
func (l *Limiter) Reconfigure(cfg Config) error {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cfg.Redis != l.cfg.Redis {
		return errors.New("shaping: redis: changing the redis section needs a restart")
	}
	l.apply(cfg)
	l.dispatchAny()
	return nil
}

// apply sets the caps of cfg on the counters, keeping their counts. A
// level that is no longer configured keeps counting, without a limit,
// until its requests are done. Called with l.mu held (or before use).
func (l *Limiter) apply(cfg Config) {
	l.cfg = cfg
	l.setMax(&l.global, cfg.Global.MaxRequests, cfg.Global.MaxTokens)
	l.setCaps(l.pools, cfg.Pools)
	l.setCaps(l.models, cfg.Models)
	for _, k := range ClassesByRank {
		cc := cfg.Classes.Of(k)
		l.classes[k].maxReqs, l.classes[k].maxToks = l.localCap(cc.MaxRequests), l.localCap(cc.MaxTokens)
	}
	l.q.share = 0
	if cfg.Classes.Enabled {
		l.q.share = cfg.Classes.LowerShare
	}
	for name, t := range l.tenants {
		t.setConfig(l.tenantConfig(name))
	}
}

// localCap is what a cap allows this process alone: all of it, or with
// shared caps (used only while Redis is down, in fail-open mode) its share
// among the expected replicas, at least 1.
func (l *Limiter) localCap(n int64) int64 {
	if r := int64(l.cfg.Redis.ExpectedReplicas); l.cfg.Redis.Addr != "" && n > 0 && r > 1 {
		return max(1, n/r)
	}
	return n
}

func (l *Limiter) setCaps(m map[string]*counter, caps map[string]Cap) {
	for name, c := range m {
		if _, ok := caps[name]; !ok {
			l.setMax(c, 0, 0)
		}
	}
	for name, cp := range caps {
		c := m[name]
		if c == nil {
			c = &counter{}
			m[name] = c
		}
		l.setMax(c, cp.MaxRequests, cp.MaxTokens)
	}
}

// tenantConfig is the tenant's configuration, its caps as this process
// counts them locally.
func (l *Limiter) tenantConfig(name string) Tenant {
	t, ok := l.cfg.Tenants[name]
	if !ok {
		t = l.cfg.DefaultTenant
	}
	t.MaxRequests, t.MaxTokens = l.localCap(t.MaxRequests), l.localCap(t.MaxTokens)
	return t
}

// tenantFor returns the tenant's state, made on first use.
func (l *Limiter) tenantFor(name string) *tenant {
	t := l.tenants[name]
	if t == nil {
		if t = l.spare; t != nil {
			l.spare = nil
			*t = tenant{name: name}
			t.init()
		} else {
			t = newTenant(name)
		}
		t.setConfig(l.tenantConfig(name))
		l.tenants[name] = t
	}
	return t
}

// Permit is a granted slot. Release it exactly once, when the request is
// done; Release on a released (or zero) Permit does nothing. A Permit
// must not be copied after Acquire returns it.
type Permit struct {
	l                              *Limiter
	pool, model, tenantCt, classCt *counter
	tenant                         *tenant
	class                          Class
	rec                            *armed // set while it may be preempted (preempt.go)
	byShare                        bool   // granted by the lower classes' share: never preempted
	tokens                         int64
	since                          time.Time
	lease                          *lease // held in Redis; nil with local caps
	// Waited is how long the request queued.
	Waited time.Duration
}

// Acquire waits for a slot under every cap that applies to r, in the
// queue when they are full, until ctx ends or the queue timeout passes.
// It never waits when the caps have room and nobody is waiting.
func (l *Limiter) Acquire(ctx context.Context, r Request) (Permit, error) {
	l.mu.Lock()
	p := l.slots(r)
	var tenantFull, classFull bool
	// sharedFull: Redis said a cap is full (preemption may help then).
	sharedFull := false
	if l.shared != nil && l.sharedUp.Load() {
		// Redis is asked without the lock; meanwhile the tenant must not
		// be forgotten as idle.
		t := p.tenant
		t.dispatching++
		empty := l.q.empty()
		l.mu.Unlock()
		var ok bool
		var full *sharedCap
		var err error
		if empty {
			ok, full, err = l.tryShared(ctx, &p)
		}
		l.mu.Lock()
		t.dispatching--
		if ok {
			l.mu.Unlock()
			return p, nil
		}
		if err != nil && ctx.Err() != nil {
			// The request left while Redis was asked (its grant, if any,
			// is given back): nothing to queue.
			l.stats.Cancelled++
			l.forget(t)
			l.mu.Unlock()
			return Permit{}, reqctx.Cause(ctx)
		}
		tenantFull = full != nil && full.tenant
		classFull = full != nil && full.level == "class"
		sharedFull = full != nil && !full.tenant
	} else {
		if l.shared != nil && l.cfg.Redis.OnFailure == "closed" {
			l.stats.RejectedShared++
			l.forget(p.tenant)
			l.mu.Unlock()
			return Permit{}, ErrSharedDown
		}
		if l.q.empty() && p.fits() {
			l.take(&p)
			l.orphan(&p)
			l.mu.Unlock()
			return p, nil
		}
		tenantFull = !p.tenantCt.fits(r.Tokens)
		classFull = p.classCt != nil && !p.classCt.fits(r.Tokens)
	}
	queueFull := l.cfg.Queue.MaxWaiting < 0 || l.q.n >= l.cfg.Queue.MaxWaiting
	// A tenant past its share of a queue that still has room is refused
	// as its own cap's doing (429): that room is kept for the others.
	overShare := l.cfg.Queue.MaxWaitingPerTenant > 0 && p.tenant.nWaiting >= l.cfg.Queue.MaxWaitingPerTenant
	// A full queue makes room by shedding a waiter of a lower class, but
	// not for a request that would be refused anyway.
	if queueFull && !overShare && l.cfg.Queue.MaxWaiting > 0 && l.shed(p.class) {
		queueFull = false
	}
	overShare = overShare && !queueFull
	if overShare {
		tenantFull = true
	}
	if queueFull || overShare {
		l.stats.RejectedFull++
		if tenantFull {
			l.stats.RejectedFullTenant++
		}
		l.forget(p.tenant)
		l.mu.Unlock()
		return Permit{}, rejection(ErrQueueFull, tenantFull, classFull && !tenantFull)
	}
	w := l.q.push(p.tenant, p)
	w.tenantFull, w.classFull = tenantFull, classFull
	l.stats.Queued++
	l.stats.Classes[p.class].Queued++
	// Its caps may have room while others' do not: it need not wait for
	// a release.
	l.dispatchAny()
	timeout := l.cfg.Queue.Timeout
	var victim *armed
	if l.cfg.Classes.Enabled {
		timeout = l.cfg.Classes.Of(p.class).QueueTimeout
		if !w.granted {
			victim = l.preemptFor(w, sharedFull)
		}
	}
	l.mu.Unlock()
	if victim != nil {
		victim.cancel(p.class) // outside the lock: it cancels a request
	}
	return l.wait(ctx, w, timeout)
}

// wait blocks until w is granted, ctx ends or timeout passes.
func (l *Limiter) wait(ctx context.Context, w *waiter, timeout time.Duration) (Permit, error) {
	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		if w.shed {
			return Permit{}, l.shedDone(w)
		}
		p := w.permit
		p.Waited = time.Since(start)
		return p, nil
	case <-ctx.Done():
		err = reqctx.Cause(ctx)
	case <-timer.C:
		err = ErrQueueTimeout
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case w.shed:
		// Shed as the wait ended: shedDone's work, under the lock held.
		l.forget(w.permit.tenant)
		return Permit{}, ErrShed
	case w.granted:
		// Granted just as the wait ended: give the slot back.
		p := w.permit
		l.giveBack(&p)
		l.dispatchAny()
	case w.dispatching:
		// The shared dispatcher holds it: it gives back what it gets.
		w.gone = true
	default:
		l.q.remove(w)
	}
	tenantFull, classFull := w.tenantFull, w.classFull
	if l.shared == nil {
		tenantFull = !w.permit.tenantCt.fits(w.permit.tokens)
		classFull = w.permit.classCt != nil && !w.permit.classCt.fits(w.permit.tokens)
	}
	l.forget(w.permit.tenant)
	if !errors.Is(err, ErrQueueTimeout) {
		l.stats.Cancelled++
		return Permit{}, fmt.Errorf("shaping: left the queue: %w", err)
	}
	l.stats.RejectedTimeout++
	l.stats.Classes[w.permit.class].TimedOut++
	if tenantFull {
		l.stats.RejectedTimeoutTenant++
	}
	return Permit{}, rejection(ErrQueueTimeout, tenantFull, classFull && !tenantFull)
}

func rejection(err error, tenantFull, classFull bool) error {
	switch {
	case tenantFull:
		return fmt.Errorf("%w: %w", err, ErrTenantCap)
	case classFull:
		return fmt.Errorf("%w: %w", err, ErrClassCap)
	}
	return err
}

// slots finds the counters r counts against. Called with l.mu held.
func (l *Limiter) slots(r Request) Permit {
	t := l.tenantFor(r.Tenant)
	p := Permit{l: l, pool: l.pools[r.Pool], model: l.models[r.Model], tenant: t, tenantCt: &t.ct, tokens: r.Tokens}
	if l.cfg.Classes.Enabled && r.Class < NumClasses {
		p.class, p.classCt = r.Class, &l.classes[r.Class]
	}
	return p
}

// fits reports whether every cap of p has room, the reserves of the
// classes above p's counted as taken. Called with l.mu held.
func (p *Permit) fits() bool {
	l, k := p.l, p.class
	return l.global.fitsAs(p.tokens, k) && (p.pool == nil || p.pool.fitsAs(p.tokens, k)) &&
		(p.model == nil || p.model.fitsAs(p.tokens, k)) && p.tenantCt.fits(p.tokens) && (p.classCt == nil || p.classCt.fits(p.tokens))
}

// take counts p in every cap. Called with l.mu held.
func (l *Limiter) take(p *Permit) {
	for _, c := range [...]*counter{&l.global, p.pool, p.model, p.tenantCt, p.classCt} {
		if c != nil {
			c.reqs++
			c.toks += p.tokens
		}
	}
	p.tenant.inFlight++
	p.since = time.Now()
	l.stats.Admitted++
	l.stats.Classes[p.class].Admitted++
}

// giveBack uncounts p. Called with l.mu held.
func (l *Limiter) giveBack(p *Permit) {
	for _, c := range [...]*counter{&l.global, p.pool, p.model, p.tenantCt, p.classCt} {
		if c != nil {
			c.reqs--
			c.toks -= p.tokens
		}
	}
	p.tenant.inFlight--
	if held := time.Since(p.since); held > 0 {
		l.holdEWMA += (held - l.holdEWMA) / 16
	}
	if p.lease != nil {
		if p.lease.id != "" {
			l.releaseLease(*p.lease)
		} else {
			delete(l.orphans, p.lease)
		}
		p.lease = nil
	}
	l.forget(p.tenant)
}

// forget drops an idle tenant's state, so tenants that come and go (one
// per API key) do not pile up. Called with l.mu held.
func (l *Limiter) forget(t *tenant) {
	// The unnamed tenant stays; a forgotten one is the spare, which
	// nothing refers to any more.
	if t.idle() && t.name != "" && l.tenants[t.name] == t {
		delete(l.tenants, t.name)
		l.spare = t
	}
}

// Release gives the slot back and admits whoever now fits.
func (p *Permit) Release() {
	l := p.l
	if l == nil {
		return
	}
	l.mu.Lock()
	if rec := p.rec; rec == nil || l.disarm(rec) {
		l.giveBack(p)
	} // else preempted: the limiter gave the slot back then
	l.dispatchAny()
	l.mu.Unlock()
	*p = Permit{}
}

// dispatchAny admits waiters: here, under the local caps, or, with shared
// caps up, by ringing the shared dispatcher. Called with l.mu held.
func (l *Limiter) dispatchAny() {
	switch {
	case l.shared == nil:
		l.dispatch()
	case l.sharedUp.Load():
		l.ring()
	case l.cfg.Redis.OnFailure == "open":
		l.dispatch()
	}
	// Shared, down and fail-closed: waiters wait for Redis or their time.
}

// dispatch admits waiters, fairest first, while their caps have room.
// Called with l.mu held; it signals without blocking.
func (l *Limiter) dispatch() {
	for !l.q.empty() {
		w := l.q.next(func(w *waiter) bool { return w.permit.fits() })
		if w == nil {
			return
		}
		l.take(&w.permit)
		l.orphan(&w.permit)
		w.granted = true
		close(w.ready)
	}
}

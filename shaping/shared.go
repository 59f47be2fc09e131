package shaping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/infergate/infergate/internal/reqctx"
	"github.com/infergate/infergate/internal/supervise"
	"github.com/redis/go-redis/v9"
)

// Shared mode: the caps live in Redis as leases (redis.go). A request
// whose caps have room takes a lease in one round trip; one that finds
// them full waits in this process's fair queue, and a dispatcher
// goroutine asks Redis for the fairest waiter whenever a slot may have
// come free: a release anywhere (pub/sub), a release here, or a poll
// (slots of a replica that died come back by expiry, unannounced). Leases
// are renewed while held and given back off the request path. While
// Redis is down the limiter falls back to local caps (fail-open) or
// refuses (fail-closed), and goes back on its own when Redis answers.

// startShared starts the goroutines of shared mode. Close stops them.
func (l *Limiter) startShared(c rediser, cfg RedisConfig) {
	l.shared = newSharedCaps(c, cfg)
	l.leases = map[string]lease{}
	l.orphans = map[*lease]orphan{}
	l.wake = make(chan struct{}, 1)
	l.relq = make(chan lease, 1<<16)
	l.stop = make(chan struct{})
	l.sharedUp.Store(l.shared.ping(context.Background()) == nil)
	if !l.sharedUp.Load() {
		l.stats.SharedDownTransitions++
		l.log.Warn("shaping: redis down at start; caps are local until it answers", "addr", cfg.Addr, "on_failure", cfg.OnFailure)
	}
	l.wg.Add(4)
	go l.supervised("dispatcher", l.dispatcher)
	go l.supervised("renewer", l.renewer)
	go l.supervised("releaser", l.releaser)
	go l.supervised("subscriber", l.subscriber)
}

// supervised runs one of shared mode's goroutines until Close: a panic is
// logged with its stack, counted (Stats.Panics) and the loop restarted,
// so the caps never silently stop being shared.
func (l *Limiter) supervised(name string, loop func()) {
	defer l.wg.Done()
	supervise.Loop(l.stop, loop, func(v any, stack []byte) {
		l.panics.Add(1)
		l.log.Error("shaping: panic in a background loop; restarting it", "loop", name, "panic", fmt.Sprint(v), "stack", string(stack))
	})
}

// Close stops shared mode's goroutines, after giving back the leases
// queued for release, and closes the Redis client. It is safe to call
// twice and on a local limiter.
func (l *Limiter) Close() error {
	if l.shared == nil {
		return nil
	}
	l.mu.Lock()
	select {
	case <-l.stop:
		l.mu.Unlock()
		return nil
	default:
		close(l.stop)
	}
	l.mu.Unlock()
	l.wg.Wait()
	if c, ok := l.shared.c.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// ring wakes the dispatcher without blocking.
func (l *Limiter) ring() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// sharedCaps lists the caps of p that have a limit, as Redis keeps them.
// Called with l.mu held.
func (l *Limiter) sharedCaps(p *Permit) []sharedCap {
	var out []sharedCap
	add := func(level, name string, c Cap, tenant bool) {
		if c.MaxRequests > 0 || c.MaxTokens > 0 {
			out = append(out, sharedCap{level: level, name: name, maxReqs: c.MaxRequests, maxToks: c.MaxTokens, tenant: tenant,
				wakeReqs: c.MaxRequests, wakeToks: c.MaxTokens})
		}
	}
	// A capped level (global, pool, model) is passed to Redis with the
	// reserves above p's class taken off: what p's class may fill of it
	// (classes.<class>.reserved). Its release wakes waiters from the
	// lowest class's limit up, for they may be waiting on it.
	heldR, heldT := l.cfg.Classes.HeldFrom(p.class)
	floorR, floorT := l.cfg.Classes.HeldFrom(ClassFlex)
	addLevel := func(level, name string, c Cap) {
		n := len(out)
		add(level, name, c, false)
		if len(out) == n {
			return
		}
		sc := &out[n]
		sc.reserveCut = heldR > 0 && c.MaxRequests > 0 || heldT > 0 && c.MaxTokens > 0 ||
			l.cfg.Classes.Enabled && p.class != ClassesByRank[0] && c.MaxRequests > 0 // the waiting board cuts it
		if c.MaxRequests > 0 {
			sc.maxReqs, sc.wakeReqs = c.MaxRequests-heldR, c.MaxRequests-floorR
		}
		if c.MaxTokens > 0 {
			sc.maxToks, sc.wakeToks = c.MaxTokens-heldT, c.MaxTokens-floorT
		}
	}
	addLevel("global", "", l.cfg.Global)
	for name, c := range l.pools {
		if c == p.pool {
			addLevel("pool", name, l.cfg.Pools[name])
		}
	}
	for name, c := range l.models {
		if c == p.model {
			addLevel("model", name, l.cfg.Models[name])
		}
	}
	t, ok := l.cfg.Tenants[p.tenant.name]
	if !ok {
		t = l.cfg.DefaultTenant
	}
	add("tenant", p.tenant.name, t.Cap, true)
	if p.classCt != nil {
		add("class", p.class.String(), l.cfg.Classes.Of(p.class).Cap, false)
	}
	return out
}

// tryShared asks Redis for p's lease. ok: granted and counted; full: the
// cap that had no room; an error marks Redis down.
func (l *Limiter) tryShared(ctx context.Context, p *Permit) (ok bool, full *sharedCap, err error) {
	l.mu.Lock()
	caps := l.sharedCaps(p)
	board := l.boardFor(p)
	l.mu.Unlock()
	id := l.shared.leaseID(l.leaseN.Add(1))
	// The call runs under Redis's own timeout, not the request's: a client
	// that hangs up meanwhile must not make Redis look down.
	ls, full, err := l.shared.acquire(context.WithoutCancel(ctx), id, caps, p.tokens, board)
	if err != nil {
		l.down(err)
		return false, nil, err
	}
	l.mu.Lock()
	l.boardHeld(p, full)
	if full != nil {
		l.mu.Unlock()
		return false, full, nil
	}
	l.take(p)
	p.lease = &ls
	l.leases[ls.id] = ls
	l.mu.Unlock()
	if ctx.Err() != nil {
		// Granted to a request that already left: given back at once
		// (Release clears the permit, so keep what the caller needs).
		t := p.tenant
		p.Release()
		p.tenant = t
		return false, nil, reqctx.Cause(ctx)
	}
	return true, nil, nil
}

// orphan is a slot granted under local caps while Redis was down.
type orphan struct {
	caps   []sharedCap
	tokens int64
}

// orphan notes p, just granted under local caps, when the caps are shared:
// Redis must learn of it once it answers. Called with l.mu held.
func (l *Limiter) orphan(p *Permit) {
	if l.shared == nil {
		return
	}
	p.lease = &lease{}
	l.orphans[p.lease] = orphan{caps: l.sharedCaps(p), tokens: p.tokens}
}

// adopt makes Redis count every slot held here before shared admission
// resumes: those granted while it was down, and those it lost meanwhile
// (a restarted Redis keeps nothing; a lease not renewed in time expires).
// They are counted whatever the caps say: their requests are running.
func (l *Limiter) adopt() error {
	l.mu.Lock()
	pending := make(map[*lease]orphan, len(l.orphans))
	for ls, o := range l.orphans {
		pending[ls] = o
	}
	l.mu.Unlock()
	if err := l.renewHeld(); err != nil {
		return err
	}
	for ls, o := range pending {
		got := l.shared.newLease(l.shared.leaseID(l.leaseN.Add(1)), o.caps, o.tokens)
		if err := l.shared.reassert(context.Background(), got); err != nil {
			return err
		}
		l.mu.Lock()
		if _, still := l.orphans[ls]; still {
			*ls = got
			delete(l.orphans, ls)
			l.leases[got.id] = got
		} else {
			l.releaseLease(got) // it ended meanwhile
		}
		l.mu.Unlock()
	}
	return nil
}

// releaseLease hands l's lease to the releaser. Called with l.mu held:
// it neither logs nor blocks (the releaser logs an overflow).
func (l *Limiter) releaseLease(ls lease) {
	delete(l.leases, ls.id)
	select {
	case l.relq <- ls:
	default:
		// The releaser is behind: this lease expires by its TTL instead.
		l.relOverflow.Add(1)
	}
}

// down notes that Redis failed; the first failure is logged. An error
// Redis answered with (a script's) is logged but leaves it up: Redis is
// reachable, and the lease at stake expires by its TTL.
func (l *Limiter) down(err error) {
	var reply redis.Error
	if errors.As(err, &reply) && !errors.Is(err, context.DeadlineExceeded) {
		l.log.Error("shaping: redis refused a script", "err", err)
		return
	}
	if l.sharedUp.CompareAndSwap(true, false) {
		l.mu.Lock()
		l.stats.SharedDownTransitions++
		l.mu.Unlock()
		l.log.Error("shaping: redis down; caps are local until it answers", "err", err, "on_failure", l.shared.cfg.OnFailure)
	}
}

// dispatcher admits waiters through Redis when a slot may be free, and
// checks on a down Redis.
func (l *Limiter) dispatcher() {
	tick := time.NewTicker(l.shared.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.wake:
		case <-tick.C:
			if !l.sharedUp.Load() {
				if l.shared.ping(context.Background()) != nil {
					continue
				}
				if err := l.adopt(); err != nil {
					continue
				}
				l.sharedUp.Store(true)
				l.log.Info("shaping: redis answers again; caps are shared", "addr", l.shared.cfg.Addr)
			}
		}
		l.dispatchShared()
		l.postBoard()
	}
}

// dispatchShared grants waiters, fairest first, while Redis has room.
// A waiter whose own tenant cap is full does not stop the others; nor
// does one whose class's cap is full, or one a capped level refused only
// for the reserves of the classes above it: its class is passed over,
// the classes above it still have room to try.
func (l *Limiter) dispatchShared() {
	blocked := map[*tenant]bool{}
	var classBlocked [NumClasses]bool
	for {
		l.mu.Lock()
		if !l.sharedUp.Load() {
			l.dispatchAny()
			l.mu.Unlock()
			return
		}
		w := l.q.next(func(w *waiter) bool { return !blocked[w.permit.tenant] && !classBlocked[w.permit.class] })
		if w == nil {
			l.mu.Unlock()
			return
		}
		w.dispatching = true
		w.permit.tenant.dispatching++
		caps := l.sharedCaps(&w.permit)
		board := l.boardFor(&w.permit)
		l.mu.Unlock()

		id := l.shared.leaseID(l.leaseN.Add(1))
		ls, full, err := l.shared.acquire(context.Background(), id, caps, w.permit.tokens, board)

		l.mu.Lock()
		w.dispatching = false
		w.permit.tenant.dispatching--
		if err == nil {
			l.boardHeld(&w.permit, full)
		}
		switch {
		case err != nil || full != nil:
			if w.permit.byShare {
				// The lower classes' share was not used: it stays due.
				w.permit.byShare = false
				l.q.streak = max(l.q.streak, l.q.share-1)
			}
			if w.gone {
				l.forget(w.permit.tenant)
			} else {
				l.q.pushFront(w)
				w.tenantFull = full != nil && full.tenant
				w.classFull = full != nil && full.level == "class"
			}
			l.mu.Unlock()
			if err != nil {
				l.down(err)
				return
			}
			if full.tenant {
				blocked[w.permit.tenant] = true
				continue
			}
			if full.level == "class" || full.reserveCut {
				classBlocked[w.permit.class] = true
				continue
			}
			return
		case w.gone:
			// Its client left while Redis was asked.
			l.forget(w.permit.tenant)
			select {
			case l.relq <- ls:
			default:
			}
		default:
			l.take(&w.permit)
			w.permit.lease = &ls
			l.leases[ls.id] = ls
			w.granted = true
			close(w.ready)
		}
		l.mu.Unlock()
	}
}

// renewer extends the leases held here every third of their TTL.
func (l *Limiter) renewer() {
	tick := time.NewTicker(l.shared.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if !l.sharedUp.Load() {
			continue
		}
		if err := l.renewHeld(); err != nil {
			l.down(err)
		}
	}
}

// renewHeld extends every lease held here, in pipelined batches, and puts
// back those Redis lost (expired unrenewed, or a restarted Redis): their
// requests still run and must be counted.
func (l *Limiter) renewHeld() error {
	l.mu.Lock()
	held := make([]lease, 0, len(l.leases))
	for _, ls := range l.leases {
		held = append(held, ls)
	}
	l.mu.Unlock()
	putBack := 0
	defer func() {
		if putBack > 0 {
			l.log.Warn("shaping: leases Redis had lost were put back", "leases", putBack)
		}
	}()
	for len(held) > 0 {
		n := min(len(held), 512)
		lost, err := l.shared.renew(context.Background(), held[:n])
		if err != nil {
			return err
		}
		held = held[n:]
		k, err := l.putBack(lost)
		putBack += k
		if err != nil {
			return err
		}
	}
	return nil
}

// putBack writes back to Redis the leases a renewal found gone that are
// still held here, and says how many. One released since the renewal's
// snapshot was taken is gone because the releaser gave it back: written
// back, it would hold a slot of the shared cap for a lease TTL with no
// request behind it (seen with four replicas under sessions traffic: a
// warning every renewal, on every replica).
func (l *Limiter) putBack(lost []lease) (int, error) {
	n := 0
	for _, ls := range lost {
		l.mu.Lock()
		_, held := l.leases[ls.id]
		l.mu.Unlock()
		if !held {
			continue
		}
		if err := l.shared.reassert(context.Background(), ls); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// releaser gives leases back to Redis, off the request path, as many as
// are waiting in one round trip. At Close it gives back what is queued.
func (l *Limiter) releaser() {
	batch := make([]lease, 0, 256)
	for {
		select {
		case ls := <-l.relq:
			batch = append(batch[:0], ls)
		case <-l.stop:
			for {
				batch = batch[:0]
				for len(batch) < cap(batch) {
					select {
					case ls := <-l.relq:
						batch = append(batch, ls)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				_ = l.shared.release(context.Background(), batch)
			}
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case ls := <-l.relq:
				batch = append(batch, ls)
			default:
				break more
			}
		}
		if n := l.relOverflow.Swap(0); n > 0 {
			l.leasesExpiring.Add(n)
			l.log.Warn("shaping: release queue was full; leases will expire by their TTL instead", "leases", n)
		}
		if err := l.shared.release(context.Background(), batch); err != nil {
			l.down(err) // the leases expire by their TTL
			continue
		}
		// Waiters here need not hear of these slots through the
		// channel: the subscription may not be live yet (go-redis
		// subscribes in the background), and a message can be lost.
		l.ring()
	}
}

// subscriber rings the dispatcher when any replica releases a slot.
func (l *Limiter) subscriber() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// go-redis keeps the subscription alive across reconnects.
	ps := l.shared.c.Subscribe(ctx, l.shared.channel)
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-l.stop:
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			l.ring()
		}
	}
}

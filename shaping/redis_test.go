package shaping

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/infergate/infergate/internal/testredis"
)

// sharedConfig caps the global level at n, shared through the Redis at
// addr. The op timeout is generous: under -race on a loaded machine a
// slow answer would count Redis down and the caps local, which is right
// for the gateway and noise for these tests.
func sharedConfig(addr string, n int64) Config {
	return Config{Global: Cap{MaxRequests: n}, Queue: QueueConfig{MaxWaiting: 100, Timeout: 5 * time.Second},
		Redis: RedisConfig{Addr: addr, KeyPrefix: "t", LeaseTTL: 2 * time.Second, PollInterval: 10 * time.Second, OpTimeout: time.Second}}
}

func newShared(t *testing.T, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if !l.Stats().SharedUp {
		t.Fatal("redis not reached")
	}
	return l
}

func TestSharedCapHoldsAcrossReplicas(t *testing.T) {
	m := miniredis.RunT(t)
	a, b := newShared(t, sharedConfig(m.Addr(), 2)), newShared(t, sharedConfig(m.Addr(), 2))
	cfg := sharedConfig(m.Addr(), 2)
	cfg.Queue.MaxWaiting = -1
	c := newShared(t, cfg)
	p1, err := a.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := b.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(context.Background(), Request{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third slot of a shared cap of 2: err %v, want refused", err)
	}
	// A waiter on c... (c has no queue); a waiter on a is woken by b's
	// release through pub/sub, long before the 10s poll.
	got := make(chan error, 1)
	go func() {
		p, err := a.Acquire(context.Background(), Request{})
		p.Release()
		got <- err
	}()
	waitFor(t, func() bool { return a.Stats().Waiting == 1 })
	start := time.Now()
	p2.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("woken %v after the release on another replica", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not woken by the release on another replica")
	}
	p1.Release()
	waitFor(t, func() bool {
		members, _ := m.ZMembers("{t}:cap:global::leases")
		return len(members) == 0
	})
}

func TestSharedTokenCap(t *testing.T) {
	m := miniredis.RunT(t)
	cfg := sharedConfig(m.Addr(), 0)
	cfg.Global = Cap{MaxTokens: 1000}
	cfg.Queue.MaxWaiting = -1
	a, b := newShared(t, cfg), newShared(t, cfg)
	p, err := a.Acquire(context.Background(), Request{Tokens: 700})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(context.Background(), Request{Tokens: 400}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("700 + 400 tokens under a shared 1000: err %v, want refused", err)
	}
	q, err := b.Acquire(context.Background(), Request{Tokens: 300})
	if err != nil {
		t.Errorf("700 + 300 tokens: %v", err)
	}
	p.Release()
	q.Release()
}

func TestDeadReplicaSlotsExpire(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	cfg := sharedConfig(m.Addr(), 1)
	cfg.Queue.MaxWaiting = -1
	dead := newShared(t, cfg)
	if _, err := dead.Acquire(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}
	dead.Close() // dies holding its slot: no release, no renewal
	live := newShared(t, cfg)
	if _, err := live.Acquire(context.Background(), Request{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err %v, want the dead replica's slot still counted", err)
	}
	m.SetTime(now.Add(2100 * time.Millisecond)) // past the 2s lease
	p, err := live.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatalf("after the lease TTL: %v", err)
	}
	p.Release()
}

func TestRenewalKeepsLongRequests(t *testing.T) {
	m := miniredis.RunT(t)
	cfg := sharedConfig(m.Addr(), 1)
	cfg.Redis.LeaseTTL = 300 * time.Millisecond
	cfg.Queue.MaxWaiting = -1
	a, b := newShared(t, cfg), newShared(t, cfg)
	p, err := a.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // three TTLs: only renewal keeps the lease
	if _, err := b.Acquire(context.Background(), Request{}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("err %v: a held lease expired while renewed", err)
	}
	p.Release()
}

func TestRedisDownFailOpenAndClosed(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			m := miniredis.RunT(t)
			cfg := sharedConfig(m.Addr(), 4)
			cfg.Redis.OnFailure = mode
			cfg.Redis.ExpectedReplicas = 2
			cfg.Redis.PollInterval = 50 * time.Millisecond
			cfg.Queue.MaxWaiting = -1
			l := newShared(t, cfg)
			m.Close()
			// The first call finds Redis down.
			p, err := l.Acquire(context.Background(), Request{})
			var held []Permit
			if err == nil {
				held = append(held, p)
			}
			if l.Stats().SharedUp {
				t.Fatal("still up with Redis gone")
			}
			for range 3 {
				p, err := l.Acquire(context.Background(), Request{})
				if err == nil {
					held = append(held, p)
				} else if mode == "closed" && !errors.Is(err, ErrSharedDown) {
					t.Errorf("fail-closed: err %v, want ErrSharedDown", err)
				}
			}
			want := 2 // fail-open: the shared cap of 4 over 2 replicas
			if mode == "closed" {
				want = 0
			}
			if len(held) != want {
				t.Errorf("%d admitted while Redis was down, want %d", len(held), want)
			}
			for i := range held {
				held[i].Release()
			}
			// Redis comes back on the same address: shared again.
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return l.Stats().SharedUp })
			p, err = l.Acquire(context.Background(), Request{})
			if err != nil || p.lease == nil {
				t.Errorf("after recovery: err %v, lease %v", err, p.lease)
			}
			p.Release()
			if s := l.Stats(); s.SharedDownTransitions != 1 {
				t.Errorf("%d down transitions, want 1", s.SharedDownTransitions)
			}
		})
	}
}

// A request that has already left when its shared-cap call runs (here its
// context is cancelled before Acquire) does not make Redis look down, and
// the slot Redis granted it is given back at once: the cap stays whole.
// On miniredis and on a real Redis.
func TestCancelledAcquireLeavesRedisUpAndNoLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"miniredis", func(t *testing.T) string { return miniredis.RunT(t).Addr() }},
		{"redis", func(t *testing.T) string { return testredis.Addr(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sharedConfig(tc.addr(t), 2)
			cfg.Redis.KeyPrefix = fmt.Sprintf("cancel-%d", time.Now().UnixNano())
			// Only a cancellation may mark Redis down here: a call slowed
			// past a 1 s timeout on a busy machine (-race, the other
			// packages' tests) would do so rightly, and is not the claim.
			cfg.Redis.OpTimeout = 10 * time.Second
			// A lease leaked in Redis lives its TTL: longer than the
			// bounded wait below, so that the wait cannot outlast a leak.
			cfg.Redis.LeaseTTL = time.Minute
			l := newShared(t, cfg)
			for range 20 {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(errors.New("client gone"))
				if _, err := l.Acquire(ctx, Request{}); err == nil {
					t.Fatal("a cancelled request was admitted")
				}
			}
			s := l.Stats()
			if !s.SharedUp || s.SharedDownTransitions != 0 {
				t.Errorf("cancelled requests marked Redis down: %+v", s)
			}
			// Both slots of the cap of 2 are free: nothing leaked. The
			// given-back leases reach Redis off the request path (the
			// releaser), which then wakes the queue: an acquire may wait for
			// that, bounded well within the lease TTL a leaked slot would
			// hold it for.
			var ps []Permit
			for i := range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				p, err := l.Acquire(ctx, Request{})
				cancel()
				if err != nil {
					t.Fatalf("slot %d of 2 after the cancelled requests: %v", i+1, err)
				}
				ps = append(ps, p)
			}
			for _, p := range ps {
				p.Release()
			}
		})
	}
}

// One tenant's flood cannot fill the queue: past its share (half of it by
// default) it is refused as its own cap's doing, and another tenant still
// finds room to wait.
func TestTenantShareOfTheQueue(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 1}, Queue: QueueConfig{MaxWaiting: 8, Timeout: 2 * time.Second}})
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "flood"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 20 {
		go l.Acquire(ctx, Request{Tenant: "flood"})
	}
	waitFor(t, func() bool { return l.Stats().Waiting == 4 && l.Stats().RejectedFull == 16 })
	if s := l.Stats(); s.RejectedFullTenant != 16 {
		t.Errorf("the flood's refusals: %+v, want 16 as its tenant's share", s)
	}
	got := make(chan error, 1)
	go func() {
		p, err := l.Acquire(context.Background(), Request{Tenant: "other"})
		p.Release()
		got <- err
	}()
	waitFor(t, func() bool { return l.Stats().Waiting == 5 })
	cancel() // the flood leaves; the other tenant is served
	hold.Release()
	if err := <-got; err != nil {
		t.Errorf("the other tenant: %v, want served", err)
	}
}

// A lease released while a renewal was under way is not put back: the
// renewal finds it gone from Redis because the releaser gave it back, and
// writing it back would hold a slot of the shared cap for a lease TTL with
// no request behind it.
func TestRenewalPutsBackNoReleasedLease(t *testing.T) {
	m := miniredis.RunT(t)
	cfg := sharedConfig(m.Addr(), 1)
	cfg.Queue.MaxWaiting = -1
	a, b := newShared(t, cfg), newShared(t, cfg)
	p, err := a.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	// The renewer's snapshot of what a holds, taken before the release.
	a.mu.Lock()
	var snapshot []lease
	for _, ls := range a.leases {
		snapshot = append(snapshot, ls)
	}
	a.mu.Unlock()
	if len(snapshot) != 1 {
		t.Fatalf("a holds %d leases, want 1", len(snapshot))
	}
	p.Release()
	waitFor(t, func() bool {
		members, _ := m.ZMembers("{t}:cap:global::leases")
		return len(members) == 0
	})
	// The renewal of that snapshot finds the lease gone.
	lost, err := a.shared.renew(context.Background(), snapshot)
	if err != nil || len(lost) != 1 {
		t.Fatalf("renewal of a released lease: lost %d, err %v; want it lost", len(lost), err)
	}
	if n, err := a.putBack(lost); err != nil || n != 0 {
		t.Fatalf("put back %d leases (err %v), want none: it was released", n, err)
	}
	q, err := b.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatalf("the cap's one slot, free since the release: %v", err)
	}
	q.Release()
}

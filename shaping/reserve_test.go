package shaping

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// reserveConfig caps the global level at n requests with classes on,
// priority reserving pr and default dr.
func reserveConfig(n, pr, dr int64) Config {
	cfg := classConfig(n)
	cfg.Classes.Priority.Reserved = pr
	cfg.Classes.Default.Reserved = dr
	return cfg
}

// grab takes up to n slots of class c without waiting long, and returns
// those it got.
func grab(t *testing.T, l *Limiter, c Class, n int) []Permit {
	t.Helper()
	var out []Permit
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		p, err := l.Acquire(ctx, Request{Tenant: "t", Class: c})
		cancel()
		if err != nil {
			break
		}
		out = append(out, p)
	}
	t.Cleanup(func() {
		for i := range out {
			out[i].Release()
		}
	})
	return out
}

// With a global cap of 8, priority reserving 2 and default 1: flex fills
// 5, default one more (6 = 8 - 2), priority the last 2.
func TestReserveHoldsLowerClassesLocally(t *testing.T) {
	t.Parallel()
	l := mustNew(t, reserveConfig(8, 2, 1))
	if got := len(grab(t, l, ClassFlex, 8)); got != 5 {
		t.Fatalf("flex got %d slots of 8 with 3 reserved above it, want 5", got)
	}
	if got := len(grab(t, l, ClassDefault, 8)); got != 1 {
		t.Fatalf("default got %d more slots with 5 flex in flight and 2 reserved for priority, want 1", got)
	}
	if got := len(grab(t, l, ClassPriority, 8)); got != 2 {
		t.Fatalf("priority got %d slots with 6 in flight of 8, want 2 (the whole cap)", got)
	}
}

// Priority alone can use the whole cap; the reserve holds back only the
// classes below it. The token reserve likewise.
func TestReservePriorityTakesWholeCapAndTokens(t *testing.T) {
	t.Parallel()
	l := mustNew(t, reserveConfig(4, 3, 0))
	if got := len(grab(t, l, ClassPriority, 6)); got != 4 {
		t.Fatalf("priority got %d slots of a cap of 4, want 4", got)
	}
	cfg := classConfig(0)
	cfg.Pools = map[string]Cap{"p": {MaxTokens: 1000}}
	cfg.Classes.Priority.ReservedTokens = 300
	l = mustNew(t, cfg)
	try := func(c Class, tokens int64) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		p, err := l.Acquire(ctx, Request{Tenant: "t", Pool: "p", Class: c, Tokens: tokens})
		if err == nil {
			t.Cleanup(p.Release)
		}
		return err == nil
	}
	if !try(ClassDefault, 700) {
		t.Fatal("default refused 700 tokens of a pool cap of 1000 with 300 reserved")
	}
	if try(ClassFlex, 1) {
		t.Fatal("flex took a token of the 300 reserved for priority")
	}
	if !try(ClassPriority, 300) {
		t.Fatal("priority refused the 300 tokens reserved for it")
	}
}

// A lower waiter that only the reserve keeps out does not hold up a
// priority request behind it, locally or with the caps shared through
// Redis, even when the lower classes' share is due (lower_share 2: every
// other grant). With Redis the poll is 10 s, so only the dispatcher
// passing over the flex waiter lets priority in within the test's time.
func TestReserveWaiterDoesNotBlockPriority(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			cfg := reserveConfig(4, 1, 0)
			if shared {
				cfg = sharedConfig(testredis.Addr(t), 4)
				cfg.Redis.KeyPrefix = fmt.Sprintf("reserve-%d", time.Now().UnixNano())
				cfg.Queue.MaxWaitingPerTenant = -1
				cfg.Classes = Classes{Enabled: true, Priority: ClassConfig{Reserved: 1}}
			}
			cfg.Classes.LowerShare = 2
			var l *Limiter
			if shared {
				l = newShared(t, cfg)
			} else {
				l = mustNew(t, cfg)
			}
			flex := grab(t, l, ClassFlex, 3)
			if len(flex) != 3 {
				t.Fatalf("flex got %d slots, want 3 (4 - 1 reserved)", len(flex))
			}
			// Two flex waiters: while the dispatcher asks Redis for one,
			// the other keeps the queue from looking empty to priority.
			flexDone := make(chan error, 2)
			for i := range 2 {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
					defer cancel()
					p, err := l.Acquire(ctx, Request{Tenant: fmt.Sprint("w", i), Class: ClassFlex})
					p.Release()
					flexDone <- err
				}()
				queued(t, l, i+1)
			}
			acquire := func() Permit {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				p, err := l.Acquire(ctx, Request{Tenant: "p", Class: ClassPriority})
				if err != nil {
					t.Fatalf("priority behind a flex waiter kept out by the reserve: %v", err)
				}
				return p
			}
			// The first priority grant passes the waiting flex request:
			// the share is due after it.
			p1 := acquire()
			defer p1.Release()
			flex[0].Release()
			flex = flex[1:]
			// 3 in flight: flex may not take the 4th (reserved), and its
			// due share must not stall the priority request behind it.
			p2 := acquire()
			p2.Release()
			select {
			case err := <-flexDone:
				t.Fatalf("a flex waiter ended (%v) while 4 of 4 or the reserve were taken", err)
			default:
			}
			p1.Release()
			for range 2 {
				if err := <-flexDone; err != nil {
					t.Fatalf("a flex waiter, once below the reserve: %v", err)
				}
			}
		})
	}
}

// Two replicas share a global cap of 6 through Redis, priority reserving
// 2: default and flex together never hold more than 4 slots over both;
// priority takes the last 2 from either replica.
func TestReserveSharedAcrossReplicas(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("reserve-%d", time.Now().UnixNano())
	var lims []*Limiter
	for range 2 {
		cfg := sharedConfig(addr, 6)
		cfg.Redis.KeyPrefix = prefix
		cfg.Redis.PollInterval = 50 * time.Millisecond
		cfg.Queue.MaxWaitingPerTenant = -1
		cfg.Classes = Classes{Enabled: true, Priority: ClassConfig{Reserved: 2}}
		lims = append(lims, newShared(t, cfg))
	}
	// Deterministic: 4 lower over both, then none more; priority 2 more.
	low := append(grab(t, lims[0], ClassDefault, 3), grab(t, lims[1], ClassFlex, 3)...)
	if len(low) != 4 {
		t.Fatalf("default and flex got %d slots over two replicas, want 4 (6 - 2 reserved)", len(low))
	}
	if got := len(grab(t, lims[1], ClassPriority, 3)); got != 2 {
		t.Fatalf("priority got %d slots with 4 of 6 held, want 2", got)
	}
	for i := range low {
		low[i].Release()
	}
	waitFor(t, func() bool { return lims[0].Stats().InFlightRequests+lims[1].Stats().InFlightRequests == 2 })

	// Under load from both: the lower classes' peak stays at 4.
	var lower, all, peakLower, peakAll atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for w := range 10 {
		c := []Class{ClassFlex, ClassDefault, ClassPriority}[w%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lims[w%2]
			for n := 0; n < 10000 && time.Now().Before(deadline); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				p, err := l.Acquire(ctx, Request{Tenant: fmt.Sprint("t", w), Class: c})
				cancel()
				if err != nil {
					continue
				}
				if c != ClassPriority {
					bump(lower.Add(1), &peakLower)
				}
				bump(all.Add(1), &peakAll)
				time.Sleep(2 * time.Millisecond)
				all.Add(-1)
				if c != ClassPriority {
					lower.Add(-1)
				}
				p.Release()
			}
		}()
	}
	wg.Wait()
	// The 2 priority slots held above count in Redis, not in all.
	if p := peakLower.Load(); p > 2 {
		t.Errorf("default and flex held %d slots at once with 2 priority slots held, want at most 2 (6 - 2 reserved - 2 held)", p)
	}
	if p := peakAll.Load(); p > 4 || p < 2 {
		t.Errorf("peak of %d slots taken under load with 2 held of 6, want 2..4", p)
	}
}

func TestReserveValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" valid
	}{
		{"below the cap", func(c *Config) { c.Classes.Priority.Reserved = 7 }, ""},
		{"the whole cap", func(c *Config) { c.Classes.Priority.Reserved = 8 }, "leave flex nothing of global.max_requests 8"},
		{"reserves add up", func(c *Config) { c.Classes.Priority.Reserved, c.Classes.Default.Reserved = 5, 3 }, "8 requests reserved"},
		{"a pool's cap", func(c *Config) { c.Pools = map[string]Cap{"small": {MaxRequests: 2}}; c.Classes.Default.Reserved = 2 }, "pools.small.max_requests 2"},
		{"a model's token cap", func(c *Config) {
			c.Models = map[string]Cap{"m": {MaxTokens: 100}}
			c.Classes.Priority.ReservedTokens = 100
		}, "models.m.max_tokens"},
		{"tenant caps do not count", func(c *Config) {
			c.Tenants = map[string]Tenant{"a": {Cap: Cap{MaxRequests: 1}}}
			c.Classes.Priority.Reserved = 4
		}, ""},
		{"flex", func(c *Config) { c.Classes.Flex.Reserved = 1 }, "nothing is below flex"},
		{"negative", func(c *Config) { c.Classes.Default.ReservedTokens = -1 }, "must not be negative"},
		{"classes off", func(c *Config) { c.Classes.Enabled = false; c.Classes.Priority.Reserved = 100 }, ""},
	} {
		cfg := classConfig(8)
		tc.edit(&cfg)
		cfg.Defaults()
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// A release wakes lower-class waiters on other replicas when it brings a
// level below their limit, even where it leaves the cap itself short of
// full: a priority slot given back at 3 of 4 (1 reserved) lets a flex
// waiter on the other replica in at once, not at its 10 s poll.
func TestReserveReleaseWakesOtherReplicas(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("reserve-wake-%d", time.Now().UnixNano())
	var lims []*Limiter
	for range 2 {
		cfg := sharedConfig(addr, 4)
		cfg.Redis.KeyPrefix = prefix
		cfg.Queue.MaxWaitingPerTenant = -1
		cfg.Classes = Classes{Enabled: true, Priority: ClassConfig{Reserved: 1}}
		lims = append(lims, newShared(t, cfg))
	}
	a, b := lims[0], lims[1]
	if got := len(grab(t, a, ClassFlex, 2)); got != 2 {
		t.Fatalf("flex got %d slots, want 2", got)
	}
	prio, err := a.Acquire(context.Background(), Request{Tenant: "p", Class: ClassPriority})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := b.Acquire(ctx, Request{Tenant: "w", Class: ClassFlex})
		p.Release()
		got <- err
	}()
	queued(t, b, 1)
	// go-redis subscribes in the background: a release published before
	// b listens would be missed, and only the poll would let it in.
	subscribed(t, addr, b.shared.channel, 2)
	start := time.Now()
	prio.Release()
	if err := <-got; err != nil {
		t.Fatalf("the flex waiter on the other replica: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the flex waiter got the slot %v after the release: it was not woken", d)
	}
}

// subscribed waits until n clients listen on channel.
func subscribed(t *testing.T, addr, channel string, n int64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	waitFor(t, func() bool {
		got, err := c.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && got[channel] >= n
	})
}

// bump raises peak to cur if cur is higher, under concurrent bumps.
func bump(cur int64, peak *atomic.Int64) {
	for old := peak.Load(); cur > old && !peak.CompareAndSwap(old, cur); old = peak.Load() {
	}
}

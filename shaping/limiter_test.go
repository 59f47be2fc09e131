package shaping

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCapsAtEveryLevel(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		req   Request
		fit   int // how many fit at once
		other Request
		// other is admitted while req's cap is full (a different level)
		otherFits bool
	}{
		{"global", Config{Global: Cap{MaxRequests: 2}}, Request{Tenant: "a"}, 2, Request{Tenant: "b"}, false},
		{"pool", Config{Pools: map[string]Cap{"gpu": {MaxRequests: 3}}}, Request{Pool: "gpu"}, 3, Request{Pool: "cpu"}, true},
		{"model", Config{Models: map[string]Cap{"llama": {MaxRequests: 1}}}, Request{Model: "llama"}, 1, Request{Model: "qwen"}, true},
		{"tenant", Config{Tenants: map[string]Tenant{"a": {Cap: Cap{MaxRequests: 2}}}}, Request{Tenant: "a"}, 2, Request{Tenant: "b"}, true},
		{"default tenant", Config{DefaultTenant: Tenant{Cap: Cap{MaxRequests: 1}}}, Request{Tenant: "x"}, 1, Request{Tenant: "y"}, true},
		// Tokens: 3 requests of 1000 fit in 3500; the fourth waits.
		{"tokens", Config{Global: Cap{MaxTokens: 3500}}, Request{Tokens: 1000}, 3, Request{Tokens: 400}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Queue = QueueConfig{MaxWaiting: -1}
			l := mustNew(t, tc.cfg)
			var held []Permit
			for i := range tc.fit {
				p, err := l.Acquire(context.Background(), tc.req)
				if err != nil {
					t.Fatalf("request %d of %d refused: %v", i+1, tc.fit, err)
				}
				held = append(held, p)
			}
			if _, err := l.Acquire(context.Background(), tc.req); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("request %d: err %v, want ErrQueueFull (no queue)", tc.fit+1, err)
			}
			p, err := l.Acquire(context.Background(), tc.other)
			if (err == nil) != tc.otherFits {
				t.Errorf("other request %+v: err %v, want admitted=%v", tc.other, err, tc.otherFits)
			}
			p.Release()
			held[0].Release()
			held[0].Release() // twice: nothing more happens
			if _, err := l.Acquire(context.Background(), tc.req); err != nil {
				t.Errorf("after a release: %v", err)
			}
			if s := l.Stats(); s.InFlightRequests != int64(tc.fit) {
				t.Errorf("in flight %d, want %d", s.InFlightRequests, tc.fit)
			}
		})
	}
}

func TestQueueWaitsThenAdmits(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 1}, Queue: QueueConfig{MaxWaiting: 10, Timeout: 5 * time.Second}})
	first, _ := l.Acquire(context.Background(), Request{})
	got := make(chan Permit)
	go func() {
		p, err := l.Acquire(context.Background(), Request{})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, func() bool { return l.Stats().Waiting == 1 })
	time.Sleep(20 * time.Millisecond)
	first.Release()
	p := <-got
	if p.Waited < 20*time.Millisecond {
		t.Errorf("waited %v, want ≥ 20ms", p.Waited)
	}
	p.Release()
	if s := l.Stats(); s.InFlightRequests != 0 || s.Waiting != 0 || s.Admitted != 2 || s.Queued != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestQueueTimeoutAndTenantReason(t *testing.T) {
	l := mustNew(t, Config{Tenants: map[string]Tenant{"a": {Cap: Cap{MaxRequests: 1}}}, Global: Cap{MaxRequests: 5},
		Queue: QueueConfig{MaxWaiting: 1, Timeout: 30 * time.Millisecond}})
	p, _ := l.Acquire(context.Background(), Request{Tenant: "a"})
	defer p.Release()
	start := time.Now()
	_, err := l.Acquire(context.Background(), Request{Tenant: "a"})
	if !errors.Is(err, ErrQueueTimeout) || !errors.Is(err, ErrTenantCap) {
		t.Errorf("err %v, want a queue timeout caused by the tenant's cap", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > time.Second {
		t.Errorf("gave up after %v, want the 30ms timeout", d)
	}
	// Global capacity, not the tenant, is what is full here.
	l2 := mustNew(t, Config{Global: Cap{MaxRequests: 1}, Queue: QueueConfig{MaxWaiting: 1, Timeout: time.Second}})
	q, _ := l2.Acquire(context.Background(), Request{})
	defer q.Release()
	go l2.Acquire(context.Background(), Request{}) // fills the one queue place
	waitFor(t, func() bool { return l2.Stats().Waiting == 1 })
	if _, err := l2.Acquire(context.Background(), Request{}); !errors.Is(err, ErrQueueFull) || errors.Is(err, ErrTenantCap) {
		t.Errorf("err %v, want queue full for capacity", err)
	}
}

// A forgotten tenant's state, made again for another name, carries
// nothing over: the new tenant has its own cap and nothing in flight.
func TestForgottenTenantMadeAgainForAnother(t *testing.T) {
	l := mustNew(t, Config{Tenants: map[string]Tenant{"a": {Cap: Cap{MaxRequests: 1}}}, Global: Cap{MaxRequests: 5},
		Queue: QueueConfig{MaxWaiting: 1, Timeout: 20 * time.Millisecond}})
	for range 3 {
		p, err := l.Acquire(context.Background(), Request{Tenant: "one-off"})
		if err != nil {
			t.Fatal(err)
		}
		p.Release() // forgotten: the spare
	}
	a, err := l.Acquire(context.Background(), Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if _, err := l.Acquire(context.Background(), Request{Tenant: "a"}); !errors.Is(err, ErrTenantCap) {
		t.Errorf("second request of tenant a: %v, want its cap of 1", err)
	}
	b, err := l.Acquire(context.Background(), Request{Tenant: "b"})
	if err != nil {
		t.Errorf("tenant b, without a cap: %v", err)
	}
	b.Release()
}

func TestClientLeavingLeavesTheQueue(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 1}})
	p, _ := l.Acquire(context.Background(), Request{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, Request{})
		done <- err
	}()
	waitFor(t, func() bool { return l.Stats().Waiting == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	if s := l.Stats(); s.Waiting != 0 || s.Cancelled != 1 {
		t.Errorf("stats %+v, want the waiter gone", s)
	}
	p.Release()
	if s := l.Stats(); s.InFlightRequests != 0 {
		t.Errorf("%d in flight after all left", s.InFlightRequests)
	}
}

func TestNoSlotLeaksUnderChurn(t *testing.T) {
	// Many goroutines acquire, some give up while queued, some are granted
	// just as they give up: at the end nothing is held, nothing waits,
	// and the cap was never exceeded.
	const capN = 4
	l := mustNew(t, Config{Global: Cap{MaxRequests: capN}, Tenants: map[string]Tenant{"b": {Weight: 3}},
		Queue: QueueConfig{MaxWaiting: 1000, Timeout: 50 * time.Millisecond}})
	var inside, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				p, err := l.Acquire(ctx, Request{Tenant: []string{"a", "b", "c"}[g%3]})
				cancel()
				if err != nil {
					continue
				}
				n := inside.Add(1)
				for cur := peak.Load(); n > cur && !peak.CompareAndSwap(cur, n); cur = peak.Load() {
				}
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				inside.Add(-1)
				p.Release()
			}
		}()
	}
	wg.Wait()
	s := l.Stats()
	if s.InFlightRequests != 0 || s.InFlightTokens != 0 || s.Waiting != 0 {
		t.Errorf("after the churn: %+v", s)
	}
	if peak.Load() > capN {
		t.Errorf("%d held at once, cap %d", peak.Load(), capN)
	}
	l.mu.Lock()
	left := len(l.tenants)
	l.mu.Unlock()
	if left != 0 {
		t.Errorf("%d idle tenants kept", left)
	}
}

// grantOrder queues one request per entry of tenants, in that order, on
// a limiter whose one slot is held, then frees the slot and returns the
// order the requests were granted in.
func grantOrder(t *testing.T, l *Limiter, tenants []string) []string {
	t.Helper()
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "holder"})
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		before := l.Stats().Waiting
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := l.Acquire(context.Background(), Request{Tenant: tenant})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, tenant)
			mu.Unlock()
			p.Release()
		}()
		waitFor(t, func() bool { return l.Stats().Waiting == before+1 })
	}
	hold.Release()
	wg.Wait()
	return order
}

func TestFairnessAcrossTenants(t *testing.T) {
	// One slot. Tenant flood queues 30 requests, then tenant quiet queues
	// 3: quiet must not wait behind the whole flood.
	l := mustNew(t, Config{Global: Cap{MaxRequests: 1}, Queue: QueueConfig{MaxWaiting: 100, Timeout: 10 * time.Second}})
	var tenants []string
	for range 30 {
		tenants = append(tenants, "flood")
	}
	order := grantOrder(t, l, append(tenants, "quiet", "quiet", "quiet"))
	last := -1
	for i, x := range order {
		if x == "quiet" {
			last = i
		}
	}
	// Round robin: quiet's three go within the first seven grants.
	if last < 0 || last > 6 {
		t.Errorf("quiet's last request was grant %d of %d: %v", last+1, len(order), order)
	}
}

func TestWeightsAndPriorities(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 1},
		Tenants: map[string]Tenant{"heavy": {Weight: 3}, "light": {Weight: 1}, "vip": {Priority: 1}},
		Queue:   QueueConfig{MaxWaiting: 100, Timeout: 10 * time.Second}})
	order := grantOrder(t, l, []string{"heavy", "light", "heavy", "light", "heavy", "light", "heavy", "light", "vip"})
	if order[0] != "vip" {
		t.Errorf("order %v: the higher priority goes first", order)
	}
	heavyInFirst4 := 0
	for _, x := range order[1:5] {
		if x == "heavy" {
			heavyInFirst4++
		}
	}
	if heavyInFirst4 != 3 {
		t.Errorf("order %v: weight 3 against 1 should give heavy 3 of the first 4 grants", order)
	}
}

func TestReconfigureKeepsInFlight(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 2}})
	a, _ := l.Acquire(context.Background(), Request{})
	b, _ := l.Acquire(context.Background(), Request{})
	waiting := make(chan error)
	go func() {
		p, err := l.Acquire(context.Background(), Request{})
		p.Release()
		waiting <- err
	}()
	waitFor(t, func() bool { return l.Stats().Waiting == 1 })
	// Raising the cap admits the waiter; the two in flight stay counted.
	if err := l.Reconfigure(Config{Global: Cap{MaxRequests: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	// Lowering it below what is in flight drops nothing; new requests wait.
	if err := l.Reconfigure(Config{Global: Cap{MaxRequests: 1}, Queue: QueueConfig{MaxWaiting: -1}}); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.InFlightRequests != 2 {
		t.Errorf("in flight %d after reload, want 2", s.InFlightRequests)
	}
	if _, err := l.Acquire(context.Background(), Request{}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("err %v, want refused under the lower cap", err)
	}
	a.Release()
	b.Release()
	if _, err := l.Acquire(context.Background(), Request{}); err != nil {
		t.Errorf("after both released: %v", err)
	}
	if err := l.Reconfigure(Config{Global: Cap{MaxRequests: -1}}); err == nil {
		t.Error("a negative cap was accepted")
	}
}

func TestOversizedRequestRunsAlone(t *testing.T) {
	// A request larger than the token cap would never fit; it is admitted
	// when nothing else holds tokens, rather than waiting forever.
	l := mustNew(t, Config{Global: Cap{MaxTokens: 1000}, Queue: QueueConfig{MaxWaiting: -1}})
	p, err := l.Acquire(context.Background(), Request{Tokens: 5000})
	if err != nil {
		t.Fatalf("oversized request refused on an idle cap: %v", err)
	}
	if _, err := l.Acquire(context.Background(), Request{Tokens: 1}); err == nil {
		t.Error("admitted beside an oversized request")
	}
	p.Release()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A tenant that floods the queue does not raise another tenant's wait
// beyond its share: with two slots and each request holding one for 5 ms,
// a steady tenant sending one request every 10 ms next to a flood of 200
// waits, at p99, about one slot's turn, not the flood's 500 ms backlog
// (the bound leaves room for a busy CI machine).
func TestFloodDoesNotRaiseOthersWait(t *testing.T) {
	l := mustNew(t, Config{Global: Cap{MaxRequests: 2}, Queue: QueueConfig{MaxWaiting: 1000, Timeout: 30 * time.Second}})
	hold := func(tenant string) (time.Duration, error) {
		p, err := l.Acquire(context.Background(), Request{Tenant: tenant})
		if err != nil {
			return 0, err
		}
		time.Sleep(5 * time.Millisecond)
		w := p.Waited
		p.Release()
		return w, nil
	}
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := hold("flood"); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, func() bool { return l.Stats().Waiting > 150 })
	var waits []time.Duration
	var mu sync.Mutex
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := hold("steady")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			waits = append(waits, w)
			mu.Unlock()
		}()
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	// The flood's backlog is 200 × 5 ms / 2 slots = 500 ms; the steady
	// tenant's share is every other grant: a few ms of wait.
	if p99 > 200*time.Millisecond {
		t.Errorf("steady tenant's p99 wait %v behind a flood (backlog ~500ms), want about one turn", p99)
	}
}

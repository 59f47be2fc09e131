package shaping

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
)

func classConfig(global int64) Config {
	return Config{Global: Cap{MaxRequests: global}, Queue: QueueConfig{MaxWaiting: 1000, MaxWaitingPerTenant: -1, Timeout: 10 * time.Second},
		Classes: Classes{Enabled: true}}
}

// queued waits until n requests wait in l.
func queued(t *testing.T, l *Limiter, n int) {
	t.Helper()
	waitFor(t, func() bool { return l.Stats().Waiting == n })
}

// Saturated with priority requests, a flex request that waits still gets
// one grant in every lower_share (10): the rule stated in fairQueue.next.
func TestLowerClassShareBoundsStarvation(t *testing.T) {
	t.Parallel()
	l := mustNew(t, classConfig(1))
	hold, err := l.Acquire(context.Background(), Request{Tenant: "a", Class: ClassPriority})
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		class Class
		p     Permit
	}
	grants := make(chan grant, 100)
	enqueue := func(c Class) {
		go func() {
			p, err := l.Acquire(context.Background(), Request{Tenant: "a", Class: c})
			if err != nil {
				t.Error(err)
				return
			}
			grants <- grant{c, p}
		}()
	}
	for i := range 3 {
		enqueue(ClassFlex)
		queued(t, l, i+1)
	}
	for i := range 40 {
		enqueue(ClassPriority)
		queued(t, l, 3+i+1)
	}
	hold.Release()
	var order []Class
	for range 43 {
		g := <-grants
		order = append(order, g.class)
		if g.class == ClassFlex && g.p.Arm(func(Class) {}) {
			t.Error("a grant of the lower classes' share was armed for preemption")
		}
		g.p.Release()
	}
	// The 10th, 20th and 30th grants go to flex; the rest to priority,
	// which keeps arriving (its 40 wait throughout).
	for i, c := range order {
		want := ClassPriority
		if (i+1)%10 == 0 && i < 30 {
			want = ClassFlex
		}
		if c != want {
			t.Fatalf("grant %d went to %s, want %s (order %v)", i+1, c, want, order)
		}
	}
}

// With lower_share -1 the order is strict: flex waits for every priority.
func TestStrictClassOrder(t *testing.T) {
	t.Parallel()
	cfg := classConfig(1)
	cfg.Classes.LowerShare = -1
	l := mustNew(t, cfg)
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "a"})
	res := make(chan Class, 20)
	for i, c := range []Class{ClassFlex, ClassDefault, ClassPriority, ClassDefault, ClassPriority} {
		go func() {
			p, err := l.Acquire(context.Background(), Request{Tenant: fmt.Sprint("t", i), Class: c})
			if err == nil {
				res <- c
				p.Release()
			}
		}()
		queued(t, l, i+1)
	}
	hold.Release()
	var got []Class
	for range 5 {
		got = append(got, <-res)
	}
	want := []Class{ClassPriority, ClassPriority, ClassDefault, ClassDefault, ClassFlex}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A full queue sheds the newest waiter of the lowest class below the
// arriving request; a request with nothing below it is refused itself.
func TestShedLowestClassNewestFirst(t *testing.T) {
	t.Parallel()
	cfg := classConfig(1)
	cfg.Queue.MaxWaiting = 3
	l := mustNew(t, cfg)
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "a"})
	defer hold.Release()
	type res struct {
		name string
		err  error
	}
	out := make(chan res, 10)
	start := func(name string, c Class) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			p, err := l.Acquire(ctx, Request{Tenant: name, Class: c})
			p.Release()
			out <- res{name, err}
		}()
	}
	start("flex-old", ClassFlex)
	queued(t, l, 1)
	start("flex-new", ClassFlex)
	queued(t, l, 2)
	start("default", ClassDefault)
	queued(t, l, 3)
	expectShed := func(name string) {
		t.Helper()
		r := <-out
		if r.name != name || !errors.Is(r.err, ErrShed) {
			t.Fatalf("got %s %v, want %s shed", r.name, r.err, name)
		}
	}
	start("p1", ClassPriority)
	expectShed("flex-new")
	start("p2", ClassPriority)
	expectShed("flex-old")
	// A flex request finds nothing below it: refused, nothing shed.
	if _, err := l.Acquire(context.Background(), Request{Tenant: "late", Class: ClassFlex}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("flex into a full queue: %v, want queue full", err)
	}
	start("p3", ClassPriority)
	expectShed("default")
	if _, err := l.Acquire(context.Background(), Request{Tenant: "late", Class: ClassPriority}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("priority into a queue full of priority: %v, want queue full", err)
	}
	s := l.Stats()
	if s.Classes[ClassFlex].Shed != 2 || s.Classes[ClassDefault].Shed != 1 || s.Waiting != 3 {
		t.Errorf("stats %+v", s.Classes)
	}
}

// A flex request armed before its first byte is preempted for a priority
// request that must queue: its cancel runs once with the class that took
// the slot, the priority request gets the slot at once, and the flex
// request's Release gives nothing back a second time.
func TestPreemptBeforeFirstByte(t *testing.T) {
	t.Parallel()
	l := mustNew(t, classConfig(1))
	flex, err := l.Acquire(context.Background(), Request{Tenant: "batch", Class: ClassFlex})
	if err != nil {
		t.Fatal(err)
	}
	var by atomic.Int32
	var calls atomic.Int32
	if !flex.Arm(func(c Class) { by.Store(int32(c)); calls.Add(1) }) {
		t.Fatal("a flex permit was not armed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pri, err := l.Acquire(ctx, Request{Tenant: "chat", Class: ClassPriority})
	if err != nil {
		t.Fatalf("priority request: %v", err)
	}
	if calls.Load() != 1 || Class(by.Load()) != ClassPriority {
		t.Fatalf("cancel called %d times by %s", calls.Load(), Class(by.Load()))
	}
	if flex.Disarm() {
		t.Error("Disarm of a preempted permit reported true")
	}
	flex.Release()
	if s := l.Stats(); s.InFlightRequests != 1 || s.Classes[ClassFlex].Preempted != 1 {
		t.Errorf("after the preempted release: %d in flight (want 1: the priority one), %+v", s.InFlightRequests, s.Classes[ClassFlex])
	}
	pri.Release()
	if s := l.Stats(); s.InFlightRequests != 0 {
		t.Errorf("%d in flight at the end", s.InFlightRequests)
	}
}

// Disarmed (its first byte sent) or of a class not preemptible, a request
// is never preempted: the higher class waits.
func TestNoPreemptionAfterFirstByte(t *testing.T) {
	t.Parallel()
	l := mustNew(t, classConfig(1))
	flex, _ := l.Acquire(context.Background(), Request{Tenant: "batch", Class: ClassFlex})
	flex.Arm(func(Class) { t.Error("preempted after its first byte") })
	if !flex.Disarm() {
		t.Fatal("Disarm failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, Request{Tenant: "chat", Class: ClassPriority}); err == nil {
		t.Fatal("granted while the flex request held the only slot")
	}
	flex.Release()

	def, _ := l.Acquire(context.Background(), Request{Tenant: "x", Class: ClassDefault})
	if def.Arm(func(Class) {}) {
		t.Error("a default request was armed (only flex is preemptible by default)")
	}
	def.Release()
}

// Each class waits its own queue_timeout.
func TestClassQueueTimeout(t *testing.T) {
	t.Parallel()
	cfg := classConfig(1)
	cfg.Classes.Priority.QueueTimeout = 30 * time.Millisecond
	l := mustNew(t, cfg)
	hold, _ := l.Acquire(context.Background(), Request{Tenant: "a"})
	defer hold.Release()
	start := time.Now()
	_, err := l.Acquire(context.Background(), Request{Tenant: "b", Class: ClassPriority})
	if !errors.Is(err, ErrQueueTimeout) || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	if s := l.Stats(); s.Classes[ClassPriority].TimedOut != 1 {
		t.Errorf("%+v", s.Classes[ClassPriority])
	}
}

// A class cap bounds its class only.
func TestClassCap(t *testing.T) {
	t.Parallel()
	cfg := classConfig(10)
	cfg.Classes.Flex.MaxRequests = 1
	l := mustNew(t, cfg)
	f, _ := l.Acquire(context.Background(), Request{Tenant: "a", Class: ClassFlex})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, Request{Tenant: "b", Class: ClassFlex}); err == nil {
		t.Error("a second flex request passed a flex cap of 1")
	}
	d, err := l.Acquire(context.Background(), Request{Tenant: "b", Class: ClassDefault})
	if err != nil {
		t.Errorf("a default request: %v", err)
	}
	d.Release()
	f.Release()
}

func TestResolveClass(t *testing.T) {
	t.Parallel()
	cfg := Config{Tenants: map[string]Tenant{
		"gold":  {MaxClass: "priority"},
		"batch": {DefaultClass: "flex", MaxClass: "default"},
	}, Classes: Classes{Enabled: true}}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant  string
		asked   Class
		set     bool
		want    Class
		lowered bool
	}{
		{"gold", ClassPriority, true, ClassPriority, false},
		{"gold", 0, false, ClassDefault, false},
		{"batch", 0, false, ClassFlex, false},
		{"batch", ClassPriority, true, ClassDefault, true},
		{"anon", ClassPriority, true, ClassDefault, true},
		{"anon", ClassFlex, true, ClassFlex, false},
	} {
		got, lowered, err := cfg.ResolveClass(c.tenant, c.asked, c.set)
		if err != nil || got != c.want || lowered != c.lowered {
			t.Errorf("%s asks %s (%v): %s lowered=%v %v, want %s lowered=%v", c.tenant, c.asked, c.set, got, lowered, err, c.want, c.lowered)
		}
	}
	cfg.Classes.AboveCeiling = "refuse"
	if _, _, err := cfg.ResolveClass("anon", ClassPriority, true); !errors.Is(err, ErrClassAboveCeiling) {
		t.Errorf("refuse mode: %v", err)
	}
	bad := Config{Tenants: map[string]Tenant{"x": {DefaultClass: "priority", MaxClass: "flex"}}}
	bad.Defaults()
	if err := bad.Validate(); err == nil {
		t.Error("default_class above max_class accepted")
	}
	bad = Config{Tenants: map[string]Tenant{"x": {MaxClass: "gold"}}}
	bad.Defaults()
	if err := bad.Validate(); err == nil {
		t.Error("unknown class accepted")
	}
}

func FuzzParseClass(f *testing.F) {
	for _, s := range []string{"priority", "default", "flex", "auto", "", "PRIORITY", "flex\x00", "priorityy"} {
		f.Add([]byte(s))
	}
	cfg := Config{Tenants: map[string]Tenant{"t": {MaxClass: "default"}}, Classes: Classes{Enabled: true}}
	cfg.Defaults()
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := ParseClass(b)
		if ok != (string(b) == c.String()) {
			t.Fatalf("ParseClass(%q) = %s, %v", b, c, ok)
		}
		if !ok {
			return
		}
		served, lowered, err := cfg.ResolveClass("t", c, true)
		if err != nil || served.Above(ClassDefault) || lowered != c.Above(ClassDefault) {
			t.Fatalf("%s: served %s lowered %v %v", c, served, lowered, err)
		}
	})
}

// Redis killed mid-run with classes on: admission goes on per replica in
// fail-open mode (and refuses in fail-closed), every request ends
// granted or refused with a reason, and no slot leaks.
func TestClassesRedisLostMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			r := testredis.Start(t, 0)
			var lims []*Limiter
			for range 2 {
				cfg := sharedConfig(r.Addr(), 4)
				// Each class's own deadline ends a wait before the client's.
				cc := ClassConfig{QueueTimeout: 200 * time.Millisecond}
				cfg.Classes = Classes{Enabled: true, Priority: cc, Default: cc, Flex: cc}
				cfg.Classes.Flex.MaxRequests = 2
				cfg.Redis.OnFailure, cfg.Redis.ExpectedReplicas = mode, 2
				cfg.Redis.PollInterval = 50 * time.Millisecond
				lims = append(lims, newShared(t, cfg))
			}
			var granted, refused, other atomic.Int64
			var grantedDown atomic.Int64
			var down atomic.Bool
			var wg sync.WaitGroup
			deadline := time.Now().Add(2 * time.Second)
			for w := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := lims[w%2]
					c := ClassesByRank[w%3]
					for n := 0; n < 10000 && time.Now().Before(deadline); n++ {
						ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
						p, err := l.Acquire(ctx, Request{Tenant: fmt.Sprint("t", w%3), Class: c})
						cancel()
						switch {
						case err == nil:
							granted.Add(1)
							if down.Load() {
								grantedDown.Add(1)
							}
							time.Sleep(2 * time.Millisecond)
							p.Release()
						case errors.Is(err, ErrQueueTimeout), errors.Is(err, ErrQueueFull), errors.Is(err, ErrSharedDown), errors.Is(err, ErrShed):
							refused.Add(1)
						default:
							if other.Add(1) == 1 {
								t.Log(err)
							}
							time.Sleep(time.Millisecond)
						}
					}
				}()
			}
			time.Sleep(500 * time.Millisecond)
			r.Kill()
			waitFor(t, func() bool { return !lims[0].Stats().SharedUp && !lims[1].Stats().SharedUp })
			down.Store(true)
			wg.Wait()
			if granted.Load() == 0 {
				t.Fatal("nothing granted")
			}
			if mode == "open" && grantedDown.Load() == 0 {
				t.Error("fail-open admitted nothing while Redis was down")
			}
			if mode == "closed" && grantedDown.Load() > 12 {
				// Only grants that raced the kill may pass.
				t.Errorf("fail-closed admitted %d while Redis was down", grantedDown.Load())
			}
			if other.Load() > 0 {
				t.Errorf("%d requests ended without a stated reason", other.Load())
			}
			for _, l := range lims {
				if s := l.Stats(); s.InFlightRequests != 0 || s.Waiting != 0 {
					t.Errorf("after the run: %d in flight, %d waiting", s.InFlightRequests, s.Waiting)
				}
			}
		})
	}
}

// A class cap holds across replicas sharing Redis: two limiters, a flex
// cap of 2, eight flex workers: never more than 2 flex requests in flight
// at once over both, while default requests beside them are not held to it.
func TestClassCapSharedAcrossReplicas(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("classes-%d", time.Now().UnixNano())
	var lims []*Limiter
	for range 2 {
		cfg := sharedConfig(addr, 100)
		cfg.Redis.KeyPrefix = prefix
		cfg.Redis.PollInterval = 50 * time.Millisecond
		cfg.Classes = Classes{Enabled: true, Flex: ClassConfig{Cap: Cap{MaxRequests: 2}}}
		lims = append(lims, newShared(t, cfg))
	}
	var inside [NumClasses]atomic.Int64
	var peak [NumClasses]atomic.Int64
	var granted atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for w := range 12 {
		c := ClassFlex
		if w >= 8 {
			c = ClassDefault
		}
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
				granted.Add(1)
				bump(inside[c].Add(1), &peak[c])
				time.Sleep(2 * time.Millisecond)
				inside[c].Add(-1)
				p.Release()
			}
		}()
	}
	wg.Wait()
	if p := peak[ClassFlex].Load(); p > 2 {
		t.Errorf("%d flex requests in flight at once under a shared flex cap of 2", p)
	}
	if peak[ClassFlex].Load() < 2 || peak[ClassDefault].Load() < 3 || granted.Load() < 50 {
		t.Errorf("peaks flex %d default %d, %d grants: the caps held more than they should", peak[ClassFlex].Load(), peak[ClassDefault].Load(), granted.Load())
	}
	for _, l := range lims {
		if s := l.Stats(); s.InFlightRequests != 0 || s.Waiting != 0 {
			t.Errorf("after the load: %d in flight, %d waiting", s.InFlightRequests, s.Waiting)
		}
	}
}

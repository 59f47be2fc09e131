package reqctx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	errTimeout = errors.New("total timeout")
	errGone    = errors.New("client gone")
)

// waitDone waits for ctx to end, failing after d.
func waitDone(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(d):
		t.Fatalf("context still live after %v", d)
	}
}

func TestCancelWithCause(t *testing.T) {
	var g Group
	var c Ctx
	g.Start(&c, time.Minute, errTimeout)
	if c.Err() != nil || c.Cause() != nil {
		t.Fatalf("live context: err %v cause %v", c.Err(), c.Cause())
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Second {
		t.Fatalf("deadline %v %v", d, ok)
	}
	done := c.Done()
	c.Cancel(errGone)
	c.Cancel(errTimeout) // only the first end counts
	waitDone(t, &c, time.Second)
	<-done
	if !errors.Is(c.Err(), context.Canceled) || c.Cause() != errGone || Cause(&c) != errGone {
		t.Fatalf("err %v cause %v", c.Err(), c.Cause())
	}
	if g.Live() != 0 {
		t.Fatalf("live %d after cancel", g.Live())
	}
}

func TestDeadlineEndsWithItsCause(t *testing.T) {
	var g Group
	var c Ctx
	start := time.Now()
	g.Start(&c, 30*time.Millisecond, errTimeout)
	waitDone(t, &c, 2*time.Second)
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("ended after %v, before its deadline", el)
	}
	if c.Cause() != errTimeout || !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v cause %v", c.Err(), c.Cause())
	}
	if g.Live() != 0 {
		t.Fatalf("live %d", g.Live())
	}
}

// A shorter timeout started after longer ones (a reload that lowered
// timeouts.total) still ends first, on time.
func TestShorterDeadlineAfterLongerOnes(t *testing.T) {
	var g Group
	long := make([]Ctx, 3)
	for i := range long {
		g.Start(&long[i], time.Hour, errTimeout)
	}
	var short Ctx
	start := time.Now()
	g.Start(&short, 40*time.Millisecond, errTimeout)
	waitDone(t, &short, 2*time.Second)
	if el := time.Since(start); el > time.Second {
		t.Fatalf("short deadline ended after %v", el)
	}
	for i := range long {
		if long[i].Err() != nil {
			t.Fatalf("long context %d ended: %v", i, long[i].Cause())
		}
		long[i].Cancel(nil)
	}
	if g.Live() != 0 {
		t.Fatalf("live %d", g.Live())
	}
}

// Contexts that end early leave the timer aimed at a gone deadline; it
// fires, finds nothing due, and re-aims at the next one, which still
// ends on time.
func TestEarlyEndsLeaveLaterDeadlinesOnTime(t *testing.T) {
	var g Group
	first := make([]Ctx, 50)
	for i := range first {
		g.Start(&first[i], 20*time.Millisecond, errTimeout)
	}
	var later Ctx
	g.Start(&later, 60*time.Millisecond, errTimeout)
	for i := range first {
		first[i].Cancel(nil)
	}
	waitDone(t, &later, 2*time.Second)
	if later.Cause() != errTimeout {
		t.Fatalf("cause %v", later.Cause())
	}
	for i := range first {
		if first[i].Cause() != context.Canceled {
			t.Fatalf("context %d: cause %v, want its own cancel", i, first[i].Cause())
		}
	}
}

func TestGroupCancelEndsAllAndLaterOnes(t *testing.T) {
	var g Group
	cs := make([]Ctx, 10)
	for i := range cs {
		timeout := time.Hour
		if i%2 == 0 {
			timeout = 0 // no deadline: still the group's
		}
		g.Start(&cs[i], timeout, errTimeout)
	}
	stop := errors.New("shutdown")
	g.Cancel(stop)
	g.Cancel(errGone)
	for i := range cs {
		waitDone(t, &cs[i], time.Second)
		if cs[i].Cause() != stop {
			t.Fatalf("context %d: cause %v", i, cs[i].Cause())
		}
	}
	var late Ctx
	g.Start(&late, time.Hour, errTimeout)
	if late.Cause() != stop {
		t.Fatalf("context started after Cancel: cause %v", late.Cause())
	}
	late.Cancel(nil)
	if g.Live() != 0 {
		t.Fatalf("live %d", g.Live())
	}
}

func TestAfterFunc(t *testing.T) {
	var g Group
	var c Ctx
	g.Start(&c, time.Hour, errTimeout)
	ran := make(chan string, 4)
	c.AfterFunc(func() { ran <- "a" })
	stopB := c.AfterFunc(func() { ran <- "b" })
	// The standard library finds the method: no goroutine, no child.
	stopStd := context.AfterFunc(&c, func() { ran <- "std" })
	if !stopB() || stopB() {
		t.Fatal("stop: want true, then false")
	}
	c.Cancel(errGone)
	got := map[string]bool{}
	for range 2 {
		select {
		case s := <-ran:
			got[s] = true
		case <-time.After(time.Second):
			t.Fatalf("functions ran: %v", got)
		}
	}
	if !got["a"] || !got["std"] {
		t.Fatalf("ran %v", got)
	}
	if stopStd() {
		t.Fatal("stop after the function started reported true")
	}
	select {
	case s := <-ran:
		t.Fatalf("%s ran after it was stopped", s)
	case <-time.After(20 * time.Millisecond):
	}
	// Registered after the end: runs at once.
	c.AfterFunc(func() { ran <- "late" })
	select {
	case <-ran:
	case <-time.After(time.Second):
		t.Fatal("a function registered after the end did not run")
	}
}

// Many requests starting and ending at once, some cut by their deadline,
// some by their client, some finishing: every one ends exactly once and
// the group counts none live afterwards.
func TestConcurrentStartsAndEnds(t *testing.T) {
	var g Group
	var wg sync.WaitGroup
	var timedOut, gone atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				c := new(Ctx)
				timeout := time.Duration(1+i%3) * time.Millisecond * 2
				g.Start(c, timeout, errTimeout)
				var fired atomic.Int32
				c.AfterFunc(func() { fired.Add(1) })
				switch (w + i) % 3 {
				case 0:
					c.Cancel(errGone)
				case 1:
					<-c.Done()
				}
				c.Cancel(nil)
				switch c.Cause() {
				case errTimeout:
					timedOut.Add(1)
				case errGone:
					gone.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if g.Live() != 0 {
		t.Fatalf("live %d after every context ended", g.Live())
	}
	if timedOut.Load() < 8*500/3 || gone.Load() == 0 {
		t.Fatalf("timed out %d, gone %d", timedOut.Load(), gone.Load())
	}
}

// BenchmarkStartCancel is a request's context from start to its end,
// against the standard library's pair under a shared parent.
//
//	go test ./internal/reqctx -run '^$' -bench . -benchmem
func BenchmarkStartCancel(b *testing.B) {
	b.Run("reqctx", func(b *testing.B) {
		var g Group
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var c Ctx
			for pb.Next() {
				g.Start(&c, time.Minute, errTimeout)
				stop := c.AfterFunc(func() {})
				stop()
				c.Cancel(nil)
			}
		})
	})
	b.Run("context", func(b *testing.B) {
		base, cancelBase := context.WithCancelCause(context.Background())
		defer cancelBase(nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, cancel := context.WithCancelCause(base)
				ctx, stopT := context.WithTimeoutCause(c, time.Minute, errTimeout)
				stop := context.AfterFunc(ctx, func() {})
				stop()
				stopT()
				cancel(nil)
			}
		})
	})
}

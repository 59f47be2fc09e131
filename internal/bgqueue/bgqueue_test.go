package bgqueue

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHandlesInOrderAndFlushesAtClose(t *testing.T) {
	var got []int
	flushes := 0
	q := Start(Config[int]{Size: 16, Handle: func(v int) { got = append(got, v) }, Flush: func() { flushes++ }})
	for i := range 10 {
		if !q.Offer(i) {
			t.Fatalf("Offer(%d) refused with room in the queue", i)
		}
	}
	q.Close()
	q.Close() // twice is fine
	if len(got) != 10 {
		t.Fatalf("handled %d items, want 10", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("item %d is %d: out of order %v", i, v, got)
		}
	}
	if flushes != 1 {
		t.Errorf("Flush ran %d times, want once at Close", flushes)
	}
	if q.Offer(11) {
		t.Error("Offer after Close accepted an item")
	}
}

// A full queue refuses at once instead of making the caller wait.
func TestFullQueueRefusesWithoutWaiting(t *testing.T) {
	release := make(chan struct{})
	q := Start(Config[int]{Size: 2, Handle: func(int) { <-release }})
	defer q.Close()
	defer close(release)
	accepted := 0
	start := time.Now()
	for i := range 10 {
		if q.Offer(i) {
			accepted++
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10 offers took %v", d)
	}
	// One item is in Handle, two wait in the queue.
	if accepted > 3 || accepted < 2 {
		t.Errorf("accepted %d of 10 offers into a queue of 2, want 2 or 3", accepted)
	}
}

func TestSyncWaitsForEarlierItems(t *testing.T) {
	var n atomic.Int64
	q := Start(Config[int]{Handle: func(int) { time.Sleep(time.Millisecond); n.Add(1) }})
	defer q.Close()
	for i := range 20 {
		q.Offer(i)
	}
	q.Sync()
	if got := n.Load(); got != 20 {
		t.Errorf("after Sync %d of 20 items were handled", got)
	}
	q.Close()
	q.Sync() // returns at once on a stopped queue
}

// A panic in Handle costs that item only; the goroutine carries on.
func TestPanicIsRecoveredAndCounted(t *testing.T) {
	var handled atomic.Int64
	var heard atomic.Value
	q := Start(Config[int]{
		Handle: func(v int) {
			if v == 2 {
				panic("bad item")
			}
			handled.Add(1)
		},
		OnPanic: func(v any, stack []byte) {
			if len(stack) == 0 {
				t.Error("no stack with the panic")
			}
			heard.Store(v)
		},
	})
	for i := range 5 {
		q.Offer(i)
	}
	q.Close()
	if handled.Load() != 4 {
		t.Errorf("handled %d items around the panic, want 4", handled.Load())
	}
	if q.Panics() != 1 || heard.Load() != "bad item" {
		t.Errorf("panics %d, heard %v; want 1 and the panic value", q.Panics(), heard.Load())
	}
}

func TestTickFlushes(t *testing.T) {
	flushed := make(chan struct{}, 1)
	q := Start(Config[int]{Handle: func(int) {}, Tick: 5 * time.Millisecond, Flush: func() {
		select {
		case flushed <- struct{}{}:
		default:
		}
	}})
	defer q.Close()
	select {
	case <-flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("no flush on the tick")
	}
}

// TestLinger: with Linger, items are still handled in order and soon, a
// barrier (Sync) does not wait out the linger, and Close handles what is
// left.
func TestLinger(t *testing.T) {
	var mu sync.Mutex
	var got []int
	q := Start(Config[int]{Linger: 200 * time.Millisecond, Handle: func(v int) {
		mu.Lock()
		got = append(got, v)
		mu.Unlock()
	}})
	defer q.Close()
	for i := range 100 {
		if !q.Offer(i) {
			t.Fatal("refused")
		}
	}
	start := time.Now()
	q.Sync()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Sync waited %v, out the linger", d)
	}
	mu.Lock()
	if len(got) != 100 {
		t.Fatalf("%d handled after Sync, want 100", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("out of order at %d: %d", i, v)
		}
	}
	mu.Unlock()
	// While it lingers, new items wait for it (no wake-up per item) and
	// are handled within about one linger.
	q.Offer(100)
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 101 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an item offered while lingering was never handled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	q.Offer(101)
	q.Close()
	if len(got) != 102 {
		t.Fatalf("%d handled after Close, want 102", len(got))
	}
}

// Package bgqueue hands work from a hot path to one goroutine of its own
// without ever making the hot path wait: Offer puts an item in a bounded
// queue or, when the queue is full or closed, refuses it at once, and the
// caller decides what a refusal means (drop and count, or do the work
// itself). The request log, the span batcher and the gateway's telemetry
// are all one of these.
package bgqueue

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what the queue's goroutine does. Handle is required.
type Config[T any] struct {
	// Size bounds the items waiting; 0 means 1024.
	Size int
	// Handle is called for each item, in order, on the queue's goroutine.
	Handle func(T)
	// Flush, when set, is called every Tick (when Tick > 0), and once at
	// the end, after the last item was handled.
	Flush func()
	Tick  time.Duration
	// Linger, when set, is how long the goroutine waits for more items
	// after it found the queue empty, before it sleeps until the next
	// Offer. Under a steady stream of items it then wakes once per Linger
	// rather than once per item: on a busy request path each wake-up of a
	// parked goroutine costs a thread hand-off, more than the work handed
	// over. Items wait at most about Linger longer; Sync does not.
	Linger time.Duration
	// OnPanic, when set, hears of a panic in Handle or Flush, with its
	// stack. The goroutine recovers and carries on with the next item: a
	// bad item costs that item, not the queue.
	OnPanic func(v any, stack []byte)
}

// Queue is a bounded queue drained by one goroutine. It is safe for
// concurrent use; Close stops it.
type Queue[T any] struct {
	cfg Config[T]
	ch  chan item[T]
	// kick wakes a lingering goroutine for a barrier (Sync).
	kick   chan struct{}
	mu     sync.RWMutex // Offer and Sync against Stop
	closed bool
	done   chan struct{}
	panics atomic.Int64
}

// item is a value, or a barrier (Sync) when barrier is set.
type item[T any] struct {
	v       T
	barrier chan struct{}
}

// Start starts the queue's goroutine.
func Start[T any](cfg Config[T]) *Queue[T] {
	if cfg.Size <= 0 {
		cfg.Size = 1024
	}
	q := &Queue[T]{cfg: cfg, ch: make(chan item[T], cfg.Size), kick: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Offer queues v without waiting. It reports false, and v is not queued,
// when the queue is full or stopped.
func (q *Queue[T]) Offer(v T) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	select {
	case q.ch <- item[T]{v: v}:
		return true
	default:
		return false
	}
}

// Sync returns once every item queued before it was handled; at once when
// the queue is stopped. Unlike Offer it waits for room.
func (q *Queue[T]) Sync() {
	b := make(chan struct{})
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return
	}
	q.ch <- item[T]{barrier: b}
	q.mu.RUnlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	<-b
}

// Stop refuses further items; the goroutine handles what is queued, calls
// Flush and ends (Done closes). Safe to call twice.
func (q *Queue[T]) Stop() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
}

// Done is closed once the goroutine has ended.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

// Close stops the queue and waits for its goroutine. Safe to call twice.
func (q *Queue[T]) Close() {
	q.Stop()
	<-q.done
}

// Panics counts the panics recovered in Handle and Flush.
func (q *Queue[T]) Panics() int64 { return q.panics.Load() }

func (q *Queue[T]) run() {
	defer close(q.done)
	var tick <-chan time.Time
	if q.cfg.Tick > 0 && q.cfg.Flush != nil {
		t := time.NewTicker(q.cfg.Tick)
		defer t.Stop()
		tick = t.C
	}
	var linger *time.Timer
	if q.cfg.Linger > 0 {
		linger = time.NewTimer(q.cfg.Linger)
		defer linger.Stop()
	}
	for {
		select {
		case it, ok := <-q.ch:
			if !ok {
				q.flush()
				return
			}
			if !q.take(it) {
				continue
			}
		case <-tick:
			q.flush()
			continue
		}
		if linger == nil {
			continue
		}
		// Handle what else is queued, then give the queue Linger to fill
		// before parking on it again.
		for {
			if !q.drain() {
				q.flush()
				return
			}
			linger.Reset(q.cfg.Linger)
			select {
			case <-linger.C:
			case <-q.kick:
			case <-tick:
				q.flush()
			}
			if len(q.ch) == 0 {
				break
			}
		}
	}
}

// take handles one item; false for a barrier.
func (q *Queue[T]) take(it item[T]) bool {
	if it.barrier != nil {
		close(it.barrier)
		return false
	}
	q.handle(it.v)
	return true
}

// drain handles every item queued now; false once the queue is closed.
func (q *Queue[T]) drain() bool {
	for {
		select {
		case it, ok := <-q.ch:
			if !ok {
				return false
			}
			q.take(it)
		default:
			return true
		}
	}
}

func (q *Queue[T]) handle(v T) {
	defer q.recovered()
	q.cfg.Handle(v)
}

func (q *Queue[T]) flush() {
	if q.cfg.Flush == nil {
		return
	}
	defer q.recovered()
	q.cfg.Flush()
}

func (q *Queue[T]) recovered() {
	if v := recover(); v != nil {
		q.panics.Add(1)
		if q.cfg.OnPanic != nil {
			q.cfg.OnPanic(v, debug.Stack())
		}
	}
}

package sim

import (
	"sync/atomic"
	"time"
)

// Where a request's tokens come from, and when: the engine's scheduler,
// or fixed timings.

// tokenSource tells a handler when tokens are ready.
type tokenSource interface {
	// wait blocks until more than have tokens are ready and returns how
	// many are; ok is false when the request was aborted.
	wait(have int) (n int, ok bool)
	// sleep pauses for d unless the request is aborted first.
	sleep(d time.Duration) bool
	abort()
	// split is the engine's queue, prefill and decode time so far.
	split() (queue, prefill, decode time.Duration)
	// cachedTokens is the prompt tokens found in the prefix cache.
	cachedTokens() int
}

type engineSource struct{ s *seq }

func (e *engineSource) wait(have int) (int, bool) {
	for {
		if e.s.aborted.Load() {
			return 0, false
		}
		if n := int(e.s.emitted.Load()); n > have {
			return n, true
		}
		if e.s.done.Load() {
			return int(e.s.emitted.Load()), false
		}
		<-e.s.notify
	}
}

func (e *engineSource) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-e.s.notify:
			if e.s.aborted.Load() {
				return false
			}
		}
	}
}

func (e *engineSource) abort() { e.s.abort() }

func (e *engineSource) cachedTokens() int { return int(e.s.cached.Load()) }

func (e *engineSource) split() (queue, prefill, decode time.Duration) {
	return time.Duration(e.s.queueNs.Load()), time.Duration(e.s.prefillNs.Load()), time.Duration(e.s.decodeNs.Load())
}

// fixedSource releases token i at start+ttft+i*itl, with no load effects.
type fixedSource struct {
	start   time.Time
	ttft    time.Duration
	itl     time.Duration
	total   int
	aborted chan struct{}
	once    atomic.Bool
	timer   *time.Timer
	clock   *clock
}

func newFixedSource(ttft, itl time.Duration, total int, c *clock) *fixedSource {
	return &fixedSource{start: time.Now(), ttft: ttft, itl: itl, total: total, aborted: make(chan struct{}), clock: c}
}

func (f *fixedSource) wait(have int) (int, bool) {
	due := f.start.Add(f.ttft + time.Duration(have)*f.itl)
	if !f.sleepUntil(due) {
		return 0, false
	}
	if f.itl == 0 {
		return f.total, true
	}
	n := int(time.Since(f.start.Add(f.ttft))/f.itl) + 1
	return min(max(n, have+1), f.total), true
}

func (f *fixedSource) sleepUntil(t time.Time) bool {
	if f.timer == nil {
		f.timer = time.NewTimer(time.Hour)
		f.timer.Stop()
	}
	return waitUntil(t, f.timer, f.aborted, f.clock.lightLoad())
}

func (f *fixedSource) sleep(d time.Duration) bool { return f.sleepUntil(time.Now().Add(d)) }

func (f *fixedSource) cachedTokens() int { return 0 }

func (f *fixedSource) split() (queue, prefill, decode time.Duration) {
	return 0, f.ttft, time.Duration(max(f.total-1, 0)) * f.itl
}

func (f *fixedSource) abort() {
	if f.once.CompareAndSwap(false, true) {
		close(f.aborted)
	}
}

package sim

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Go's timers wake late: on a busy 2-core machine by about 0.35 ms at the
// median and 1.5 ms at p99 (the netpoller's wake-up, then the scheduler).
// A simulator that promises its configured TTFT and ITL within a
// millisecond wakes early and spins out the rest of the wait, yielding to
// other goroutines. Spinning costs CPU, so it is reserved for light load:
// the engine's one loop while its batch is at most engineSpinBatch (at
// most spinWindow a step), a fixed-mode request only while at most
// maxSpinners requests are active,
// where it is what calibration needs; under load a late wake is small next
// to the load's own effects.
const (
	spinWindow      = 700 * time.Microsecond
	maxSpinners     = 4
	engineSpinBatch = 16
)

// clock is a server's wait policy: how many requests are active decides
// whether their waits may spin.
type clock struct {
	active atomic.Int32
}

// lightLoad reports whether fixed-mode waits may spin.
func (c *clock) lightLoad() bool { return c == nil || c.active.Load() <= maxSpinners }

// waitUntil blocks until t, or until abort is closed (false). spin allows
// the last spinWindow to be spun. timer is reused across calls; it must be
// stopped and drained.
func waitUntil(t time.Time, timer *time.Timer, abort <-chan struct{}, spin bool) bool {
	stopped, _ := waitUntilKick(t, timer, abort, nil, spin) // a nil kick never receives
	return !stopped
}

// waitUntilKick is waitUntil that also returns early, with kicked set,
// when kick receives; stopped when abort is closed.
func waitUntilKick(t time.Time, timer *time.Timer, abort, kick <-chan struct{}, spin bool) (stopped, kicked bool) {
	d := time.Until(t)
	if spin {
		d -= spinWindow
	}
	if d > 0 {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-abort:
			timer.Stop()
			return true, false
		case <-kick:
			timer.Stop()
			return false, true
		}
	}
	for spin && time.Now().Before(t) {
		select {
		case <-abort:
			return true, false
		case <-kick:
			return false, true
		default:
		}
		runtime.Gosched()
	}
	return false, false
}

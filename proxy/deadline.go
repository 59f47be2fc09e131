package proxy

import (
	"sync/atomic"
	"time"
)

// coarseDeadline decides when a connection's deadline is worth setting
// again. A deadline set at most a 64th of its timeout ago is kept rather
// than pushed back: the timeout then fires between 63/64 of it and the
// whole of it after the last read or write, and a stream pays one runtime
// timer update per 64th of the timeout instead of one per read or write
// (docs/benchmarks-log.md,
// "2026-12-03: Request cost against nginx (issue 16)"). due is for the connection's one reader or
// writer; reset, for whoever moved the deadline meanwhile, from any
// goroutine.
type coarseDeadline struct {
	at atomic.Int64  // when the deadline in force was set, Unix ns; 0: none known
	d  time.Duration // its timeout
}

// due reports whether a deadline of now+d should be set now, and if so
// records it. A different timeout is always set.
func (c *coarseDeadline) due(now time.Time, d time.Duration) bool {
	ns := now.UnixNano()
	if at := c.at.Load(); at != 0 && d == c.d && time.Duration(ns-at) < d>>6 {
		return false
	}
	c.at.Store(ns)
	c.d = d
	return true
}

// reset makes the next due true: the deadline was set elsewhere.
func (c *coarseDeadline) reset() { c.at.Store(0) }

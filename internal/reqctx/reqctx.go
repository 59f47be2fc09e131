// Package reqctx is the context of one request through the gateway: a
// context.Context that ends once, with a cause, when its owner cancels
// it, when its deadline passes, or when its group is cancelled (the
// gateway's shutdown).
//
// It does what context.WithCancelCause under a shared parent followed by
// context.WithTimeoutCause does, for a fraction of the cost on a path
// that runs tens of thousands of times a second:
//   - it lives inside the request's own struct: starting one allocates
//     nothing;
//   - it is not a child in a map of its parent: the group keeps its live
//     contexts in an intrusive list, ordered by deadline;
//   - there is no timer per request: the group has one, aimed at the
//     earliest deadline, and since every request of a configuration gets
//     the same timeout, a new context almost always goes at the tail and
//     leaves the timer alone;
//   - AfterFunc registers a function in the context itself, with no child
//     context and no channel (Done makes its channel only when asked).
//
// Cause returns the cause of a Ctx, and of any other context what
// context.Cause does.
package reqctx

import (
	"context"
	"sync"
	"time"
)

// Group is the parent of request contexts: Cancel ends every one of them,
// and any started afterwards, with its cause. The zero value is ready.
type Group struct {
	mu         sync.Mutex
	head, tail *Ctx  // live contexts, earliest deadline first
	live       int   // contexts started and not yet ended
	cause      error // set by Cancel
	timer      *time.Timer
	armed      time.Time // when timer fires; zero when it is not set
}

// Ctx is one request's context. Its zero value is not usable: Start it.
// It must not be copied, and must stay alive (not be reused) until it has
// ended: cancel it when the request is done.
type Ctx struct {
	g          *Group
	prev, next *Ctx // in g's list while linked
	linked     bool
	deadline   time.Time // zero: none
	until      time.Time // the deadline, or forever: the list's order
	onDeadline error     // the cause when the deadline passes

	mu    sync.Mutex
	cause error         // nil while live
	done  chan struct{} // made by the first Done
	seq   uint32
	fns   []afterFunc
	buf   [2]afterFunc // fns' first backing array
}

type afterFunc struct {
	id uint32
	f  func()
}

// closed is the Done channel of a context that ended before anyone asked.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Start begins c in g. After timeout (none when zero or less) it ends
// with onDeadline as its cause. When g is already cancelled, c starts
// ended, with g's cause.
func (g *Group) Start(c *Ctx, timeout time.Duration, onDeadline error) {
	c.g = g
	c.cause, c.done, c.fns = nil, nil, c.buf[:0]
	c.onDeadline = onDeadline
	c.deadline, c.until = time.Time{}, forever
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
		c.until = c.deadline
	}
	g.mu.Lock()
	if g.cause != nil {
		cause := g.cause
		g.mu.Unlock()
		c.end(cause, false)
		return
	}
	g.live++
	g.insert(c)
	g.mu.Unlock()
}

// forever orders contexts without a deadline after every other.
var forever = time.Unix(1<<62, 0)

// insert links c by its deadline, searching from the tail (where a
// context with the common timeout belongs), and aims the timer at it when
// it is now the earliest. Called with g.mu held.
func (g *Group) insert(c *Ctx) {
	at := g.tail
	for at != nil && at.until.After(c.until) {
		at = at.prev
	}
	c.prev = at
	if at == nil {
		c.next = g.head
		g.head = c
	} else {
		c.next = at.next
		at.next = c
	}
	if c.next == nil {
		g.tail = c
	} else {
		c.next.prev = c
	}
	c.linked = true
	if g.head == c && c.until != forever && (g.armed.IsZero() || c.until.Before(g.armed)) {
		g.arm(c.until)
	}
}

// arm sets the timer to fire at t. Called with g.mu held.
func (g *Group) arm(t time.Time) {
	g.armed = t
	d := time.Until(t)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.expire)
		return
	}
	g.timer.Reset(d)
}

// unlink takes c out of the list. Called with g.mu held.
func (g *Group) unlink(c *Ctx) {
	if !c.linked {
		return
	}
	if c.prev == nil {
		g.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		g.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
}

// expire ends the contexts whose deadline has passed and aims the timer
// at the next one. A context that ended early is already unlinked, so
// the timer may fire with nothing to do: it then only re-aims.
func (g *Group) expire() {
	now := time.Now()
	var due []*Ctx
	g.mu.Lock()
	for c := g.head; c != nil && !c.until.After(now); c = g.head {
		g.unlink(c)
		due = append(due, c)
	}
	g.armed = time.Time{}
	if g.head != nil && g.head.until != forever {
		g.arm(g.head.until)
	}
	g.mu.Unlock()
	for _, c := range due {
		c.end(c.onDeadline, true)
	}
}

// Cancel ends every live context of g, and every one started from now
// on, with cause (context.Canceled if nil). Only the first call counts.
func (g *Group) Cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	g.mu.Lock()
	if g.cause != nil {
		g.mu.Unlock()
		return
	}
	g.cause = cause
	var all []*Ctx
	for c := g.head; c != nil; c = g.head {
		g.unlink(c)
		all = append(all, c)
	}
	if g.timer != nil {
		g.timer.Stop()
		g.armed = time.Time{}
	}
	g.mu.Unlock()
	for _, c := range all {
		c.end(cause, true)
	}
}

// Live returns the number of contexts started in g and not yet ended.
func (g *Group) Live() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live
}

// Cancel ends c with cause (context.Canceled if nil). Only the first end
// counts; the functions registered with AfterFunc and not stopped each
// run in a goroutine of their own.
func (c *Ctx) Cancel(cause error) { c.end(cause, true) }

// end records cause, closes Done, takes c out of its group (counted) and
// starts c's functions. counted says c was counted live in its group.
func (c *Ctx) end(cause error, counted bool) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		return
	}
	c.cause = cause
	if counted && c.g != nil {
		// Out of the group before Done closes: whoever waits on Done
		// finds the group's count already down. (Lock order: c.mu, then
		// g.mu; the group never takes c.mu while it holds its own.)
		g := c.g
		g.mu.Lock()
		g.unlink(c)
		g.live--
		g.mu.Unlock()
	}
	if c.done == nil {
		c.done = closed
	} else {
		close(c.done)
	}
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for _, a := range fns {
		go a.f()
	}
}

// AfterFunc arranges for f to run in its own goroutine once c ends (at
// once if it has). stop unregisters f; it reports whether it stopped f
// before it was started. context.AfterFunc finds this method, so the two
// behave alike.
func (c *Ctx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.seq++
	id := c.seq
	c.fns = append(c.fns, afterFunc{id, f})
	c.mu.Unlock()
	return func() bool { return c.stop(id) }
}

func (c *Ctx) stop(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.fns {
		if a.id == id {
			c.fns = append(c.fns[:i], c.fns[i+1:]...)
			return true
		}
	}
	return false
}

// Deadline reports when c ends by its timeout, if it has one.
func (c *Ctx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

// Done returns a channel closed when c ends.
func (c *Ctx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// Err is nil while c is live, context.DeadlineExceeded once its deadline
// ended it and context.Canceled otherwise. Cause says why.
func (c *Ctx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cause == nil:
		return nil
	case c.cause == c.onDeadline:
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// Cause is nil while c is live, and then the cause it ended with.
func (c *Ctx) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Value carries no values: a request's values travel in its own struct.
func (c *Ctx) Value(any) any { return nil }

// Cause returns why ctx ended: a Ctx's own cause, else context.Cause.
func Cause(ctx context.Context) error {
	if c, ok := ctx.(interface{ Cause() error }); ok {
		return c.Cause()
	}
	return context.Cause(ctx)
}

var _ context.Context = (*Ctx)(nil)

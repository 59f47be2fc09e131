package shaping

import (
	"container/list"
	"slices"
)

// tenant is one tenant's cap, its waiting requests (FIFO) and its place
// in the round robin. Guarded by the limiter's mutex.
type tenant struct {
	name             string
	ct               counter
	weight, priority int
	inFlight         int
	dispatching      int       // waiters out of the queue while Redis is asked for them
	waiting          list.List // of *waiter
	deficit          int       // grants left in its current turn
}

func newTenant(name string) *tenant {
	t := &tenant{name: name}
	t.waiting.Init()
	return t
}

func (t *tenant) setConfig(c Tenant) {
	t.ct.maxReqs, t.ct.maxToks = c.MaxRequests, c.MaxTokens
	t.weight, t.priority = max(c.Weight, 1), c.Priority
}

// idle reports whether nothing refers to the tenant any more.
func (t *tenant) idle() bool { return t.inFlight == 0 && t.waiting.Len() == 0 && t.dispatching == 0 }

// waiter is one queued request.
type waiter struct {
	permit  Permit
	ready   chan struct{} // closed when granted
	granted bool
	elem    *list.Element
	// With shared caps: dispatching while the dispatcher asks Redis for
	// it (it is out of the queue then); gone when its client left
	// meanwhile; tenantFull when its tenant's cap was what was full.
	dispatching, gone, tenantFull bool
}

// fairQueue orders waiting requests: strict priority between levels, and
// deficit round robin between the tenants of a level, each taking up to
// its weight in grants per turn; FIFO within a tenant. A waiter whose caps
// are full does not hold up others whose caps have room.
type fairQueue struct {
	n      int
	levels []*level // by priority, highest first
}

// level is the tenants of one priority that have waiters.
type level struct {
	priority int
	ring     []*tenant
	cur      int
}

func (q *fairQueue) empty() bool { return q.n == 0 }

// push queues p behind t's other waiters.
func (q *fairQueue) push(t *tenant, p Permit) *waiter {
	w := &waiter{permit: p, ready: make(chan struct{})}
	w.elem = t.waiting.PushBack(w)
	q.n++
	if t.waiting.Len() == 1 {
		q.level(t.priority).ring = append(q.level(t.priority).ring, t)
	}
	return w
}

// level returns the level of priority p, made if missing.
func (q *fairQueue) level(p int) *level {
	i, found := slices.BinarySearchFunc(q.levels, p, func(lv *level, p int) int { return p - lv.priority })
	if !found {
		q.levels = slices.Insert(q.levels, i, &level{priority: p})
	}
	return q.levels[i]
}

// pushFront puts w, which next took out, back at the head of its tenant's
// queue with the grant it was counted for returned.
func (q *fairQueue) pushFront(w *waiter) {
	t := w.permit.tenant
	w.elem = t.waiting.PushFront(w)
	q.n++
	t.deficit++
	if t.waiting.Len() == 1 {
		lv := q.level(t.priority)
		lv.ring = append(lv.ring, t)
	}
}

// remove takes w out of the queue (its client left or its time ran out).
func (q *fairQueue) remove(w *waiter) {
	t := w.permit.tenant
	t.waiting.Remove(w.elem)
	q.n--
	if t.waiting.Len() == 0 {
		q.drop(t)
	}
}

// drop takes t, which has no waiters left, out of its level's ring.
func (q *fairQueue) drop(t *tenant) {
	t.deficit = 0
	for li, lv := range q.levels {
		i := slices.Index(lv.ring, t)
		if i < 0 {
			continue
		}
		lv.ring = slices.Delete(lv.ring, i, i+1)
		if i < lv.cur {
			lv.cur--
		}
		if lv.cur >= len(lv.ring) {
			lv.cur = 0
		}
		if len(lv.ring) == 0 {
			q.levels = slices.Delete(q.levels, li, li+1)
		}
		return
	}
}

// next dequeues the fairest waiter for which fits holds, or returns nil.
func (q *fairQueue) next(fits func(*waiter) bool) *waiter {
	for _, lv := range q.levels {
		if w := lv.next(fits); w != nil {
			q.n--
			if w.permit.tenant.waiting.Len() == 0 {
				q.drop(w.permit.tenant)
			}
			return w
		}
	}
	return nil
}

func (lv *level) next(fits func(*waiter) bool) *waiter {
	// Two passes: a tenant whose turn was used up is topped up on the way.
	for range 2 * len(lv.ring) {
		t := lv.ring[lv.cur]
		if t.deficit <= 0 {
			t.deficit = t.weight
		}
		if e := t.waiting.Front(); e != nil && fits(e.Value.(*waiter)) {
			w := e.Value.(*waiter)
			t.waiting.Remove(e)
			t.deficit--
			if t.deficit <= 0 {
				lv.cur = (lv.cur + 1) % len(lv.ring)
			}
			return w
		}
		lv.cur = (lv.cur + 1) % len(lv.ring)
	}
	return nil
}

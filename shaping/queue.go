package shaping

import (
	"container/list"
	"slices"
)

// tenant is one tenant's cap, its waiting requests (FIFO, one list per
// service class) and its place in each class's round robin. Guarded by
// the limiter's mutex.
type tenant struct {
	name             string
	ct               counter
	weight, priority int
	inFlight         int
	dispatching      int                   // waiters out of the queue while Redis is asked for them
	waiting          [NumClasses]list.List // of *waiter
	nWaiting         int                   // over every class
	deficit          [NumClasses]int       // grants left in its current turn, per class
}

func newTenant(name string) *tenant {
	t := &tenant{name: name}
	t.init()
	return t
}

func (t *tenant) init() {
	for i := range t.waiting {
		t.waiting[i].Init()
	}
}

func (t *tenant) setConfig(c Tenant) {
	t.ct.maxReqs, t.ct.maxToks = c.MaxRequests, c.MaxTokens
	t.weight, t.priority = max(c.Weight, 1), c.Priority
}

// idle reports whether nothing refers to the tenant any more.
func (t *tenant) idle() bool { return t.inFlight == 0 && t.nWaiting == 0 && t.dispatching == 0 }

// waiter is one queued request.
type waiter struct {
	permit  Permit
	ready   chan struct{} // closed when granted or shed
	granted bool
	// shed: taken out of the queue for a request of a higher class
	// (ready is closed, granted is not set).
	shed bool
	elem *list.Element
	seq  uint64 // order of arrival: lower is older
	// With shared caps: dispatching while the dispatcher asks Redis for
	// it (it is out of the queue then); gone when its client left
	// meanwhile; tenantFull when its tenant's cap was what was full.
	// classFull likewise for its class's cap.
	dispatching, gone, tenantFull, classFull bool
}

// fairQueue orders waiting requests: strict order between service
// classes, but for the lower classes' share (next); within a class,
// strict priority between tenant priority levels, and deficit round
// robin between the tenants of a level, each taking up to its weight in
// grants per turn; FIFO within a tenant and class. A waiter whose caps
// are full does not hold up others whose caps have room. Without classes
// every request is a default one and this is the queue it always was.
type fairQueue struct {
	n      int
	nc     [NumClasses]int
	levels [NumClasses][]*level // per class, by priority, highest first
	seq    uint64
	// share is classes.lower_share (0 or less: strict order); streak
	// counts the grants in a row that went to a class while a lower one
	// waited.
	share, streak int
}

// level is the tenants of one priority that have waiters of one class.
type level struct {
	priority int
	class    Class
	ring     []*tenant
	cur      int
}

func (q *fairQueue) empty() bool { return q.n == 0 }

// push queues p behind t's other waiters of its class.
func (q *fairQueue) push(t *tenant, p Permit) *waiter {
	q.seq++
	w := &waiter{permit: p, ready: make(chan struct{}), seq: q.seq}
	q.insert(w, false)
	return w
}

// insert puts w in its tenant's list of its class, at the back or front.
func (q *fairQueue) insert(w *waiter, front bool) {
	t, c := w.permit.tenant, w.permit.class
	if front {
		w.elem = t.waiting[c].PushFront(w)
	} else {
		w.elem = t.waiting[c].PushBack(w)
	}
	q.n++
	q.nc[c]++
	t.nWaiting++
	if t.waiting[c].Len() == 1 {
		lv := q.level(c, t.priority)
		lv.ring = append(lv.ring, t)
	}
}

// level returns class c's level of priority p, made if missing.
func (q *fairQueue) level(c Class, p int) *level {
	lvs := q.levels[c]
	i, found := slices.BinarySearchFunc(lvs, p, func(lv *level, p int) int { return p - lv.priority })
	if !found {
		q.levels[c] = slices.Insert(lvs, i, &level{priority: p, class: c})
	}
	return q.levels[c][i]
}

// pushFront puts w, which next took out, back at the head of its tenant's
// queue with the grant it was counted for returned.
func (q *fairQueue) pushFront(w *waiter) {
	q.insert(w, true)
	w.permit.tenant.deficit[w.permit.class]++
}

// remove takes w out of the queue (its client left, its time ran out, or
// it was shed).
func (q *fairQueue) remove(w *waiter) {
	t, c := w.permit.tenant, w.permit.class
	t.waiting[c].Remove(w.elem)
	q.taken(t, c)
}

// taken counts one waiter of t in class c out of the queue.
func (q *fairQueue) taken(t *tenant, c Class) {
	q.n--
	q.nc[c]--
	t.nWaiting--
	if t.waiting[c].Len() == 0 {
		q.drop(t, c)
	}
}

// drop takes t, which has no waiters of class c left, out of its ring.
func (q *fairQueue) drop(t *tenant, c Class) {
	t.deficit[c] = 0
	for li, lv := range q.levels[c] {
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
			q.levels[c] = slices.Delete(q.levels[c], li, li+1)
		}
		return
	}
}

// next dequeues the waiter to grant next for which fits holds, or nil.
//
// The rule between classes: strict order (priority, then default, then
// flex), except that while a class below the one granted has waiters, at
// most share-1 grants in a row go to higher classes; the next grant then
// goes to the waiting lower class whose oldest waiter arrived first
// (within it, tenant priority and round robin as usual). When that class
// has no waiter that fits, the share stays due and strict order goes on.
func (q *fairQueue) next(fits func(*waiter) bool) *waiter {
	if q.share > 1 && q.streak >= q.share-1 {
		if w := q.nextLower(fits); w != nil {
			q.streak = 0
			// The share is the floor a lower class can count on: a
			// request granted by it is not preempted (Permit.Arm).
			w.permit.byShare = true
			return w
		}
	}
	for i, c := range ClassesByRank {
		if q.nc[c] == 0 {
			continue
		}
		if w := q.nextOf(c, fits); w != nil {
			if q.waitingBelow(i) {
				q.streak++
			} else {
				q.streak = 0
			}
			return w
		}
	}
	return nil
}

// waitingBelow reports whether a class below ClassesByRank[i] has waiters.
func (q *fairQueue) waitingBelow(i int) bool {
	for _, c := range ClassesByRank[i+1:] {
		if q.nc[c] > 0 {
			return true
		}
	}
	return false
}

// nextLower grants the lower classes' share: from the classes below the
// highest that waits, the one whose oldest waiter arrived first.
func (q *fairQueue) nextLower(fits func(*waiter) bool) *waiter {
	top := -1
	for i, c := range ClassesByRank {
		if q.nc[c] > 0 {
			top = i
			break
		}
	}
	if top < 0 {
		return nil
	}
	var tried [NumClasses]bool
	for range NumClasses {
		best, bestSeq := Class(0), uint64(0)
		found := false
		for _, c := range ClassesByRank[top+1:] {
			if q.nc[c] == 0 || tried[c] {
				continue
			}
			if s := q.oldest(c); !found || s < bestSeq {
				best, bestSeq, found = c, s, true
			}
		}
		if !found {
			return nil
		}
		tried[best] = true
		if w := q.nextOf(best, fits); w != nil {
			return w
		}
	}
	return nil
}

// oldest is the arrival of class c's oldest waiter (the lists are FIFO:
// each tenant's oldest is its front).
func (q *fairQueue) oldest(c Class) uint64 {
	var s uint64
	first := true
	for _, lv := range q.levels[c] {
		for _, t := range lv.ring {
			if e := t.waiting[c].Front(); e != nil {
				if ws := e.Value.(*waiter).seq; first || ws < s {
					s, first = ws, false
				}
			}
		}
	}
	return s
}

// newest returns class c's waiter that arrived last, or nil.
func (q *fairQueue) newest(c Class) *waiter {
	var out *waiter
	for _, lv := range q.levels[c] {
		for _, t := range lv.ring {
			if e := t.waiting[c].Back(); e != nil {
				if w := e.Value.(*waiter); out == nil || w.seq > out.seq {
					out = w
				}
			}
		}
	}
	return out
}

// nextOf dequeues the fairest waiter of class c for which fits holds.
func (q *fairQueue) nextOf(c Class, fits func(*waiter) bool) *waiter {
	for _, lv := range q.levels[c] {
		if w := lv.next(fits); w != nil {
			q.taken(w.permit.tenant, c)
			return w
		}
	}
	return nil
}

func (lv *level) next(fits func(*waiter) bool) *waiter {
	c := lv.class
	// Two passes: a tenant whose turn was used up is topped up on the way.
	for range 2 * len(lv.ring) {
		t := lv.ring[lv.cur]
		if t.deficit[c] <= 0 {
			t.deficit[c] = t.weight
		}
		if e := t.waiting[c].Front(); e != nil && fits(e.Value.(*waiter)) {
			w := e.Value.(*waiter)
			t.waiting[c].Remove(e)
			t.deficit[c]--
			if t.deficit[c] <= 0 {
				lv.cur = (lv.cur + 1) % len(lv.ring)
			}
			return w
		}
		lv.cur = (lv.cur + 1) % len(lv.ring)
	}
	return nil
}

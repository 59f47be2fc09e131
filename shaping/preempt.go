package shaping

import "container/list"

// Shedding and preemption by class. Shedding: when the queue is full, a
// request of a higher class takes the place of the newest waiter of the
// lowest class below it, which is answered ErrShed. Preemption: a request
// of a preemptible class holding a slot is armed (Permit.Arm) until its
// first byte goes to its client (Permit.Disarm); a request of a higher
// class that must queue preempts one such request, lowest class first,
// newest first: the limiter takes its slot back at once, for the waiter,
// and calls its cancel function, which ends it at the backend.

// armed is a permit that may be preempted.
type armed struct {
	p      *Permit
	cancel func(by Class)
	elem   *list.Element
	// done: preempted (by the class that took its slot); its slot was
	// given back by the limiter, so its Release gives nothing back.
	done bool
	by   Class
}

// Arm makes p preemptible while its request has sent nothing to its
// client (unless it was granted by the lower classes' share, the floor
// they can count on): cancel is called (once, outside the limiter's lock) with the
// class that took its slot. It reports false, and arms nothing, when
// classes are off or p's class is not preemptible. Call it on the
// goroutine that holds p, before Disarm or Release.
func (p *Permit) Arm(cancel func(by Class)) bool {
	l := p.l
	if l == nil || p.classCt == nil || p.rec != nil || p.byShare {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cfg.Classes.Preemptible(p.class) {
		return false
	}
	rec := &armed{p: p, cancel: cancel}
	rec.elem = l.armed[p.class].PushBack(rec)
	p.rec = rec
	return true
}

// Disarm ends p's preemptible time (its first byte is about to go out).
// It reports false when p was preempted already: its request must then
// send nothing more, its cancel function has been or is being called.
func (p *Permit) Disarm() bool {
	l := p.l
	if l == nil || p.rec == nil {
		return true
	}
	l.mu.Lock()
	ok := l.disarm(p.rec)
	if ok {
		p.rec = nil
	}
	l.mu.Unlock()
	return ok
}

// Preempted reports whether p was preempted.
func (p *Permit) Preempted() bool {
	l := p.l
	if l == nil || p.rec == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return p.rec.done
}

// PreemptedBy returns the class that took p's slot, when p was preempted.
func (p *Permit) PreemptedBy() (Class, bool) {
	l := p.l
	if l == nil || p.rec == nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return p.rec.by, p.rec.done
}

// Class is the class p counts in (ClassDefault with classes off).
func (p *Permit) Class() Class { return p.class }

// disarm takes rec off the armed list, reporting false when it was
// preempted. Called with l.mu held.
func (l *Limiter) disarm(rec *armed) bool {
	if rec.done {
		return false
	}
	if rec.elem != nil {
		l.armed[rec.p.class].Remove(rec.elem)
		rec.elem = nil
	}
	return true
}

// preemptFor finds a request to preempt for w, which had to queue: of a
// preemptible class below w's, the lowest class first and the newest
// first, whose slot would let w in (with shared caps, whose Redis said a
// cap was full: one of the same pool, the replica's best guess). The
// victim's slot is given back and w's dispatched; the caller calls the
// victim's cancel once it has let go of the lock. Called with l.mu held.
func (l *Limiter) preemptFor(w *waiter, sharedFull bool) *armed {
	if l.shared != nil && l.sharedUp.Load() && !sharedFull {
		return nil
	}
	wc := w.permit.class
	for i := len(ClassesByRank) - 1; i >= 0; i-- {
		c := ClassesByRank[i]
		if !wc.Above(c) {
			break
		}
		for e := l.armed[c].Back(); e != nil; e = e.Prev() {
			rec := e.Value.(*armed)
			if !l.frees(rec.p, &w.permit) {
				continue
			}
			l.armed[c].Remove(e)
			rec.elem, rec.done, rec.by = nil, true, wc
			held := *rec.p // its holder still reads its own copy
			l.giveBack(&held)
			l.stats.Classes[c].Preempted++
			l.dispatchAny()
			return rec
		}
	}
	return nil
}

// frees reports whether giving back v would make room for p. With shared
// caps up (Redis said full) it is a guess: v holds a slot of p's pool.
// Called with l.mu held.
func (l *Limiter) frees(v, p *Permit) bool {
	if l.shared != nil && l.sharedUp.Load() {
		return p.pool == nil || v.pool == p.pool
	}
	for _, c := range [...]*counter{&l.global, p.pool, p.model, p.tenantCt, p.classCt} {
		if c == nil {
			continue
		}
		reqs, toks := c.reqs, c.toks
		if c == &l.global || c == v.pool || c == v.model || c == v.tenantCt || c == v.classCt {
			reqs, toks = reqs-1, toks-v.tokens
		}
		after := *c
		after.reqs, after.toks = reqs, toks
		if !after.fitsAs(p.tokens, p.class) {
			return false
		}
	}
	return true
}

// shed makes room in a full queue for a request of class c: the newest
// waiter of the lowest class below c is taken out and told (ErrShed). It
// reports whether one was. Called with l.mu held.
func (l *Limiter) shed(c Class) bool {
	if !l.cfg.Classes.Enabled {
		return false
	}
	for i := len(ClassesByRank) - 1; i >= 0; i-- {
		low := ClassesByRank[i]
		if !c.Above(low) {
			return false
		}
		if l.q.nc[low] == 0 {
			continue
		}
		w := l.q.newest(low)
		if w == nil {
			continue
		}
		l.q.remove(w)
		w.shed = true
		l.stats.Classes[low].Shed++
		close(w.ready)
		return true
	}
	return false
}

// shedDone ends the wait of a waiter that was shed.
func (l *Limiter) shedDone(w *waiter) error {
	l.mu.Lock()
	l.forget(w.permit.tenant)
	l.mu.Unlock()
	return ErrShed
}

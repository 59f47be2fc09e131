package shaping

import "time"

// What the limiter can tell of itself: its counters, the usage of each
// cap, and a Retry-After for the refused.

// Stats are the limiter's counters since it was made.
type Stats struct {
	Admitted, Queued              int64
	RejectedFull, RejectedTimeout int64
	// Of the two above, those whose tenant's own cap was full.
	RejectedFullTenant, RejectedTimeoutTenant int64
	Cancelled                                 int64 // left the queue because the client did
	Waiting                                   int
	InFlightRequests, InFlightTokens          int64 // at the global level, this process
	// Shared is set when the caps are shared through Redis; SharedUp
	// when Redis answers (otherwise OnFailure applies).
	Shared, SharedUp bool
	// SharedDownTransitions counts the times Redis was found down.
	SharedDownTransitions int64
	// RejectedShared counts refusals because Redis was down (fail-closed).
	RejectedShared int64
	// Panics counts panics recovered in shared mode's background loops.
	Panics int64
	// LeasesExpiring counts leases not given back to Redis because the
	// release queue was full: they expire by their TTL instead.
	LeasesExpiring int64
	// Classes are the counters of each service class, indexed by Class
	// (all in ClassDefault with classes off).
	Classes [NumClasses]ClassStats
}

// ClassStats are one service class's counters.
type ClassStats struct {
	Admitted, Queued int64
	// Shed: taken out of a full queue for a higher class; Preempted: its
	// slot taken back before its first byte for a higher class; TimedOut:
	// waited past the class's queue_timeout.
	Shed, Preempted, TimedOut int64
	Waiting                   int
	InFlightRequests          int64 // this process
	InFlightTokens            int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Waiting = l.q.n
	for k := range s.Classes {
		s.Classes[k].Waiting = l.q.nc[k]
		s.Classes[k].InFlightRequests, s.Classes[k].InFlightTokens = l.classes[k].reqs, l.classes[k].toks
	}
	s.InFlightRequests, s.InFlightTokens = l.global.reqs, l.global.toks
	s.Shared, s.SharedUp = l.shared != nil, l.sharedUp.Load()
	s.Panics = l.panics.Load()
	s.LeasesExpiring = l.leasesExpiring.Load()
	return s
}

// CapUsage is what one configured cap holds now.
type CapUsage struct {
	Level, Name      string // level: global, pool, model or tenant
	Requests, Tokens int64
	MaxRequests      int64
	MaxTokens        int64
}

// Caps returns the usage of every configured cap (tenants only when
// listed in the configuration: one per API key would be unbounded).
func (l *Limiter) Caps() []CapUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	use := func(level, name string, c *counter) CapUsage {
		return CapUsage{Level: level, Name: name, Requests: c.reqs, Tokens: c.toks, MaxRequests: c.maxReqs, MaxTokens: c.maxToks}
	}
	out := []CapUsage{use("global", "", &l.global)}
	for name := range l.cfg.Pools {
		out = append(out, use("pool", name, l.pools[name]))
	}
	for name := range l.cfg.Models {
		out = append(out, use("model", name, l.models[name]))
	}
	if l.cfg.Classes.Enabled {
		for _, k := range ClassesByRank {
			if cc := l.cfg.Classes.Of(k); cc.MaxRequests > 0 || cc.MaxTokens > 0 {
				out = append(out, use("class", k.String(), &l.classes[k]))
			}
		}
	}
	for name := range l.cfg.Tenants {
		if t := l.tenants[name]; t != nil {
			out = append(out, use("tenant", name, &t.ct))
		} else {
			out = append(out, CapUsage{Level: "tenant", Name: name})
		}
	}
	return out
}

// RetryAfter suggests when a refused client may try again: the mean time
// a slot is held, at least a second.
func (l *Limiter) RetryAfter() time.Duration {
	l.mu.Lock()
	d := l.holdEWMA
	l.mu.Unlock()
	return max(d.Round(time.Second), time.Second)
}

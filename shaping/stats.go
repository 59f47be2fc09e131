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
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Waiting = l.q.n
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

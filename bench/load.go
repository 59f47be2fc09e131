package bench

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// LoadSpec is how a stage sends its requests. It is recorded with the run.
type LoadSpec struct {
	// Mode is "closed" (Concurrency users, each sending its next request
	// when the last ends), "open" (Rate requests/s on a schedule, whether
	// or not earlier ones finished) or "replay" (the workload's own times).
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	// Arrival is "poisson" (default), "constant" or "gamma" (with
	// Burstiness as its shape: below 1 burstier than Poisson, above 1
	// more regular).
	Arrival    string  `json:"arrival,omitempty"`
	Burstiness float64 `json:"burstiness,omitempty"`
	// MaxConcurrency caps requests in flight in open loop; a request that
	// finds the cap full waits, and the wait shows in its send lag.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Duration and Requests bound the measured part; at least one is set.
	Duration time.Duration `json:"duration,omitempty"`
	Requests int           `json:"requests,omitempty"`
	// WarmupRequests or WarmupTime come first and are left out of every
	// figure.
	WarmupRequests int           `json:"warmup_requests,omitempty"`
	WarmupTime     time.Duration `json:"warmup_time,omitempty"`
	// WarmupPerUser makes a closed loop's warm-up one request per user,
	// at each stage's concurrency.
	WarmupPerUser bool `json:"warmup_per_user,omitempty"`
	// RampUp spreads a closed loop's first requests (a session run's
	// first sessions) over this span.
	RampUp time.Duration `json:"ramp_up,omitempty"`
	// Timeout bounds one request; default 10 minutes.
	Timeout time.Duration `json:"timeout"`
	// ThinkTime is a session user's pause between an answer and its next
	// turn (mode "sessions": Concurrency users, each in a multi-turn
	// conversation, session.go).
	ThinkTime time.Duration `json:"think_time,omitempty"`
}

// Level is the stage's load level: its concurrency or its rate.
func (l *LoadSpec) Level() float64 {
	if l.Mode == "closed" || l.Mode == "sessions" {
		return float64(l.Concurrency)
	}
	return l.Rate
}

// Defaults fills in what was left unset: the mode (replay for a replayed
// log, open when a rate is given, else closed), one user in closed loop,
// Poisson arrivals (shape 1 for gamma), a 30 s stage when neither a
// duration nor a request count bounds it, and a 10 minute timeout per
// request. Settings that do not apply to the mode are cleared, so the
// record shows only what was in force.
func (l *LoadSpec) Defaults(replay bool) {
	switch {
	case replay:
		l.Mode = "replay"
	case l.Mode == "" && l.Rate != 0: // a rate, even a bad one, means an open loop (Validate judges it)
		l.Mode = "open"
	case l.Mode == "":
		l.Mode = "closed"
	}
	if (l.Mode == "closed" || l.Mode == "sessions") && l.Concurrency == 0 {
		l.Concurrency = 1
	}
	if l.Mode == "open" {
		if l.Arrival == "" {
			l.Arrival = "poisson"
		}
		if l.Arrival == "gamma" && l.Burstiness == 0 {
			l.Burstiness = 1
		}
	} else {
		l.Arrival = ""
	}
	if l.Arrival != "gamma" {
		l.Burstiness = 0
	}
	if l.Mode != "replay" && l.Mode != "sessions" && l.Duration == 0 && l.Requests == 0 {
		l.Duration = 30 * time.Second
	}
	if l.Timeout == 0 {
		l.Timeout = 10 * time.Minute
	}
}

// SetWarmup reads a warm-up as the --warmup flag gives it: a request
// count, a duration, "0" or "" for none, or "auto" (closed loop: one
// request per user; open loop: 2 s; replay: none). It needs the mode, so
// it runs after Defaults.
func (l *LoadSpec) SetWarmup(w string) error {
	l.WarmupRequests, l.WarmupTime, l.WarmupPerUser = 0, 0, false
	switch {
	case w == "auto" && l.Mode == "closed":
		l.WarmupPerUser = true
	case w == "auto" && l.Mode == "open":
		l.WarmupTime = 2 * time.Second
	case w == "auto" || w == "0" || w == "":
	default:
		if n, err := strconv.Atoi(w); err == nil && n >= 0 {
			l.WarmupRequests = n
		} else if d, err := time.ParseDuration(w); err == nil && d >= 0 {
			l.WarmupTime = d
		} else {
			return fmt.Errorf("bench: load.warmup (--warmup) %q: want a request count, a duration or auto", w)
		}
	}
	return nil
}

// Validate reports the first setting that cannot run, by its field path
// and its flag.
func (l *LoadSpec) Validate() error {
	switch {
	case l.Mode == "closed" && l.Concurrency < 1:
		return errors.New("bench: load.concurrency (--concurrency): a closed loop needs at least 1")
	case l.Mode == "sessions" && l.Concurrency < 1:
		return errors.New("bench: load.concurrency (--sessions): a session run needs at least 1 user")
	case l.Mode == "open" && (l.Rate <= 0 || math.IsInf(l.Rate, 0) || math.IsNaN(l.Rate)):
		return errors.New("bench: load.rate (--rate): an open loop needs a rate above 0")
	case l.Mode == "open" && l.Arrival != "poisson" && l.Arrival != "constant" && l.Arrival != "gamma":
		return fmt.Errorf("bench: load.arrival (--arrival) %q: want poisson, constant or gamma", l.Arrival)
	case l.Arrival == "gamma" && l.Burstiness <= 0:
		return errors.New("bench: load.burstiness (--burstiness): gamma arrivals need a shape above 0")
	case l.Mode != "closed" && l.Mode != "open" && l.Mode != "replay" && l.Mode != "sessions":
		return fmt.Errorf("bench: load.mode (--load) %q: want closed, open, replay or sessions", l.Mode)
	case l.ThinkTime < 0:
		return errors.New("bench: load.think_time (--think-time): must not be negative")
	case l.Mode != "replay" && l.Mode != "sessions" && l.Duration <= 0 && l.Requests <= 0:
		return errors.New("bench: load.duration, load.requests (--duration, --requests): every run is bounded; give one")
	case l.Duration < 0 || l.Requests < 0 || l.WarmupRequests < 0 || l.WarmupTime < 0 || l.MaxConcurrency < 0:
		return errors.New("bench: load.duration, requests, warmup_*, max_concurrency: durations and counts cannot be negative")
	}
	return nil
}

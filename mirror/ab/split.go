package ab

import (
	"math/rand/v2"
	"time"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/verdict"
)

// splitSample is one request of a canary: served by one arm only.
type splitSample struct {
	Arm                    mirror.Arm
	JSONAsked, SchemaGiven bool
	Time                   time.Time // arrival
}

// splitArms compares the two arms of a canary (a live split): different
// requests on each side, so the figures are compared as independent
// samples (bootstrap and Mann-Whitney for latencies, Agresti-Caffo and
// the two-proportion test for rates), by the same rule.
func splitArms(primary, candidate []splitSample, o verdict.Options) *Report {
	o.Defaults()
	rng := rand.New(rand.NewPCG(o.Seed, 13))
	wrap := func(s []splitSample) []mirror.Pair {
		out := make([]mirror.Pair, len(s))
		for i, x := range s {
			out[i] = mirror.Pair{Primary: x.Arm, JSONAsked: x.JSONAsked, SchemaGiven: x.SchemaGiven, Time: x.Time}
		}
		return out
	}
	pa, pb := wrap(primary), wrap(candidate)
	first := func(p mirror.Pair) mirror.Arm { return p.Primary }
	r := &Report{Pairs: 0, Primary: summarize(pa, first), Candidate: summarize(pb, first), Samples: map[string]map[string][]float64{}}
	for _, m := range []struct {
		name, better string
		get          func(mirror.Arm) float64
		judged       bool
	}{
		{"ttft", "lower", func(a mirror.Arm) float64 { return a.TTFTms }, true},
		{"tpot", "lower", func(a mirror.Arm) float64 { return a.TPOTms }, true},
		{"e2e", "lower", func(a mirror.Arm) float64 { return a.E2Ems }, true},
		{"speed", "higher", speedOf, false},
	} {
		vals := func(s []splitSample) []float64 {
			var v []float64
			for _, x := range s {
				if x.Arm.OK() && m.get(x.Arm) > 0 {
					v = append(v, m.get(x.Arm))
				}
			}
			return v
		}
		a, b := vals(primary), vals(candidate)
		if m.name != "speed" {
			r.Samples[m.name] = map[string][]float64{"primary": a, "candidate": b}
		}
		floor := o.SpeedFloor
		if m.better == "higher" {
			floor = 0
		}
		if ch, ok := verdict.Samples(0, m.name, m.better, a, b, o.SpeedTolerance, floor, rng); ok {
			if !m.judged {
				ch.Judgement, ch.Need = verdict.Info, 0
			}
			r.Changes = append(r.Changes, ch)
		}
	}
	rate := func(name string, keep func(splitSample) bool, sig func(mirror.Arm) bool) {
		count := func(s []splitSample) (x, n int) {
			for _, v := range s {
				if keep(v) {
					n++
					if sig(v.Arm) {
						x++
					}
				}
			}
			return
		}
		x, na := count(primary)
		y, nb := count(candidate)
		if na > 0 || nb > 0 {
			r.Changes = append(r.Changes, verdict.Rates(0, name, x, na, y, nb, o.QualityTolerance))
		}
	}
	all := func(splitSample) bool { return true }
	ok := func(s splitSample) bool { return s.Arm.OK() }
	rate("error_rate", all, func(a mirror.Arm) bool { return !a.OK() })
	rate("invalid_json_rate", func(s splitSample) bool { return ok(s) && s.JSONAsked }, func(a mirror.Arm) bool { return a.InvalidJSON })
	rate("schema_invalid_rate", func(s splitSample) bool { return ok(s) && s.SchemaGiven }, func(a mirror.Arm) bool { return a.SchemaInvalid })
	rate("refusal_rate", ok, func(a mirror.Arm) bool { return a.Refusal })
	rate("empty_rate", ok, func(a mirror.Arm) bool { return a.Empty })
	rate("truncated_rate", ok, func(a mirror.Arm) bool { return a.Truncated && !a.LengthByPolicy })
	if o.Objective.Mode() == verdict.BySLO {
		r.Changes = append(r.Changes, splitSLO(primary, candidate, o)...)
		r.LoadNote = "a live split: each arm served its own share of the traffic, so SLO attainment judges and goodput is not compared"
	}
	r.Result = verdict.Decide(r.Changes, o)
	return r
}

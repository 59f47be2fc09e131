package ab

import (
	"math"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/verdict"
)

// The objective's figures for mirrored traffic. Both arms of a pair
// answer the same request at the same moment, so the arms see the same
// offered load and goodput compares them; a canary's arms serve
// different shares of the traffic, so there attainment judges and
// goodput is only shown.

// armValue is an arm's latency for an SLO metric (ms, 0 when not
// measured). The mirror times each arm from its own send, so there is
// no scheduling lag: ttft_sched is its TTFT.
func armValue(a mirror.Arm, metric string) float64 {
	switch metric {
	case "ttft", "ttft_sched":
		return a.TTFTms
	case "tpot":
		return a.TPOTms
	case "e2e":
		return a.E2Ems
	}
	return 0
}

// armMet reports whether the arm answered and met every SLO.
func armMet(a mirror.Arm, slos []verdict.SLO) bool {
	return a.OK() && verdict.Met(slos, func(m string) float64 { return armValue(a, m) })
}

// sloValues are the successful arms' values of a metric for the SLO
// check: one not measured misses (+Inf), except a TPOT.
func sloValues(arms []mirror.Arm, metric string) []float64 {
	var out []float64
	for _, a := range arms {
		if !a.OK() {
			continue
		}
		switch v := armValue(a, metric); {
		case v > 0:
			out = append(out, v)
		case metric != "tpot":
			out = append(out, math.Inf(1))
		}
	}
	return out
}

// pairedSLO is attainment, goodput and each SLO's check over pairs.
func pairedSLO(pairs []mirror.Pair, o verdict.Options) []verdict.Change {
	obj := o.Objective
	a, b := make([]bool, len(pairs)), make([]bool, len(pairs))
	pa, pb := make([]mirror.Arm, len(pairs)), make([]mirror.Arm, len(pairs))
	first, last := pairs[0].Time, pairs[0].Time
	for i, p := range pairs {
		a[i], b[i] = armMet(p.Primary, obj.SLOs), armMet(p.Candidate, obj.SLOs)
		pa[i], pb[i] = p.Primary, p.Candidate
		if p.Time.Before(first) {
			first = p.Time
		}
		if p.Time.After(last) {
			last = p.Time
		}
	}
	rate := 0.0
	if s := last.Sub(first).Seconds(); s > 0 {
		rate = float64(len(pairs)-1) / s
	}
	out := []verdict.Change{
		verdict.PairedAttainment(a, b, o.QualityTolerance),
		verdict.PairedGoodput(a, b, rate, o.SpeedTolerance, o.Seed),
	}
	for _, s := range obj.SLOs {
		out = append(out, verdict.Crossing(0, s, obj.Pct(), sloValues(pa, s.Metric), sloValues(pb, s.Metric)))
	}
	return out
}

// splitSLO is attainment and each SLO's check over a canary's arms, with
// goodput shown.
func splitSLO(primary, candidate []splitSample, o verdict.Options) []verdict.Change {
	obj := o.Objective
	arms := func(s []splitSample) (out []mirror.Arm, met int) {
		for _, x := range s {
			out = append(out, x.Arm)
			if armMet(x.Arm, obj.SLOs) {
				met++
			}
		}
		return out, met
	}
	pa, x := arms(primary)
	pb, y := arms(candidate)
	out := []verdict.Change{verdict.Attainment(0, x, len(pa), y, len(pb), o.QualityTolerance)}
	for _, s := range obj.SLOs {
		out = append(out, verdict.Crossing(0, s, obj.Pct(), sloValues(pa, s.Metric), sloValues(pb, s.Metric)))
	}
	return out
}

package verdict

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Decide applies the rule of o's objective to changes and says why.
//
//   - Every mode: a quality signal that rose beyond its tolerance rolls
//     the change back, whatever speed did; so does the failure rate,
//     except under SLOs (below).
//   - strict (no objective): any judged figure that got worse rolls back.
//     A roll-back that a trade caused (one latency worse, another better)
//     says so in Hint and names the flag that would judge the trade.
//   - slo: goodput and attainment at the SLOs judge speed (bench's open
//     loop at one rate judges goodput, attainment vetoing only a fall
//     beyond doubt; closed loop judges attainment); each latency
//     is shown, and counts against the change only when the change makes
//     it cross its SLO at the objective's percentile. A failed request is
//     one that missed the SLOs: failures count there (a queue deadline
//     that sheds the requests that would miss anyway can raise goodput),
//     while the quality of the answers given stays a veto.
//   - trade: the target must improve beyond doubt; a figure in Allow may
//     worsen by its allowance; every other one as strict.
//
// Decide relabels changes in place where the objective judges a figure
// otherwise (a latency under SLOs is shown, not judged; an allowance
// re-judges its figure), so a table printed after it shows what decided.
func Decide(changes []Change, o Options) Result {
	o.Defaults()
	obj := o.Objective
	r := Result{Mode: obj.Mode(), Objective: obj.String()}
	var failures []string
	for i := range changes {
		ch := &changes[i]
		if r.Mode == BySLO && isFailureRate(ch.Metric) && ch.Judgement != Info {
			// Under SLOs a failed request is one that missed them: it
			// counts in attainment and goodput, not twice.
			if ch.Judgement == Regressed {
				failures = append(failures, fmt.Sprintf("%s rose %s: counted in attainment and goodput, where a failed request is one that missed the SLOs", ch.Metric, FormatDelta(*ch)))
			}
			ch.Judgement, ch.Need = Info, 0
			continue
		}
		if ch.Quality || ch.Share || ch.SLOCheck || !slices.Contains(speedFigures, ch.Metric) {
			continue
		}
		switch {
		case r.Mode == BySLO && ch.Judgement != Info:
			ch.Judgement, ch.Need = Info, 0
		case r.Mode == Trade:
			if allow, ok := obj.Allow[ch.Metric]; ok && ch.Judgement != Info {
				judgeSpeed(ch, ch.N, allow, o.SpeedFloor)
			}
		}
	}
	unsure, noGain := 0, []string(nil)
	if r.Mode == Trade {
		noGain, unsure = judgeTarget(changes, obj.Target, o.SpeedTolerance)
		r.Need = maxNeed(changes, obj.Target)
	}
	if r.Mode == BySLO && !slices.ContainsFunc(changes, func(c Change) bool { return c.Share }) {
		r.Verdict = Inconclusive
		r.Reasons = []string{"no request's latencies were kept to judge the SLOs by (a record written before per-request figures)"}
		return r
	}
	var unsettled []string
	for _, ch := range changes {
		switch ch.Judgement {
		case Regressed:
			r.Reasons = append(r.Reasons, regression(ch))
		case Unsure:
			unsure++
			r.Need = max(r.Need, ch.Need)
			tol := tolerance(ch, o)
			if r.Mode == Trade && ch.Metric == obj.Target && !ch.Quality {
				tol = 0 // the target must improve: no tolerance
			}
			unsettled = append(unsettled, "not settled: "+Unsettled(ch, tol))
		}
	}
	r.Reasons = append(r.Reasons, noGain...)
	switch {
	case len(r.Reasons) > 0:
		r.Verdict = RollBack
		if r.Mode == Strict {
			r.Hint = tradeHint(changes)
		}
	case unsure > 0:
		r.Verdict = Inconclusive
		r.Reasons = unsettled
	default:
		r.Verdict = Keep
		r.Reasons = append(keepReasons(changes, obj), failures...)
		if q := settledText(changes); q != "" {
			r.Reasons = append(r.Reasons, fmt.Sprintf("quality held within %.3g points: %s", o.QualityTolerance*100, q))
		}
	}
	return r
}

// tolerance is the tolerance a figure was judged against: points for a
// rate or a share, relative for speed (a trade's allowance where one is
// given).
func tolerance(ch Change, o Options) float64 {
	switch {
	case ch.Quality || ch.Share:
		return o.QualityTolerance
	case o.Objective.Mode() == Trade:
		if a, ok := o.Objective.Allow[ch.Metric]; ok {
			return a
		}
	}
	return o.SpeedTolerance
}

// isFailureRate names the figures of requests that got no answer.
func isFailureRate(metric string) bool { return metric == "failure_rate" || metric == "error_rate" }

// regression is the reason a regressed figure gives.
func regression(ch Change) string {
	switch {
	case ch.SLOCheck:
		return fmt.Sprintf("speed regressed: %s no longer holds (%.4g → %.4g ms)", ch.Metric, ch.Base, ch.New)
	case ch.Quality:
		return fmt.Sprintf("quality regressed: %s %s", ch.Metric, FormatDelta(ch))
	}
	return fmt.Sprintf("speed regressed: %s %s", ch.Metric, FormatDelta(ch))
}

// judgeTarget checks a trade's target in every stage: it must improve
// beyond doubt. It returns the reasons of a settled lack of gain and the
// number of stages where the gain is not settled.
func judgeTarget(changes []Change, target string, tol float64) (noGain []string, unsure int) {
	found := false
	for i := range changes {
		ch := &changes[i]
		if ch.Metric != target || ch.Quality {
			continue
		}
		found = true
		if ch.Judgement == Regressed || ch.Judgement == Unsure && ch.N < MinSamples {
			continue // counted with the others
		}
		lo, hi := ch.CILow, ch.CIHigh
		if ch.Better == "higher" {
			lo, hi = -hi, -lo
		}
		switch {
		case hi < 0:
			ch.Judgement, ch.Need = Holds, 0 // improved
		case lo >= -tol && hi <= tol:
			noGain = append(noGain, fmt.Sprintf("no gain: %s, the change's objective, did not improve (%s)", target, FormatDelta(*ch)))
		default:
			ch.Judgement = Unsure
			setNeed(ch, needFor(ch.N, (hi-lo)/2, math.Abs(ch.Delta)))
			unsure++
		}
	}
	if !found {
		noGain = append(noGain, fmt.Sprintf("no gain: %s, the change's objective, was not measured in these runs", target))
	}
	return noGain, unsure
}

func maxNeed(changes []Change, metric string) int {
	n := 0
	for _, ch := range changes {
		if ch.Metric == metric {
			n = max(n, ch.Need)
		}
	}
	return n
}

// improved reports whether a judged speed figure got better beyond its
// tolerance, beyond doubt.
func improved(ch Change, tol float64) bool {
	if ch.Quality || ch.Share || ch.SLOCheck || math.IsNaN(ch.CILow) || ch.N < MinSamples {
		return false
	}
	if ch.Better == "higher" {
		return ch.CILow > tol
	}
	return ch.CIHigh < -tol
}

// tradeHint names the trade in a strict roll-back that only speed
// caused while another latency improved, and the flags that would judge
// it.
func tradeHint(changes []Change) string {
	var worse, better []Change
	for _, ch := range changes {
		switch {
		case ch.Judgement == Regressed && (ch.Quality || ch.SLOCheck):
			return "" // a quality veto is no trade
		case ch.Judgement == Regressed:
			worse = append(worse, ch)
		case slices.Contains(speedFigures, ch.Metric) && improved(ch, 0.05):
			better = append(better, ch)
		}
	}
	if len(worse) == 0 || len(better) == 0 {
		return ""
	}
	names := func(cs []Change) string {
		var out []string
		for _, c := range cs {
			if n := strings.ToUpper(c.Metric); !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		if slices.Contains(out, "TTFT") {
			out = slices.DeleteFunc(out, func(n string) bool { return n == "TTFT_SCHED" })
		}
		if len(out) > 1 {
			return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
		}
		return out[0]
	}
	w := worse[0]
	allow := math.Ceil(max(w.CIHigh, w.Delta) * 100)
	return fmt.Sprintf("%s rose, %s fell: state an objective with --slo to judge the trade (or --objective %s --allow %s=+%.0f%%)",
		names(worse), names(better), better[0].Metric, w.Metric, allow)
}

// keepReasons says what a KEEP rests on.
func keepReasons(changes []Change, obj Objective) []string {
	switch obj.Mode() {
	case BySLO:
		var out, missed []string
		for _, ch := range changes {
			switch {
			case ch.Metric == "goodput" || ch.Metric == "slo_attainment":
				out = append(out, fmt.Sprintf("%s holds or rose: %s", ch.Metric, FormatDelta(ch)))
			case ch.SLOCheck && ch.Judgement == Info:
				missed = append(missed, ch.Metric)
			}
		}
		if len(missed) > 0 {
			out = append(out, "not yet met, before or after: "+strings.Join(missed, ", "))
		} else {
			out = append(out, "every SLO holds at p"+fmt.Sprint(obj.Pct()*100))
		}
		return out
	case Trade:
		var out []string
		for _, ch := range changes {
			if ch.Quality || !slices.Contains(speedFigures, ch.Metric) {
				continue
			}
			if ch.Metric == obj.Target {
				out = append(out, fmt.Sprintf("%s improved: %s", ch.Metric, FormatDelta(ch)))
			} else if a, ok := obj.Allow[ch.Metric]; ok && ch.Delta > 0 {
				out = append(out, fmt.Sprintf("%s %s, within its allowance of %+.0f%%", ch.Metric, FormatDelta(ch), a*100))
			}
		}
		return append(out, "quality holds")
	}
	return []string{"speed and quality both hold within their tolerances"}
}

// Write prints the verdict: the objective it was judged against, the
// load note (whether goodput compares the runs), the verdict, its
// reasons, and the hint when the strict rule rolled back a trade.
func (r Result) Write(w io.Writer, note string) {
	fmt.Fprintf(w, "\njudged: %s (%s)\n", r.Mode, r.Objective)
	if note != "" {
		fmt.Fprintf(w, "load: %s\n", note)
	}
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	for _, x := range r.Reasons {
		fmt.Fprintf(w, "  - %s\n", x)
	}
	if r.Hint != "" {
		fmt.Fprintf(w, "hint: %s\n", r.Hint)
	}
}

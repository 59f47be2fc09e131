// Package verdict is the statistics and the rule that turn two sets of
// measurements into KEEP, ROLL BACK or INCONCLUSIVE. It serves both
// comparisons infergate makes: `compare` (two bench records, independent
// samples) and `ab` (mirrored pairs, the same request answered by both
// arms: paired samples). It knows nothing of HTTP or of where the numbers
// came from.
package verdict

import (
	"encoding/json"
	"fmt"
	"math"
)

// Verdicts, and the exit status of the commands that give them.
const (
	Keep         = "KEEP"
	RollBack     = "ROLL BACK"
	Inconclusive = "INCONCLUSIVE"
)

// ExitCode is the process status for a verdict: 0 keep, 1 roll back,
// 2 inconclusive. (3 is for input that cannot be compared.)
func ExitCode(verdict string) int {
	switch verdict {
	case Keep:
		return 0
	case RollBack:
		return 1
	}
	return 2
}

// Options set what counts as a regression.
type Options struct {
	// SpeedTolerance is the relative worsening of a latency median that
	// is accepted (default 0.05: 5%).
	SpeedTolerance float64
	// QualityTolerance is the rise of a failure or quality-signal rate, in
	// absolute terms, that is accepted (default 0.02: 2 points).
	QualityTolerance float64
	// SpeedFloor is the absolute change of a latency median (ms) below
	// which no change counts, however significant: run-to-run noise of a
	// shared machine is of this order (default 1 ms).
	SpeedFloor float64
	// Seed drives the bootstrap.
	Seed uint64
	// Objective is what the change is for; zero is the strict rule.
	Objective Objective
}

// Defaults fills zero fields.
func (o *Options) Defaults() {
	if o.SpeedTolerance == 0 {
		o.SpeedTolerance = 0.05
	}
	if o.QualityTolerance == 0 {
		o.QualityTolerance = 0.02
	}
	if o.SpeedFloor == 0 {
		o.SpeedFloor = 1
	}
}

// Judgement of one figure.
const (
	Holds     = "holds"
	Regressed = "regressed"
	Unsure    = "unsure"
	Info      = "info" // shown, not judged
)

// Change is one figure of a comparison.
type Change struct {
	// Stage is the bench stage (0 for a comparison without stages).
	Stage  int     `json:"stage"`
	Metric string  `json:"metric"`
	Base   float64 `json:"base"`
	New    float64 `json:"new"`
	// Delta is the change, relative (speed: (new − base) / base) or in
	// rate points (quality: new − base).
	Delta float64 `json:"delta"`
	// CILow and CIHigh bound Delta at 95% (bootstrap for medians,
	// Agresti-Caffo or paired Wald for rates).
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
	// P is the two-sided p-value of the test named in Test; NaN when not
	// computed.
	P    float64 `json:"p"`
	Test string  `json:"test,omitempty"`
	// N is the number of values (or pairs) each side had.
	N       int    `json:"n,omitempty"`
	Better  string `json:"better"` // "lower" or "higher"
	Quality bool   `json:"quality,omitempty"`
	// Share marks a figure that is a share of requests (attainment),
	// printed in points like a quality rate but not one.
	Share bool `json:"share,omitempty"`
	// SLOCheck marks one SLO's check at the objective's percentile.
	SLOCheck  bool   `json:"slo_check,omitempty"`
	Judgement string `json:"judgement"`
	// Need is the number of requests (answers for a quality rate, pairs
	// for pairs) each run would likely need to settle an unsure figure.
	Need int `json:"need,omitempty"`
	// Edge marks an unsure figure that no run of practical size would
	// settle at the change seen (past MaxNeed).
	Edge bool `json:"edge,omitempty"`
	// Count is what a rate was counted from, nil for other figures.
	Count *Count `json:"count,omitempty"`
}

// Result is a verdict and what decided it.
type Result struct {
	Verdict string   `json:"verdict"`
	Reasons []string `json:"reasons"`
	// Need is how many requests (answers, pairs) each run would likely
	// need to settle an INCONCLUSIVE verdict: the most any unsure figure
	// needs (0 when none can be settled at a practical size).
	Need int `json:"need,omitempty"`
	// Mode is how it was judged: strict, slo or trade.
	Mode string `json:"mode"`
	// Objective is what it was judged against, in words.
	Objective string `json:"objective"`
	// Hint, under the strict rule, names the flag that would judge a
	// trade the rule rolled back.
	Hint string `json:"hint,omitempty"`
}

// FormatDelta writes a change for a person: points for rates, percent
// for speed.
func FormatDelta(ch Change) string {
	if ch.Quality || ch.Share {
		return fmt.Sprintf("%+.1f points (%.1f%% → %.1f%%)", ch.Delta*100, ch.Base*100, ch.New*100)
	}
	return fmt.Sprintf("%+.1f%% (%.4g → %.4g)", ch.Delta*100, ch.Base, ch.New)
}

// Info is a figure shown beside the judged ones.
func InfoChange(stage int, metric string, a, b float64, better string) Change {
	return Change{Stage: stage, Metric: metric, Base: a, New: b, Delta: rel(a, b), CILow: math.NaN(), CIHigh: math.NaN(), P: math.NaN(), Better: better, Judgement: Info}
}

func rel(a, b float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return (b - a) / a
}

// MinSamples is the least number of values (or pairs) a figure is judged
// on.
const MinSamples = 20

// needFor scales n so a 95% interval of half-width hw shrinks to margin
// (the interval narrows as 1/√n); 0 past MaxNeed, where the figure sits
// at its tolerance.
func needFor(n int, hw, margin float64) int {
	if margin <= 0 {
		return 0
	}
	need := math.Ceil(float64(n) * (hw / margin) * (hw / margin))
	if need > MaxNeed || math.IsNaN(need) {
		return 0
	}
	return max(int(need), n+1)
}

// judgeSpeed sets ch's judgement from its delta and interval: a latency
// (lower is better) or a speed (higher is better), a latency change
// within floor ms holding whatever its relative size.
func judgeSpeed(ch *Change, n int, tol, floor float64) {
	worse, lo, hi := ch.Delta, ch.CILow, ch.CIHigh
	if ch.Better == "higher" {
		worse, lo, hi = -ch.Delta, -ch.CIHigh, -ch.CILow
	}
	// The interval's upper end in ms: below the floor nothing that
	// matters can have changed.
	small := ch.Better == "lower" && hi*ch.Base <= floor
	switch {
	case n < MinSamples:
		ch.Judgement = Unsure
		ch.Need = MinSamples
	case math.IsNaN(lo) || math.IsNaN(hi):
		ch.Judgement = Unsure
		ch.Need = 2 * n
	case lo > 0 && worse > tol && !small:
		ch.Judgement = Regressed
	case hi <= tol || small:
		ch.Judgement = Holds
	default:
		ch.Judgement = Unsure
		setNeed(ch, needFor(n, (hi-lo)/2, math.Abs(tol-worse)))
	}
}

// judgeRate sets ch's judgement for a rate that should not rise; need
// is the size that would settle it when it is unsure.
func judgeRate(ch *Change, tol float64, need func() int) {
	switch {
	case ch.CILow > 0 && ch.Delta > tol:
		ch.Judgement = Regressed
	case ch.CIHigh <= tol:
		ch.Judgement = Holds
	default:
		ch.Judgement = Unsure
		setNeed(ch, need())
	}
}

// MarshalJSON writes NaN and infinite figures (an interval or p-value
// not computed) as null: JSON has no NaN.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	return json.Marshal(struct {
		plain
		Delta  *float64 `json:"delta"`
		CILow  *float64 `json:"ci_low"`
		CIHigh *float64 `json:"ci_high"`
		P      *float64 `json:"p"`
	}{plain(c), num(c.Delta), num(c.CILow), num(c.CIHigh), num(c.P)})
}

// JudgementText is the judgement for a table row, an unsure one with why:
// no practical size, or about how many samples would settle it, in the
// caller's word for them ("needed", "pairs").
func (ch Change) JudgementText(samples string) string {
	switch {
	case ch.Judgement == Unsure && ch.Edge:
		return ch.Judgement + " (no practical size)"
	case ch.Judgement == Unsure && ch.Need > 0:
		return fmt.Sprintf("%s (≈%d %s)", ch.Judgement, ch.Need, samples)
	}
	return ch.Judgement
}

// Cells formats a change for a table row: the two values, the change,
// its 95% interval ("-" when none) and its p-value ("-" when none).
func (ch Change) Cells() (base, next, delta, ci, p string) {
	if ch.Quality || ch.Share {
		base, next = fmt.Sprintf("%.2f%%", ch.Base*100), fmt.Sprintf("%.2f%%", ch.New*100)
		delta = fmt.Sprintf("%+.2fpt", ch.Delta*100)
		ci = fmt.Sprintf("[%+.2f, %+.2f]pt", ch.CILow*100, ch.CIHigh*100)
	} else {
		base, next = fmt.Sprintf("%.4g", ch.Base), fmt.Sprintf("%.4g", ch.New)
		delta = fmt.Sprintf("%+.1f%%", ch.Delta*100)
		ci = fmt.Sprintf("[%+.1f, %+.1f]%%", ch.CILow*100, ch.CIHigh*100)
	}
	if math.IsNaN(ch.CILow) {
		ci = "-"
	}
	p = "-"
	if !math.IsNaN(ch.P) {
		p = fmt.Sprintf("%.3g", ch.P)
	}
	return base, next, delta, ci, p
}

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Verdicts of a comparison, and the exit status of `infergate compare`.
const (
	Keep         = "KEEP"
	RollBack     = "ROLL BACK"
	Inconclusive = "INCONCLUSIVE"
)

// ExitCode is the process status for a verdict: 0 keep, 1 roll back,
// 2 inconclusive.
func ExitCode(verdict string) int {
	switch verdict {
	case Keep:
		return 0
	case RollBack:
		return 1
	}
	return 2
}

// CompareOptions set what counts as a regression.
type CompareOptions struct {
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
}

func (o *CompareOptions) defaults() {
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
	Stage  int     `json:"stage"`
	Metric string  `json:"metric"`
	Base   float64 `json:"base"`
	New    float64 `json:"new"`
	// Delta is the change, relative (speed: (new − base) / base) or in
	// rate points (quality: new − base).
	Delta float64 `json:"delta"`
	// CILow and CIHigh bound Delta at 95% (bootstrap for medians,
	// Agresti-Caffo for rates).
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
	// P is the Mann-Whitney two-sided p-value (speed) or the two-proportion
	// z-test's (quality); NaN when not computed.
	P         float64 `json:"p"`
	Better    string  `json:"better"` // "lower" or "higher"
	Quality   bool    `json:"quality,omitempty"`
	Judgement string  `json:"judgement"`
	// Need is the number of requests per run that would likely settle an
	// unsure figure.
	Need int `json:"need,omitempty"`
}

// Comparison is the outcome of comparing a new run with a base.
type Comparison struct {
	Base, New string // file names
	Changes   []Change
	Verdict   string
	// Reasons say what decided the verdict.
	Reasons []string
	// Need is how many requests per run would likely settle an
	// INCONCLUSIVE verdict.
	Need int
}

// Compare compares new against base, stage by stage.
func Compare(base, next *Record, o CompareOptions) *Comparison {
	o.defaults()
	c := &Comparison{}
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	for i := range min(len(base.Stages), len(next.Stages)) {
		a, b := base.Stages[i], next.Stages[i]
		speed := []string{"ttft", "tpot", "e2e"}
		if base.Conditions.Load.Mode != "closed" {
			speed = append(speed, "ttft_sched")
		}
		for _, m := range speed {
			if ch, ok := compareSamples(i, m, a.Samples[m], b.Samples[m], o.SpeedTolerance, o.SpeedFloor, rng); ok {
				c.Changes = append(c.Changes, ch)
			}
		}
		if ch, ok := compareSamples(i, "speed", a.Samples["speed"], b.Samples["speed"], o.SpeedTolerance, 0, rng); ok {
			ch.Judgement = Info // 1/tpot: judged through tpot
			c.Changes = append(c.Changes, ch)
		}
		c.Changes = append(c.Changes, info(i, "output_token_throughput", a.OutputTokenThroughput, b.OutputTokenThroughput, "higher"))
		if a.Metrics["itl"] != nil && b.Metrics["itl"] != nil && a.Metrics["itl"].P99 != nil && b.Metrics["itl"].P99 != nil {
			c.Changes = append(c.Changes, info(i, "itl_p99", *a.Metrics["itl"].P99, *b.Metrics["itl"].P99, "lower"))
		}
		rates := []struct {
			name   string
			x, y   int
			na, nb int
		}{
			{"failure_rate", a.Failed, b.Failed, a.Requests, b.Requests},
			{"finish_length_rate", a.Quality.FinishLength, b.Quality.FinishLength, a.OK, b.OK},
			{"empty_rate", a.Quality.Empty, b.Quality.Empty, a.OK, b.OK},
			{"refusal_rate", a.Quality.Refusal, b.Quality.Refusal, a.OK, b.OK},
		}
		if a.Quality.JSONChecked || b.Quality.JSONChecked {
			rates = append(rates, struct {
				name   string
				x, y   int
				na, nb int
			}{"invalid_json_rate", a.Quality.InvalidJSON, b.Quality.InvalidJSON, a.OK, b.OK})
		}
		for _, r := range rates {
			c.Changes = append(c.Changes, compareRates(i, r.name, r.x, r.na, r.y, r.nb, o.QualityTolerance))
		}
	}
	c.decide()
	return c
}

func info(stage int, metric string, a, b float64, better string) Change {
	return Change{Stage: stage, Metric: metric, Base: a, New: b, Delta: rel(a, b), CILow: math.NaN(), CIHigh: math.NaN(), P: math.NaN(), Better: better, Judgement: Info}
}

func rel(a, b float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return (b - a) / a
}

// minSamples is the least number of requests per run a figure is judged on.
const minSamples = 20

// compareSamples judges the median of a latency (lower is better) or
// speed (higher is better) metric. A latency change within floor ms
// holds whatever its relative size.
func compareSamples(stage int, metric string, a, b []float64, tol, floor float64, rng *rand.Rand) (Change, bool) {
	if len(a) == 0 || len(b) == 0 {
		return Change{}, false
	}
	better := "lower"
	if metric == "speed" {
		better = "higher"
	}
	ch := Change{Stage: stage, Metric: metric, Base: Median(a), New: Median(b), Better: better}
	ch.Delta = rel(ch.Base, ch.New)
	ch.CILow, ch.CIHigh = bootstrapRatio(a, b, rng)
	ch.P = mannWhitney(a, b)
	worse, lo, hi := ch.Delta, ch.CILow, ch.CIHigh
	if better == "higher" {
		worse, lo, hi = -ch.Delta, -ch.CIHigh, -ch.CILow
	}
	// The interval's upper end in ms: below the floor nothing that
	// matters can have changed.
	small := better == "lower" && hi*ch.Base <= floor
	switch {
	case len(a) < minSamples || len(b) < minSamples:
		ch.Judgement = Unsure
		ch.Need = minSamples
	case lo > 0 && worse > tol && !small:
		ch.Judgement = Regressed
	case hi <= tol || small:
		ch.Judgement = Holds
	default:
		ch.Judgement = Unsure
		ch.Need = needFor(min(len(a), len(b)), (hi-lo)/2, math.Abs(tol-worse))
	}
	return ch, true
}

// needFor scales n so a 95% interval of half-width hw shrinks to margin.
func needFor(n int, hw, margin float64) int {
	if margin < 1e-3 {
		margin = 1e-3
	}
	need := float64(n) * (hw / margin) * (hw / margin)
	return int(math.Min(math.Ceil(need), 1e7))
}

// compareRates judges a rate that should not rise (failures, quality
// signals): x of na in the base, y of nb in the new run.
func compareRates(stage int, metric string, x, na, y, nb int, tol float64) Change {
	ch := Change{Stage: stage, Metric: metric, Better: "lower", Quality: true, P: math.NaN()}
	if na == 0 || nb == 0 {
		ch.Judgement = Unsure
		ch.Need = minSamples
		return ch
	}
	ch.Base, ch.New = float64(x)/float64(na), float64(y)/float64(nb)
	ch.Delta = ch.New - ch.Base
	// Agresti-Caffo: one success and one failure added to each sample
	// keeps the interval honest at rates of zero.
	pa, pb := float64(x+1)/float64(na+2), float64(y+1)/float64(nb+2)
	se := math.Sqrt(pa*(1-pa)/float64(na+2) + pb*(1-pb)/float64(nb+2))
	ch.CILow, ch.CIHigh = pb-pa-1.96*se, pb-pa+1.96*se
	if pooled := float64(x+y) / float64(na+nb); pooled > 0 && pooled < 1 {
		z := ch.Delta / math.Sqrt(pooled*(1-pooled)*(1/float64(na)+1/float64(nb)))
		ch.P = math.Erfc(math.Abs(z) / math.Sqrt2)
	}
	switch {
	case ch.CILow > 0 && ch.Delta > tol:
		ch.Judgement = Regressed
	case ch.CIHigh <= tol:
		ch.Judgement = Holds
	default:
		ch.Judgement = Unsure
		ch.Need = needFor(min(na, nb), (ch.CIHigh-ch.CILow)/2, math.Abs(tol-ch.Delta))
	}
	return ch
}

func (c *Comparison) decide() {
	unsure := 0
	for _, ch := range c.Changes {
		switch ch.Judgement {
		case Regressed:
			what := "speed"
			if ch.Quality {
				what = "quality"
			}
			c.Reasons = append(c.Reasons, fmt.Sprintf("%s regressed: %s %s", what, ch.Metric, fmtDelta(ch)))
		case Unsure:
			unsure++
			c.Need = max(c.Need, ch.Need)
		}
	}
	switch {
	case len(c.Reasons) > 0:
		c.Verdict = RollBack
	case unsure > 0:
		c.Verdict = Inconclusive
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d figure(s) could not be settled; about %d requests per run would likely settle them", unsure, c.Need))
	default:
		c.Verdict = Keep
		c.Reasons = append(c.Reasons, "speed and quality both hold within their tolerances")
	}
}

func fmtDelta(ch Change) string {
	if ch.Quality {
		return fmt.Sprintf("%+.1f points (%.1f%% → %.1f%%)", ch.Delta*100, ch.Base*100, ch.New*100)
	}
	return fmt.Sprintf("%+.1f%% (%.4g → %.4g)", ch.Delta*100, ch.Base, ch.New)
}

// Write prints the comparison as a table.
func (c *Comparison) Write(w io.Writer) {
	fmt.Fprintf(w, "base %s\nnew  %s\n\n", c.Base, c.New)
	fmt.Fprintf(w, "%-5s %-24s %12s %12s %9s %20s %8s  %s\n", "stage", "metric", "base", "new", "change", "95% CI", "p", "judgement")
	for _, ch := range c.Changes {
		var base, nw, delta, ci string
		if ch.Quality {
			base, nw = fmt.Sprintf("%.2f%%", ch.Base*100), fmt.Sprintf("%.2f%%", ch.New*100)
			delta = fmt.Sprintf("%+.2fpt", ch.Delta*100)
			ci = fmt.Sprintf("[%+.2f, %+.2f]pt", ch.CILow*100, ch.CIHigh*100)
		} else {
			base, nw = fmt.Sprintf("%.4g", ch.Base), fmt.Sprintf("%.4g", ch.New)
			delta = fmt.Sprintf("%+.1f%%", ch.Delta*100)
			ci = fmt.Sprintf("[%+.1f, %+.1f]%%", ch.CILow*100, ch.CIHigh*100)
			if math.IsNaN(ch.CILow) {
				ci = "-"
			}
		}
		p := "-"
		if !math.IsNaN(ch.P) {
			p = fmt.Sprintf("%.3g", ch.P)
		}
		j := ch.Judgement
		if ch.Judgement == Unsure && ch.Need > 0 {
			j += fmt.Sprintf(" (≈%d needed)", ch.Need)
		}
		fmt.Fprintf(w, "%-5d %-24s %12s %12s %9s %20s %8s  %s\n", ch.Stage, ch.Metric+unitOf(ch.Metric), base, nw, delta, ci, p, j)
	}
	fmt.Fprintf(w, "\nverdict: %s\n", c.Verdict)
	for _, r := range c.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
}

func unitOf(metric string) string {
	switch metric {
	case "ttft", "tpot", "e2e", "ttft_sched", "itl_p99":
		return " (ms)"
	case "speed", "output_token_throughput":
		return " (tok/s)"
	}
	return ""
}

// JournalEntry is one line of the tuning journal.
type JournalEntry struct {
	Time    time.Time `json:"time"`
	Change  string    `json:"change"`
	Base    string    `json:"base"`
	New     string    `json:"new"`
	Verdict string    `json:"verdict"`
	Reasons []string  `json:"reasons"`
	Figures []Change  `json:"figures"`
}

// AppendJournal appends one line for c to the file at path.
func (c *Comparison) AppendJournal(path, change string) error {
	figs := make([]Change, 0, len(c.Changes))
	for _, ch := range c.Changes {
		// JSON has no NaN: unset intervals and p-values become zero.
		for _, f := range []*float64{&ch.CILow, &ch.CIHigh, &ch.P, &ch.Delta} {
			if math.IsNaN(*f) || math.IsInf(*f, 0) {
				*f = 0
			}
		}
		figs = append(figs, ch)
	}
	line, err := json.Marshal(JournalEntry{Time: time.Now().UTC(), Change: change, Base: c.Base, New: c.New, Verdict: c.Verdict, Reasons: c.Reasons, Figures: figs})
	if err != nil {
		return fmt.Errorf("bench: journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("bench: journal: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("bench: journal: %w", err)
	}
	return f.Close()
}

// bootstrapRatio returns a 95% percentile-bootstrap interval of
// median(b)/median(a) − 1, on at most 4000 values of each side.
func bootstrapRatio(a, b []float64, rng *rand.Rand) (lo, hi float64) {
	a, b = thin(a, 4000), thin(b, 4000)
	const rounds = 1000
	ra, rb := make([]float64, len(a)), make([]float64, len(b))
	out := make([]float64, 0, rounds)
	for range rounds {
		for i := range ra {
			ra[i] = a[rng.IntN(len(a))]
		}
		for i := range rb {
			rb[i] = b[rng.IntN(len(b))]
		}
		ma, mb := quickMedian(ra), quickMedian(rb)
		if ma > 0 {
			out = append(out, mb/ma-1)
		}
	}
	if len(out) == 0 {
		return math.NaN(), math.NaN()
	}
	slices.Sort(out)
	return out[int(0.025*float64(len(out)))], out[int(0.975*float64(len(out)-1))]
}

// quickMedian is the median of xs, reordering xs.
func quickMedian(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return selectK(xs, n/2)
	}
	return (selectK(xs, n/2-1) + selectK(xs, n/2)) / 2
}

// selectK returns the k-th smallest value of xs (Hoare's quickselect).
func selectK(xs []float64, k int) float64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		p := xs[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for xs[i] < p {
				i++
			}
			for xs[j] > p {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}

// mannWhitney returns the two-sided p-value of the Mann-Whitney U test
// (normal approximation with tie correction).
func mannWhitney(a, b []float64) float64 {
	type v struct {
		x     float64
		fromA bool
	}
	all := make([]v, 0, len(a)+len(b))
	for _, x := range a {
		all = append(all, v{x, true})
	}
	for _, x := range b {
		all = append(all, v{x, false})
	}
	slices.SortFunc(all, func(p, q v) int {
		switch {
		case p.x < q.x:
			return -1
		case p.x > q.x:
			return 1
		}
		return 0
	})
	n1, n2 := float64(len(a)), float64(len(b))
	n := n1 + n2
	var rankA, ties float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].x == all[i].x {
			j++
		}
		rank := float64(i+j+1) / 2 // mean of ranks i+1..j
		t := float64(j - i)
		ties += t*t*t - t
		for k := i; k < j; k++ {
			if all[k].fromA {
				rankA += rank
			}
		}
		i = j
	}
	u := rankA - n1*(n1+1)/2
	mu := n1 * n2 / 2
	sigma := math.Sqrt(n1 * n2 / 12 * ((n + 1) - ties/(n*(n-1))))
	if sigma == 0 {
		return 1
	}
	z := (math.Abs(u-mu) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return math.Erfc(z / math.Sqrt2)
}

// Mismatch formats condition differences for an error.
func Mismatch(diffs []string) string {
	return "runs were measured under different conditions:\n  " + strings.Join(diffs, "\n  ") + "\n(--force compares them anyway)"
}

package verdict

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/quantile"
)

// The objective a change is judged against. Without one the rule is
// strict: any figure that got worse rolls the change back, which rejects
// every trade (a bigger batch lowers TTFT and raises TPOT). With SLOs the
// speed verdict is goodput and attainment at those SLOs; with a target
// and allowances it is that figure's gain within what may worsen.

// Modes of judging.
const (
	Strict = "strict" // every figure must hold
	BySLO  = "slo"    // goodput and attainment at the SLOs decide speed
	Trade  = "trade"  // one figure must improve, others may worsen as allowed
)

// SLO is one latency objective: a request meets it when its Metric is at
// most MaxMs.
type SLO struct {
	Metric string  `json:"metric"` // ttft, ttft_sched, tpot, e2e
	MaxMs  float64 `json:"max_ms"`
}

// Objective is what a change is for.
type Objective struct {
	// SLOs, when set, judge speed by goodput and attainment.
	SLOs []SLO `json:"slos,omitempty"`
	// Percentile is the share of requests that must meet each SLO for
	// the objective to be met (0.9 when zero): "TTFT p90 ≤ 2 s".
	Percentile float64 `json:"percentile,omitempty"`
	// Target is the figure the change is for, in a trade without SLOs.
	Target string `json:"target,omitempty"`
	// Allow is how much each other figure may worsen (relative, 0.5 for
	// +50%) in a trade.
	Allow map[string]float64 `json:"allow,omitempty"`
}

// Mode says how the objective judges.
func (o Objective) Mode() string {
	switch {
	case len(o.SLOs) > 0:
		return BySLO
	case o.Target != "":
		return Trade
	}
	return Strict
}

// Pct is the objective's percentile, 0.9 by default.
func (o Objective) Pct() float64 { return cmp.Or(o.Percentile, 0.9) }

// String writes the objective as its flags would.
func (o Objective) String() string {
	switch o.Mode() {
	case BySLO:
		parts := make([]string, len(o.SLOs))
		for i, s := range o.SLOs {
			parts[i] = fmt.Sprintf("%s p%g ≤ %s", s.Metric, o.Pct()*100, fmtMs(s.MaxMs))
		}
		return strings.Join(parts, ", ")
	case Trade:
		var allow []string
		for _, k := range slices.Sorted(maps.Keys(o.Allow)) {
			allow = append(allow, fmt.Sprintf("%s may worsen %+.0f%%", k, o.Allow[k]*100))
		}
		return strings.Join(append([]string{"lower " + o.Target}, allow...), ", ")
	}
	return "every figure holds"
}

// SLOMetrics are the latencies an SLO may be set on.
var SLOMetrics = []string{"ttft", "ttft_sched", "tpot", "e2e"}

// ParseSLOs reads "ttft=2s,tpot=50ms".
func ParseSLOs(s string) ([]SLO, error) {
	var out []SLO
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("--slo %q: want metric=duration, e.g. ttft=2s", part)
		}
		if !slices.Contains(SLOMetrics, k) {
			return nil, fmt.Errorf("--slo %q: metric must be one of %s", part, strings.Join(SLOMetrics, ", "))
		}
		if slices.ContainsFunc(out, func(o SLO) bool { return o.Metric == k }) {
			return nil, fmt.Errorf("--slo: %s given twice", k)
		}
		out = append(out, SLO{Metric: k, MaxMs: float64(d) / 1e6})
	}
	return out, nil
}

// ParsePercentile reads "p90", "90" or "0.9".
func ParsePercentile(s string) (float64, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "p")
	f, err := strconv.ParseFloat(t, 64)
	if err == nil && f > 1 {
		f /= 100
	}
	if err != nil || f <= 0 || f >= 1 {
		return 0, fmt.Errorf("percentile %q: want e.g. p90, 90 or 0.9", s)
	}
	return f, nil
}

// ParseAllow reads "tpot=+50%,e2e=+10%": how much each figure may worsen.
func ParseAllow(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "+"), "%")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f <= 0 || !slices.Contains(speedFigures, k) {
			return nil, fmt.Errorf("--allow %q: want figure=+N%%, figure one of %s", part, strings.Join(speedFigures, ", "))
		}
		out[k] = f / 100
	}
	return out, nil
}

// speedFigures are the judged speed figures a trade may name.
var speedFigures = []string{"ttft", "ttft_sched", "tpot", "e2e"}

// CheckTarget refuses a trade target that is not a judged figure.
func CheckTarget(t string) error {
	if t != "" && !slices.Contains(speedFigures, t) {
		return fmt.Errorf("--objective %q: want one of %s", t, strings.Join(speedFigures, ", "))
	}
	return nil
}

func fmtMs(ms float64) string {
	return time.Duration(ms * 1e6).Round(time.Microsecond).String()
}

// Met reports whether a request's latencies (ms, by metric; 0 where not
// measured) meet every SLO. A TPOT not measured (an answer of one token)
// cannot miss; any other latency not measured does.
func Met(slos []SLO, value func(metric string) float64) bool {
	for _, s := range slos {
		v := value(s.Metric)
		if v <= 0 && s.Metric == "tpot" {
			continue
		}
		if v <= 0 || v > s.MaxMs {
			return false
		}
	}
	return true
}

// Attainment judges the share of requests meeting every SLO in two
// independent runs (x of na, y of nb): it should not fall by more than
// tol points (Agresti-Caffo interval, two-proportion test).
func Attainment(stage, x, na, y, nb int, tol float64) Change {
	ch := Rates(stage, "slo_attainment", na-x, na, nb-y, nb, tol)
	return flipShare(ch)
}

// PairedAttainment is Attainment for pairs: a[i], b[i] whether request
// i met every SLO in each arm (McNemar).
func PairedAttainment(a, b []bool, tol float64) Change {
	missA, missB := make([]bool, len(a)), make([]bool, len(b))
	for i := range a {
		missA[i] = !a[i]
	}
	for i := range b {
		missB[i] = !b[i]
	}
	return flipShare(PairedRates("slo_attainment", missA, missB, tol))
}

// flipShare turns a judged miss rate into the attainment it mirrors.
func flipShare(ch Change) Change {
	ch.Base, ch.New = 1-ch.Base, 1-ch.New
	ch.Delta, ch.CILow, ch.CIHigh = -ch.Delta, -ch.CIHigh, -ch.CILow
	ch.Better, ch.Quality, ch.Share = "higher", false, true
	return ch
}

// Goodput judges the requests per second meeting every SLO in two
// independent runs: ma met in a window of ta seconds against mb in tb.
// The counts are taken as Poisson; the interval of the rate ratio is the
// log-normal one, with half a request added to a count of zero. The
// figure should not fall by more than tol (relative).
func Goodput(stage, ma int, ta float64, mb int, tb float64, n int, tol float64) Change {
	ch := Change{Stage: stage, Metric: "goodput", Better: "higher", Test: "poisson rate ratio", N: n, P: math.NaN(), CILow: math.NaN(), CIHigh: math.NaN()}
	if ta <= 0 || tb <= 0 {
		ch.Judgement, ch.Need = Unsure, MinSamples
		return ch
	}
	ch.Base, ch.New = float64(ma)/ta, float64(mb)/tb
	ca, cb := max(float64(ma), 0.5), max(float64(mb), 0.5)
	lr := math.Log((cb / tb) / (ca / ta))
	se := math.Sqrt(1/ca + 1/cb)
	ch.Delta = math.Exp(lr) - 1
	if ma > 0 {
		ch.Delta = rel(ch.Base, ch.New)
	}
	ch.CILow, ch.CIHigh = math.Exp(lr-1.96*se)-1, math.Exp(lr+1.96*se)-1
	ch.P = math.Erfc(math.Abs(lr/se) / math.Sqrt2)
	judgeSpeed(&ch, n, tol, 0)
	return ch
}

// PairedGoodput is Goodput for pairs answered by both arms over the same
// window: the ratio of the met counts, with pairs resampled whole. rate
// is the pairs per second of the window.
func PairedGoodput(a, b []bool, rate, tol float64, seed uint64) Change {
	n := min(len(a), len(b))
	count := func(xs []bool, idx []int) (k int) {
		for _, i := range idx {
			if xs[i] {
				k++
			}
		}
		return k
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	ma, mb := count(a, all), count(b, all)
	ch := Change{Metric: "goodput", Better: "higher", Test: "paired bootstrap", N: n, P: math.NaN(),
		Base: float64(ma) / float64(max(n, 1)) * rate, New: float64(mb) / float64(max(n, 1)) * rate}
	ch.Delta = rel(ch.Base, ch.New)
	if n == 0 {
		ch.Judgement, ch.Need = Unsure, MinSamples
		ch.CILow, ch.CIHigh = math.NaN(), math.NaN()
		return ch
	}
	rng := rand.New(rand.NewPCG(seed, 13))
	out := make([]float64, 0, 1000)
	idx := make([]int, n)
	for range 1000 {
		for i := range idx {
			idx[i] = rng.IntN(n)
		}
		x, y := count(a, idx), count(b, idx)
		out = append(out, (float64(y)+0.5)/(float64(x)+0.5)-1)
	}
	ch.CILow, ch.CIHigh = percentiles(out)
	if ma == 0 {
		ch.Delta = (float64(mb)+0.5)/0.5 - 1
	}
	judgeSpeed(&ch, n, tol, 0)
	return ch
}

// Crossing judges one SLO at the objective's percentile: base and next
// are the metric's values (ms) of every successful request of each run.
// It regresses when the base met it and the new run does not, beyond
// doubt: the share of new requests within the SLO is below the
// percentile by more than its 95% interval. When both miss it, it is
// shown, and goodput and attainment judge the change.
func Crossing(stage int, s SLO, pct float64, base, next []float64) Change {
	ch := Change{Stage: stage, Metric: fmt.Sprintf("%s_p%g≤%s", s.Metric, pct*100, fmtMs(s.MaxMs)), Better: "lower",
		CILow: math.NaN(), CIHigh: math.NaN(), P: math.NaN(), Test: "wilson", N: min(len(base), len(next)), Judgement: Holds, SLOCheck: true}
	ch.Base, ch.New = pctOf(base, pct), pctOf(next, pct)
	ch.Delta = rel(ch.Base, ch.New)
	within := 0
	for _, v := range next {
		if v <= s.MaxMs {
			within++
		}
	}
	_, hi := Wilson(within, len(next))
	switch {
	case len(next) < MinSamples:
		ch.Judgement, ch.Need = Unsure, MinSamples
	case ch.New <= s.MaxMs:
		// Met. A share near the edge is still met: the percentile is the
		// objective's own definition.
	case ch.Base > s.MaxMs:
		ch.Judgement = Info // missed before as well
	case hi < pct:
		ch.Judgement = Regressed
	default:
		// Too near the percentile to say: the size at which the share
		// seen within the SLO would be below it beyond doubt.
		ch.Judgement = Unsure
		share := float64(within) / float64(len(next))
		setNeed(&ch, fewest(func(n int) bool {
			_, hi := wilsonF(share*float64(n), float64(n))
			return hi < pct
		}))
	}
	return ch
}

// pctOf is the nearest-rank percentile of xs (which it sorts a copy of).
func pctOf(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	return selectK(s, quantile.Index(len(s), p))
}

// Wilson is the 95% Wilson score interval of k successes in n.
func Wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	const z = 1.96
	p, nf := float64(k)/float64(n), float64(n)
	d := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / d
	h := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / d
	return max(0, c-h), min(1, c+h)
}

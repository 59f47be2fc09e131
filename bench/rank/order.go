package rank

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/infergate/infergate/verdict"
)

// Place is an endpoint's place in the ranking.
type Place struct {
	Rank int    `json:"rank"`
	Name string `json:"name"`
	// Tied says it shares its rank with another endpoint.
	Tied bool `json:"tied,omitempty"`
	// Why says what set it apart from the endpoint ranked just above it,
	// or what it is tied with.
	Why string `json:"why,omitempty"`
}

// Tolerances below which two endpoints do not differ on a key.
const (
	speedTolerance = 0.05 // relative: TTFT, speed, cost
	speedFloorMs   = 1    // a TTFT difference below this is none
	errorTolerance = 0.02 // points of error rate
)

// Order ranks the endpoints by workload.order's keys, the first
// deciding first. On each key two endpoints differ only when the verdict
// package tells them apart beyond its tolerance; an endpoint that
// answered nothing comes last. Endpoints tied on every key share a rank,
// and the place says, key by key, why they could not be told apart.
func Order(rs []*Result, w Workload) []Place {
	j := judge{keys: orderKeys(w.Order), pct: 0.9}
	if p, err := verdict.ParsePercentile(w.SLOPercentile); err == nil {
		j.pct = p
	}
	sorted := append([]*Result(nil), rs...)
	// An insertion sort: the comparison is not a total order (a tie need
	// not be transitive), so each endpoint goes below the last one that
	// beats it, and the order of the file breaks the rest.
	for i := 1; i < len(sorted); i++ {
		for k := i; k > 0; k-- {
			if c, _, _ := j.compare(sorted[k-1], sorted[k]); c <= 0 {
				break
			}
			sorted[k-1], sorted[k] = sorted[k], sorted[k-1]
		}
	}
	out := make([]Place, len(sorted))
	for i, r := range sorted {
		out[i] = Place{Rank: i + 1, Name: r.Name}
		if i == 0 {
			continue
		}
		c, why, ties := j.compare(sorted[i-1], r)
		if c == 0 {
			out[i].Rank = out[i-1].Rank
			out[i].Tied, out[i-1].Tied = true, true
			out[i].Why = fmt.Sprintf("tied with %s: %s", sorted[i-1].Name, strings.Join(ties, "; "))
			continue
		}
		out[i].Why = fmt.Sprintf("below %s: %s", sorted[i-1].Name, why)
	}
	return out
}

func orderKeys(s string) []string {
	var keys []string
	for k := range strings.SplitSeq(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// judge compares endpoints on the order's keys; pct is the SLO's
// percentile.
type judge struct {
	keys []string
	pct  float64
}

// compare is −1 when a ranks above b, +1 when below, 0 when no key
// tells them apart; why names the key that did, and ties says for each
// key before it (all of them, on a tie) why it did not.
func (j judge) compare(a, b *Result) (c int, why string, ties []string) {
	if (a.Figures.OK == 0) != (b.Figures.OK == 0) {
		if a.Figures.OK == 0 {
			return 1, "no answer", nil
		}
		return -1, "no answer", nil
	}
	for _, k := range j.keys {
		c, why := j.on(a, b, k)
		if c != 0 {
			return c, why, ties
		}
		ties = append(ties, why)
	}
	return 0, "", ties
}

// on compares a and b on one key; why says what set them apart, or,
// when c is 0, why the key could not: the figure, the interval and
// p-value that stayed within the tolerance, or too few values.
func (j judge) on(a, b *Result, key string) (c int, why string) {
	fa, fb := &a.Figures, &b.Figures
	switch key {
	case "slo":
		return j.onSLO(a, b)
	case "cost":
		return judged(costs(a), costs(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Means(0, "cost_per_request", "lower", x, y, speedTolerance)
		}, "cost per request", "%.6g")
	case "ttft":
		return judged(ttfts(a), ttfts(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Samples(0, "ttft", "lower", x, y, speedTolerance, speedFloorMs, rand.New(rand.NewPCG(1, 2)))
		}, "TTFT p50", "%.1f ms")
	case "ttft_p90":
		return onQuantile(fa.TTFTP90, fb.TTFTP90, fa.OK, fb.OK, 0.9, "TTFT p90")
	case "speed":
		return judged(speeds(a), speeds(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Samples(0, "speed", "higher", x, y, speedTolerance, 0, rand.New(rand.NewPCG(1, 2)))
		}, "speed p50", "%.1f tokens/s")
	case "errors":
		c, ch := tellErrors(fa, fb, errorTolerance)
		counts := fmt.Sprintf("error rate %d of %d against %d of %d", fb.Failed, fb.Requests, fa.Failed, fa.Requests)
		if fa.Requests == 0 || fb.Requests == 0 {
			return 0, counts + ": no requests measured"
		}
		_, _, d, ci, p := ch.Cells()
		if c != 0 {
			return c, fmt.Sprintf("%s: %s %s%s", counts, d, ci, pText(p))
		}
		return 0, fmt.Sprintf("%s: %s %s%s, %s the %g-point tolerance", counts, d, ci, pText(p), withinOrStraddles(ch.Judgement == verdict.Holds &&
			verdict.Rates(0, "error_rate", fb.Failed, fb.Requests, fa.Failed, fa.Requests, errorTolerance).Judgement == verdict.Holds), errorTolerance*100)
	}
	return 0, key + ": not a key"
}

// onSLO compares a and b on the SLO: meeting it beats failing it;
// an endpoint unsure of it is tied with both.
func (j judge) onSLO(a, b *Result) (int, string) {
	fa, fb := &a.Figures, &b.Figures
	ra, rb := sloRank(fa.SLO), sloRank(fb.SLO)
	switch {
	case fa.SLO == "" && fb.SLO == "":
		return 0, "slo: no SLO set"
	case ra >= 0 && rb >= 0 && ra != rb:
		c := 1
		if ra < rb {
			c = -1
		}
		return c, fmt.Sprintf("SLO %s against %s", fb.SLO, fa.SLO)
	case ra >= 0 && ra == rb:
		return 0, "slo: both " + strings.TrimSuffix(fa.SLO, "s") + " it"
	}
	var unsure []string
	for _, r := range []*Result{a, b} {
		f := &r.Figures
		if f.SLO != Unsure || f.Attainment == nil {
			continue
		}
		if f.Requests < needMeet(j.pct) {
			unsure = append(unsure, fmt.Sprintf("%s unsure, too few requests (%d; showing %g%% met needs %d)", r.Name, f.Requests, j.pct*100, needMeet(j.pct)))
			continue
		}
		unsure = append(unsure, fmt.Sprintf("%s unsure (attainment %s straddles %g%%)", r.Name, ciPct(*f.Attainment), j.pct*100))
	}
	if len(unsure) == 0 {
		return 0, "slo: not judged"
	}
	return 0, "slo: " + strings.Join(unsure, ", ")
}

// onQuantile compares two quantile intervals of n values each: apart
// when they do not overlap and the values differ beyond the tolerance.
// Below needQuantile(p) values the interval's upper end is the largest
// value, which the quantile lies above too often to count.
func onQuantile(pa, pb Interval, na, nb int, p float64, what string) (int, string) {
	if need := needQuantile(p); na < need || nb < need {
		return 0, fmt.Sprintf("%s: too few answers (%d and %d; its interval needs %d each)", what, nb, na, need)
	}
	ab := fmt.Sprintf("%s %.1f ms [%.1f, %.1f] against %.1f ms [%.1f, %.1f]", what, pb.Value, pb.Lo, pb.Hi, pa.Value, pa.Lo, pa.Hi)
	switch {
	case pa.Hi < pb.Lo && pb.Value > pa.Value*(1+speedTolerance)+speedFloorMs:
		return -1, ab
	case pb.Hi < pa.Lo && pa.Value > pb.Value*(1+speedTolerance)+speedFloorMs:
		return 1, ab
	case pa.Hi < pb.Lo || pb.Hi < pa.Lo:
		return 0, fmt.Sprintf("%s: apart by less than %g%% + %g ms", ab, speedTolerance*100, float64(speedFloorMs))
	}
	return 0, ab + ": the intervals overlap"
}

// needQuantile is the fewest values whose largest lies above the p-th
// quantile with 97.5% probability (1 − p^n ≥ 0.975): below it, the
// quantile's interval has no upper end.
func needQuantile(p float64) int {
	return int(math.Ceil(math.Log(0.025) / math.Log(p)))
}

// needMeet is the fewest requests, all of them meeting the SLO, whose
// Wilson interval lies at or above pct: below it no endpoint can be shown
// to meet the SLO.
func needMeet(pct float64) int {
	for n := 1; n <= 1<<20; n++ {
		if lo, _ := verdict.Wilson(n, n); lo >= pct {
			return n
		}
	}
	return 1 << 20
}

// tell is −1 when judge(a, b) finds b worse (regressed), +1 when
// judge(b, a) finds a worse, 0 when the test tells them apart no further
// than its tolerance; ch is judge(a, b).
func tell(a, b []float64, judge func(x, y []float64) (verdict.Change, bool)) (c int, ch verdict.Change) {
	ch, ok := judge(a, b)
	switch {
	case !ok:
		return 0, ch
	case ch.Judgement == verdict.Regressed:
		return -1, ch
	}
	if r, ok := judge(b, a); ok && r.Judgement == verdict.Regressed {
		return 1, ch
	}
	return 0, ch
}

// tellErrors is tell for the error rates of a and b (two proportions,
// tol points).
func tellErrors(a, b *Figures, tol float64) (int, verdict.Change) {
	ch := verdict.Rates(0, "error_rate", a.Failed, a.Requests, b.Failed, b.Requests, tol)
	switch {
	case ch.Judgement == verdict.Regressed:
		return -1, ch
	case verdict.Rates(0, "error_rate", b.Failed, b.Requests, a.Failed, a.Requests, tol).Judgement == verdict.Regressed:
		return 1, ch
	}
	return 0, ch
}

// judged is tell with the change in words: what set a and b apart, or
// why nothing did (too few values, or the interval and p-value within
// the tolerance). format prints a value.
func judged(a, b []float64, judge func(x, y []float64) (verdict.Change, bool), what, format string) (int, string) {
	if len(a) == 0 || len(b) == 0 {
		return 0, fmt.Sprintf("%s: no values (%d and %d)", what, len(b), len(a))
	}
	if n := min(len(a), len(b)); n < verdict.MinSamples {
		return 0, fmt.Sprintf("%s: too few answers (%d and %d; its test needs %d each)", what, len(b), len(a), verdict.MinSamples)
	}
	c, ch := tell(a, b, judge)
	_, _, d, ci, p := ch.Cells()
	if c != 0 {
		return c, fmt.Sprintf("%s %s %s", what, d, ci)
	}
	r, ok := judge(b, a)
	within := ch.Judgement == verdict.Holds && ok && r.Judgement == verdict.Holds
	return 0, fmt.Sprintf("%s "+format+" against "+format+": %s %s%s, %s the %g%% tolerance", what, ch.New, ch.Base, d, ci, pText(p), withinOrStraddles(within), speedTolerance*100)
}

// pText is a p-value after its interval, or nothing when none was
// computed (no failure on either side).
func pText(p string) string {
	if p == "-" {
		return ""
	}
	return ", p=" + p
}

// withinOrStraddles says where a tie's interval lies: within the
// tolerance both ways, or across it (not told apart beyond doubt).
func withinOrStraddles(within bool) string {
	if within {
		return "within"
	}
	return "its interval straddles"
}

func sloRank(s string) int {
	switch s {
	case "", Unsure:
		return -1
	case Meets:
		return 0
	}
	return 1
}

func column(r *Result, v func(Request) float64) []float64 {
	var out []float64
	for _, q := range r.Requests {
		if q.OK && !q.Probe {
			out = append(out, v(q))
		}
	}
	return out
}

func costs(r *Result) []float64 { return column(r, func(q Request) float64 { return q.Cost }) }
func ttfts(r *Result) []float64 { return column(r, func(q Request) float64 { return q.TTFT }) }
func speeds(r *Result) []float64 {
	var out []float64
	for _, x := range column(r, func(q Request) float64 { return q.Speed }) {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

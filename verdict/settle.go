package verdict

import (
	"fmt"
	"math"
	"strings"
)

// What settles a figure, and how many requests (answers, pairs) a run
// needs for it: each estimate holds the observed rates or shares fixed
// and asks the very interval that judges the figure at which size it
// would fall on one side of the tolerance. A rate of 0 in both runs
// settles at a size that depends on the tolerance alone (SettlingSize),
// which is what a run can be sized by before it starts.

// MaxNeed is the most requests a figure is said to need. Past it no run
// of practical size settles the figure at the change seen (its estimate
// sits at its tolerance, or its interval is very wide), and the figure
// says so (Change.Edge) instead of naming a size.
const MaxNeed = 1_000_000

// Count is what a rate was counted from: Base of BaseOf in the base run
// (or arm), New of NewOf in the new one. For pairs both Ofs are the
// pairs counted.
type Count struct {
	Base   int `json:"base"`
	BaseOf int `json:"base_of"`
	New    int `json:"new"`
	NewOf  int `json:"new_of"`
}

// String writes the counts as a person reads them: "0 of 131 in both",
// "0 of 288 and 0 of 131", "3 of 131 → 5 of 140".
func (c Count) String() string {
	switch {
	case c.Base == c.New && c.BaseOf == c.NewOf:
		return fmt.Sprintf("%d of %d in both", c.Base, c.BaseOf)
	case c.Base == 0 && c.New == 0:
		return fmt.Sprintf("0 of %d and 0 of %d", c.BaseOf, c.NewOf)
	}
	return fmt.Sprintf("%d of %d → %d of %d", c.Base, c.BaseOf, c.New, c.NewOf)
}

// SettlingSize is the fewest answers each run needs for a rate seen in
// none of them in both runs (0 of N in both) to be shown to have risen
// by at most tol: the smallest N at which the upper end of the
// Agresti-Caffo interval Rates uses is within tol when the new run has 0
// of N, however many the base run had. At a 2-point tolerance it is
// 146. Rates judges 0 of N in both, with N at least this, as holding.
func SettlingSize(tol float64) int {
	if tol <= 0 {
		return 0
	}
	return fewest(func(n int) bool {
		// The base run's count taken as unbounded: its rate exactly 0.
		_, hi := acLimit(float64(n))
		return hi <= tol
	})
}

// PairedSettlingSize is SettlingSize for pairs: the fewest pairs at
// which a signal seen in neither arm of any pair is shown to have risen
// by at most tol (PairedRates' interval with no discordant pair).
func PairedSettlingSize(tol float64) int {
	if tol <= 0 {
		return 0
	}
	return fewest(func(n int) bool {
		_, hi := pairedInterval(0, 0, float64(n))
		return hi <= tol
	})
}

// acInterval is the Agresti-Caffo 95% interval of y/nb − x/na: one
// success and one failure added to each sample keeps it honest at rates
// of zero. Counts may be fractional (a size estimate scales them).
func acInterval(x, na, y, nb float64) (lo, hi float64) {
	pa, pb := (x+1)/(na+2), (y+1)/(nb+2)
	se := math.Sqrt(pa*(1-pa)/(na+2) + pb*(1-pb)/(nb+2))
	return pb - pa - 1.96*se, pb - pa + 1.96*se
}

// acLimit is acInterval for 0 of nb against a base of 0 in a count so
// large that its own rate is 0 and adds no variance.
func acLimit(nb float64) (lo, hi float64) {
	pb := 1 / (nb + 2)
	se := math.Sqrt(pb * (1 - pb) / (nb + 2))
	return pb - 1.96*se, pb + 1.96*se
}

// pairedInterval is the 95% interval of the paired difference of two
// rates over n pairs, onlyA pairs showing the signal in the base arm
// alone and onlyB in the new arm alone: Wald's with Agresti and Min's
// half count in each discordant cell.
func pairedInterval(onlyA, onlyB, n float64) (lo, hi float64) {
	nn, p01, p10 := n+2, onlyB+0.5, onlyA+0.5
	d := (p01 - p10) / nn
	se := math.Sqrt((p01+p10)/nn-d*d) / math.Sqrt(nn)
	return d - 1.96*se, d + 1.96*se
}

// wilsonF is Wilson for a fractional count.
func wilsonF(k, n float64) (lo, hi float64) {
	const z = 1.96
	p := k / n
	d := 1 + z*z/n
	c := (p + z*z/(2*n)) / d
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / d
	return max(0, c-h), min(1, c+h)
}

// fewest is the smallest n in [1, MaxNeed] for which ok holds, for an ok
// that holds from some n on; 0 when it does not hold at MaxNeed.
func fewest(ok func(n int) bool) int {
	if !ok(MaxNeed) {
		return 0
	}
	lo, hi := 0, 1 // ok(lo) is taken as false, ok(hi) is tested
	for !ok(hi) {
		lo, hi = hi, min(2*hi, MaxNeed)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// rateNeed is how many answers each run would need for a rate counted x
// of na and y of nb to settle against tol, the two rates held as seen:
// within tol (the interval's upper end at most tol) when the rise seen
// is below tol, beyond it (the lower end above 0) when it is above. It
// is 0 when no practical size settles it.
func rateNeed(x, na, y, nb int, tol float64) int {
	if x == 0 && y == 0 {
		return SettlingSize(tol)
	}
	pa, pb := float64(x)/float64(na), float64(y)/float64(nb)
	at := func(n int) (lo, hi float64) {
		f := float64(n)
		return acInterval(pa*f, f, pb*f, f)
	}
	switch d := pb - pa; {
	case d < tol:
		return fewest(func(n int) bool { _, hi := at(n); return hi <= tol })
	case d > tol:
		return fewest(func(n int) bool { lo, _ := at(n); return lo > 0 })
	}
	return 0
}

// pairedNeed is rateNeed for pairs: n pairs with onlyA and onlyB
// discordant ones, their shares held as seen.
func pairedNeed(onlyA, onlyB, n int, tol float64) int {
	if onlyA == 0 && onlyB == 0 {
		return PairedSettlingSize(tol)
	}
	qa, qb := float64(onlyA)/float64(n), float64(onlyB)/float64(n)
	at := func(m int) (lo, hi float64) {
		f := float64(m)
		return pairedInterval(qa*f, qb*f, f)
	}
	switch d := qb - qa; {
	case d < tol:
		return fewest(func(m int) bool { _, hi := at(m); return hi <= tol })
	case d > tol:
		return fewest(func(m int) bool { lo, _ := at(m); return lo > 0 })
	}
	return 0
}

// unit names what a figure's N counts.
func unit(ch Change) string {
	switch {
	case ch.Test == "mcnemar" || ch.Test == "wilcoxon signed-rank" || ch.Test == "paired bootstrap":
		return "pairs"
	case ch.Quality && !isFailureRate(ch.Metric):
		return "answers"
	}
	return "requests"
}

// setNeed sets an unsure figure's Need, or marks it at its edge when no
// practical size settles it.
func setNeed(ch *Change, need int) {
	ch.Need, ch.Edge = need, need == 0
}

// Unsettled says why an unsure figure is not settled, with its counts,
// and what would settle it: "empty_rate: 0 of 131 in both: too few
// answers to show it rose by at most 2 points; 146 answers a run would
// settle it". tol is the figure's tolerance (points for a rate or share,
// relative for speed).
func Unsettled(ch Change, tol float64) string {
	name := ch.Metric
	if ch.Stage > 0 {
		name = fmt.Sprintf("stage %d %s", ch.Stage, ch.Metric)
	}
	u := unit(ch)
	var what string
	switch {
	case ch.Count != nil && ch.Quality && ch.Count.Base == 0 && ch.Count.New == 0:
		what = fmt.Sprintf("%s: %s: too few %s to show it rose by at most %.3g points", name, ch.Count, u, tol*100)
	case ch.Count != nil && ch.Quality:
		_, _, _, ci, _ := ch.Cells()
		what = fmt.Sprintf("%s: %s, a change of %s: the interval spans the %.3g-point tolerance", name, ch.Count, ci, tol*100)
	case ch.Share:
		base, next, _, ci, _ := ch.Cells()
		what = fmt.Sprintf("%s: %s → %s over %d %s, a change of %s: the interval spans the %.3g-point tolerance", name, base, next, ch.N, u, ci, tol*100)
	case ch.SLOCheck:
		what = fmt.Sprintf("%s: %.4g → %.4g ms over %d %s: too close to its SLO to say it no longer holds", name, ch.Base, ch.New, ch.N, u)
	case ch.N < MinSamples:
		what = fmt.Sprintf("%s: %d %s, fewer than the %d a figure is judged on", name, ch.N, u, MinSamples)
	case math.IsNaN(ch.CILow):
		what = fmt.Sprintf("%s: no interval from %d %s", name, ch.N, u)
	default:
		base, next, delta, ci, _ := ch.Cells()
		what = fmt.Sprintf("%s: %s → %s, %s %s over %d %s: the interval spans the %.3g%% tolerance", name, base, next, delta, ci, ch.N, u, tol*100)
		if tol == 0 {
			what = fmt.Sprintf("%s: %s → %s, %s %s over %d %s: no gain beyond doubt yet", name, base, next, delta, ci, ch.N, u)
		}
	}
	switch {
	case ch.Edge:
		return fmt.Sprintf("%s; at the change seen, no run of practical size settles it (it would take over %d %s a run)", what, MaxNeed, u)
	case ch.Need > 0:
		return fmt.Sprintf("%s; about %d %s a run would settle it", what, ch.Need, u)
	}
	return what
}

// settledText lists the quality figures that held with their counts:
// "empty_rate 0 of 288 in both, refusal_rate 0 of 288 in both".
func settledText(changes []Change) string {
	var out []string
	for _, ch := range changes {
		if ch.Quality && !isFailureRate(ch.Metric) && ch.Judgement == Holds && ch.Count != nil {
			name := ch.Metric
			if ch.Stage > 0 {
				name = fmt.Sprintf("stage %d %s", ch.Stage, name)
			}
			out = append(out, name+" "+ch.Count.String())
		}
	}
	return strings.Join(out, ", ")
}

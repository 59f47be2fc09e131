// Package quantile is the one percentile rule of infergate: nearest rank.
// bench's records, compare, ab report and the gateway's /admin/stats all
// print their p50, p90 and p99 through it, so the same values give the
// same figures everywhere.
//
// The p-quantile of n sorted values is the value at rank ⌈p·n⌉ (1-based):
// s[⌈p·n⌉−1]. It is always one of the values, never an interpolation, and
// a percentile is shown only when there are enough values to carry it
// (Enough): p90 needs 10, p99 100, so a p99 of 10 values, which would be
// their maximum, is left out rather than printed as a p99.
package quantile

import (
	"fmt"
	"math"
	"slices"
)

// Rule names the rule, for records that explain their figures.
const Rule = "nearest rank: the p-quantile of n sorted values is s[ceil(p·n)−1]; p90 is shown from 10 values, p95 from 20, p99 from 100"

// Rank returns the nearest-rank p-quantile (p in [0, 1]) of sorted, which
// must be sorted ascending; NaN when it is empty.
func Rank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[Index(len(sorted), p)]
}

// Index is the 0-based index Rank reads for p of n values.
func Index(n int, p float64) int {
	if n == 0 {
		return -1
	}
	// The product is rounded first: 0.9·10 is 9.000000000000002 in
	// floating point, and its ceiling would be rank 10.
	r := int(math.Ceil(math.Round(p*float64(n)*1e9)/1e9)) - 1
	return min(max(r, 0), n-1)
}

// Enough reports whether n values carry the p-quantile: at least
// 1/(1−p) of them (10 for p90, 20 for p95, 100 for p99), so that it is not
// simply the maximum. The median needs one.
func Enough(n int, p float64) bool {
	if p <= 0.5 {
		return n >= 1
	}
	return float64(n) >= math.Round(1/(1-p))
}

// Sorted returns a sorted copy of xs.
func Sorted(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// Of returns the nearest-rank p-quantile of xs, which it does not change.
func Of(xs []float64, p float64) float64 { return Rank(Sorted(xs), p) }

// Three are the p50, p90 and p99 of a distribution; P90 and P99 are nil
// when there are too few values to carry them (Enough).
type Three struct {
	N   int      `json:"n"`
	P50 float64  `json:"p50"`
	P90 *float64 `json:"p90,omitempty"`
	P99 *float64 `json:"p99,omitempty"`
}

// ThreeOf computes Three of xs, which it does not change; the zero Three
// for none.
func ThreeOf(xs []float64) Three {
	if len(xs) == 0 {
		return Three{}
	}
	return ThreeOfSorted(Sorted(xs))
}

// ThreeOfSorted is ThreeOf for values already sorted.
func ThreeOfSorted(s []float64) Three {
	t := Three{N: len(s)}
	if len(s) == 0 {
		return t
	}
	t.P50 = Rank(s, 0.5)
	t.P90 = Maybe(s, 0.9)
	t.P99 = Maybe(s, 0.99)
	return t
}

// Maybe is Rank when sorted has Enough values for p, else nil.
func Maybe(sorted []float64, p float64) *float64 {
	if !Enough(len(sorted), p) {
		return nil
	}
	v := Rank(sorted, p)
	return &v
}

// Text prints the three as "p50 / p90 / p99" with verb (e.g. "%.1f"),
// "-" for one left out, and "-" alone when there are no values.
func (t Three) Text(verb string) string {
	if t.N == 0 {
		return "-"
	}
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(verb, *v)
	}
	return fmt.Sprintf(verb, t.P50) + " / " + f(t.P90) + " / " + f(t.P99)
}

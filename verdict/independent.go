package verdict

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/infergate/infergate/internal/quantile"
)

// Samples judges the median of a latency (better "lower") or a speed
// (better "higher") measured in two independent runs: a bootstrap interval
// of the ratio of medians and the Mann-Whitney test.
func Samples(stage int, metric, better string, a, b []float64, tol, floor float64, rng *rand.Rand) (Change, bool) {
	if len(a) == 0 || len(b) == 0 {
		return Change{}, false
	}
	ch := Change{Stage: stage, Metric: metric, Base: Median(a), New: Median(b), Better: better, Test: "mann-whitney", N: min(len(a), len(b))}
	ch.Delta = rel(ch.Base, ch.New)
	ch.CILow, ch.CIHigh = bootstrapRatio(a, b, rng)
	ch.P = MannWhitney(a, b)
	judgeSpeed(&ch, min(len(a), len(b)), tol, floor)
	return ch, true
}

// Rates judges a rate that should not rise (failures, quality signals)
// in two independent runs: x of na in the base, y of nb in the new.
func Rates(stage int, metric string, x, na, y, nb int, tol float64) Change {
	ch := Change{Stage: stage, Metric: metric, Better: "lower", Quality: true, P: math.NaN(), Test: "two-proportion z", N: min(na, nb)}
	if na == 0 || nb == 0 {
		ch.Judgement = Unsure
		ch.Need = max(MinSamples, SettlingSize(tol))
		ch.Count = &Count{Base: x, BaseOf: na, New: y, NewOf: nb}
		return ch
	}
	ch.Base, ch.New = float64(x)/float64(na), float64(y)/float64(nb)
	ch.Count = &Count{Base: x, BaseOf: na, New: y, NewOf: nb}
	ch.Delta = ch.New - ch.Base
	ch.CILow, ch.CIHigh = acInterval(float64(x), float64(na), float64(y), float64(nb))
	if pooled := float64(x+y) / float64(na+nb); pooled > 0 && pooled < 1 {
		z := ch.Delta / math.Sqrt(pooled*(1-pooled)*(1/float64(na)+1/float64(nb)))
		ch.P = math.Erfc(math.Abs(z) / math.Sqrt2)
	}
	judgeRate(&ch, tol, func() int { return rateNeed(x, na, y, nb, tol) })
	if ch.Judgement == Unsure && x == 0 && y == 0 && min(na, nb) >= SettlingSize(tol) {
		// 0 of N in both with N at least the settling size holds,
		// whatever the other run's size: the interval's upper end is
		// widest against a base of unbounded size, and SettlingSize is
		// taken there.
		ch.Judgement, ch.Need, ch.Edge = Holds, 0, false
	}
	return ch
}

// bootstrapRatio returns a 95% percentile-bootstrap interval of
// median(b)/median(a) − 1, on at most 4000 values of each side.
func bootstrapRatio(a, b []float64, rng *rand.Rand) (lo, hi float64) {
	a, b = Thin(a, 4000), Thin(b, 4000)
	const rounds = 1000
	sa, sb := newMedians(a), newMedians(b)
	out := make([]float64, 0, rounds)
	for range rounds {
		for range a {
			sa.draw(rng.IntN(len(a)))
		}
		for range b {
			sb.draw(rng.IntN(len(b)))
		}
		ma, mb := sa.median(), sb.median()
		if ma > 0 {
			out = append(out, mb/ma-1)
		}
	}
	return percentiles(out)
}

// percentiles is the 2.5th and 97.5th percentiles of out (sorted here),
// NaN when empty.
func percentiles(out []float64) (lo, hi float64) {
	if len(out) == 0 {
		return math.NaN(), math.NaN()
	}
	slices.Sort(out)
	return out[int(0.025*float64(len(out)))], out[int(0.975*float64(len(out)-1))]
}

// Thin returns at most n values of xs, evenly spaced.
func Thin(xs []float64, n int) []float64 {
	if len(xs) <= n {
		return xs
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = xs[i*len(xs)/n]
	}
	return out
}

// MannWhitney returns the two-sided p-value of the Mann-Whitney U test
// (normal approximation with tie correction).
func MannWhitney(a, b []float64) float64 {
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
	slices.SortFunc(all, func(p, q v) int { return cmpFloat(p.x, q.x) })
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
	z := max(0, (math.Abs(u-mu)-0.5)/sigma)
	return math.Erfc(z / math.Sqrt2)
}

func cmpFloat(p, q float64) int {
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}

// Median is the median of xs (0 for none) by the one percentile rule,
// nearest rank (package quantile): for an even count the lower of the
// two middle values, never their mean, so a median here is the p50 that
// every report prints. xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return quickMedian(slices.Clone(xs))
}

// quickMedian is Median, reordering xs.
func quickMedian(xs []float64) float64 {
	return selectK(xs, quantile.Index(len(xs), 0.5))
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

// Means judges the mean of a figure (better "lower" or "higher") in two
// independent sets of values, as Samples judges a median: the relative
// change of the means with a 95% Welch interval (normal approximation)
// and its two-sided p-value. It suits a figure whose total matters, such
// as a cost per request, where a median would hide the long answers.
func Means(stage int, metric, better string, a, b []float64, tol float64) (Change, bool) {
	if len(a) == 0 || len(b) == 0 {
		return Change{}, false
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	ch := Change{Stage: stage, Metric: metric, Base: ma, New: mb, Better: better, Test: "welch", N: min(len(a), len(b)), P: math.NaN()}
	if ma == 0 {
		ch.Delta, ch.CILow, ch.CIHigh = math.NaN(), math.NaN(), math.NaN()
		judgeSpeed(&ch, ch.N, tol, 0)
		return ch, true
	}
	se := math.Sqrt(va/float64(len(a)) + vb/float64(len(b)))
	ch.Delta = (mb - ma) / ma
	ch.CILow, ch.CIHigh = (mb-ma-1.96*se)/ma, (mb-ma+1.96*se)/ma
	switch {
	case se > 0:
		ch.P = math.Erfc(math.Abs(mb-ma) / se / math.Sqrt2)
	case mb == ma:
		ch.P = 1
	default:
		ch.P = 0
	}
	judgeSpeed(&ch, ch.N, tol, 0)
	return ch, true
}

// MeanInterval is the mean of xs with a 95% normal interval (NaN, NaN
// for fewer than two values; all NaN for none).
func MeanInterval(xs []float64) (mean, lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	m, v := meanVar(xs)
	if len(xs) < 2 {
		return m, math.NaN(), math.NaN()
	}
	h := 1.96 * math.Sqrt(v/float64(len(xs)))
	return m, m - h, m + h
}

// meanVar is the mean and the sample variance of xs.
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// QuantileInterval is a distribution-free 95% interval of the p-th
// quantile of xs: the order statistics whose ranks bound the count of
// values below the quantile (normal approximation to the binomial). It
// is NaN, NaN for no values.
func QuantileInterval(xs []float64, p float64) (lo, hi float64) {
	n := len(xs)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := 1.96 * math.Sqrt(float64(n)*p*(1-p))
	j := int(math.Floor(float64(n)*p - h))
	k := int(math.Ceil(float64(n)*p + h))
	return s[max(0, min(n-1, j))], s[max(0, min(n-1, k))]
}

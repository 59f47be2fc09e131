package verdict

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Paired figures: the same requests answered by both arms (a mirrored
// pair), so each difference is measured on one prompt and the prompts'
// own spread drops out.

// PairedSamples judges a latency or speed from pairs: a[i] and b[i] are
// the two arms' values for request i. The interval is a paired bootstrap
// (whole pairs resampled) of the ratio of medians; the test is Wilcoxon's
// signed-rank test on the differences.
func PairedSamples(metric, better string, a, b []float64, tol, floor float64, rng *rand.Rand) (Change, bool) {
	n := min(len(a), len(b))
	if n == 0 {
		return Change{}, false
	}
	a, b = a[:n], b[:n]
	ch := Change{Metric: metric, Base: Median(a), New: Median(b), Better: better, Test: "wilcoxon signed-rank", N: n}
	ch.Delta = rel(ch.Base, ch.New)
	ch.CILow, ch.CIHigh = pairedBootstrap(a, b, rng)
	ch.P = Wilcoxon(a, b)
	judgeSpeed(&ch, n, tol, floor)
	return ch, true
}

// pairedBootstrap is a 95% interval of median(b)/median(a) − 1 with
// pairs resampled whole, on at most 4000 pairs.
func pairedBootstrap(a, b []float64, rng *rand.Rand) (lo, hi float64) {
	if len(a) > 4000 {
		a, b = Thin(a, 4000), Thin(b, 4000)
	}
	const rounds = 1000
	sa, sb := newMedians(a), newMedians(b)
	out := make([]float64, 0, rounds)
	for range rounds {
		for range a {
			j := rng.IntN(len(a))
			sa.draw(j)
			sb.draw(j)
		}
		ma, mb := sa.median(), sb.median()
		if ma > 0 {
			out = append(out, mb/ma-1)
		}
	}
	return percentiles(out)
}

// Wilcoxon returns the two-sided p-value of the Wilcoxon signed-rank test
// of b − a: zero differences dropped (Wilcoxon's treatment), ties given
// mean ranks, normal approximation with tie and continuity corrections.
func Wilcoxon(a, b []float64) float64 {
	d := make([]float64, 0, len(a))
	for i := range a {
		if x := b[i] - a[i]; x != 0 && !math.IsNaN(x) {
			d = append(d, x)
		}
	}
	n := float64(len(d))
	if n == 0 {
		return 1
	}
	slices.SortFunc(d, func(p, q float64) int { return cmpFloat(math.Abs(p), math.Abs(q)) })
	var wPlus, ties float64
	for i := 0; i < len(d); {
		j := i
		for j < len(d) && math.Abs(d[j]) == math.Abs(d[i]) {
			j++
		}
		rank := float64(i+j+1) / 2
		t := float64(j - i)
		ties += t*t*t - t
		for k := i; k < j; k++ {
			if d[k] > 0 {
				wPlus += rank
			}
		}
		i = j
	}
	mu := n * (n + 1) / 4
	sigma := math.Sqrt(n*(n+1)*(2*n+1)/24 - ties/48)
	if sigma == 0 {
		return 1
	}
	z := max(0, (math.Abs(wPlus-mu)-0.5)/sigma)
	return math.Erfc(z / math.Sqrt2)
}

// PairedRates judges a rate that should not rise from pairs: a[i] and
// b[i] say whether request i showed the signal in each arm. The test is
// McNemar's on the discordant pairs (exact below 25 of them); the
// interval is the paired difference's Wald interval with Agresti and
// Min's half-count in each cell, honest at rates of zero.
func PairedRates(metric string, a, b []bool, tol float64) Change {
	n := min(len(a), len(b))
	ch := Change{Metric: metric, Better: "lower", Quality: true, P: math.NaN(), Test: "mcnemar", N: n}
	if n == 0 {
		ch.Judgement = Unsure
		ch.Need = max(MinSamples, PairedSettlingSize(tol))
		return ch
	}
	var x, y, onlyA, onlyB int
	for i := range n {
		if a[i] {
			x++
		}
		if b[i] {
			y++
		}
		switch {
		case a[i] && !b[i]:
			onlyA++
		case b[i] && !a[i]:
			onlyB++
		}
	}
	ch.Base, ch.New = float64(x)/float64(n), float64(y)/float64(n)
	ch.Count = &Count{Base: x, BaseOf: n, New: y, NewOf: n}
	ch.Delta = ch.New - ch.Base
	ch.CILow, ch.CIHigh = pairedInterval(float64(onlyA), float64(onlyB), float64(n))
	ch.P = mcnemar(onlyA, onlyB)
	judgeRate(&ch, tol, func() int { return pairedNeed(onlyA, onlyB, n, tol) })
	return ch
}

// mcnemar is McNemar's two-sided p-value for discordant counts b and c:
// the exact binomial test below 25, else the chi-square with continuity.
func mcnemar(b, c int) float64 {
	m := b + c
	if m == 0 {
		return 1
	}
	if m < 25 {
		k := min(b, c)
		// P(X <= k) for X ~ Binomial(m, 1/2), doubled.
		p, term := 0.0, math.Pow(0.5, float64(m))
		for i := 0; i <= k; i++ {
			p += term
			term *= float64(m-i) / float64(i+1)
		}
		return math.Min(1, 2*p)
	}
	z := (math.Abs(float64(b-c)) - 1) / math.Sqrt(float64(m))
	return math.Erfc(max(0, z) / math.Sqrt2)
}

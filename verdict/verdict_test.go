package verdict

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestMcNemarExact(t *testing.T) {
	// 1 and 9 discordant pairs: 2 × P(X ≤ 1 | n=10, ½) = 2 × 11/1024.
	if p := mcnemar(1, 9); math.Abs(p-22.0/1024) > 1e-12 {
		t.Errorf("mcnemar(1, 9) = %v, want %v", p, 22.0/1024)
	}
	if p := mcnemar(5, 5); p != 1 {
		t.Errorf("mcnemar(5, 5) = %v, want 1", p)
	}
	// Above 25 the continuity-corrected chi-square: (|10−40|−1)²/50 = 16.82, p ≈ 4.1e-5.
	if p := mcnemar(10, 40); math.Abs(p-4.11e-5) > 0.1e-5 {
		t.Errorf("mcnemar(10, 40) = %v, want about 4.1e-5", p)
	}
}

func TestWilcoxon(t *testing.T) {
	// Wikipedia's example (pairs 125/110 … 135/145): one zero difference
	// dropped, W+ = 27, W− = 18 of n = 9: far from significant.
	a := []float64{125, 115, 130, 140, 140, 115, 140, 125, 140, 135}
	b := []float64{110, 122, 125, 120, 140, 124, 123, 137, 135, 145}
	if p := Wilcoxon(a, b); p < 0.5 || p > 0.8 {
		t.Errorf("p = %v, want about 0.6", p)
	}
	if p := Wilcoxon(a, a); p != 1 {
		t.Errorf("identical arms: p = %v", p)
	}
	// Every pair 10% slower: overwhelming.
	var c, d []float64
	rng := rand.New(rand.NewPCG(1, 1))
	for range 50 {
		x := 100 + rng.Float64()*100
		c, d = append(c, x), append(d, x*1.1)
	}
	if p := Wilcoxon(c, d); p > 1e-6 {
		t.Errorf("a consistent shift: p = %v", p)
	}
}

// pairs draws n latencies (ms) whose prompts differ a lot between
// requests; b is a times factor plus noise of sd on each side.
func pairs(rng *rand.Rand, n int, factor, sd float64) ([]float64, []float64) {
	a, b := make([]float64, n), make([]float64, n)
	for i := range n {
		prompt := 50 + rng.ExpFloat64()*200
		a[i] = prompt * (1 + rng.NormFloat64()*sd)
		b[i] = prompt * factor * (1 + rng.NormFloat64()*sd)
	}
	return a, b
}

func TestPairedSamplesFindsAShiftAndHoldsOtherwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	a, b := pairs(rng, 300, 1.25, 0.05)
	ch, _ := PairedSamples("ttft", "lower", a, b, 0.05, 1, rng)
	if ch.Judgement != Regressed || ch.P > 1e-6 || ch.CILow < 0.1 {
		t.Errorf("25%% slower: %+v", ch)
	}
	a, b = pairs(rng, 300, 0.8, 0.05)
	if ch, _ := PairedSamples("ttft", "lower", a, b, 0.05, 1, rng); ch.Judgement != Holds {
		t.Errorf("20%% faster: %+v", ch)
	}
	if ch, _ := PairedSamples("ttft", "lower", a[:5], b[:5], 0.05, 1, rng); ch.Judgement != Unsure || ch.Need < MinSamples {
		t.Errorf("five pairs: %+v", ch)
	}
}

// TestSameArmsAreNotRolledBack: arms drawn from one distribution are
// judged regressed rarely (the tolerance on top of the interval makes it
// rarer than the 2.5% a one-sided interval alone would give).
func TestSameArmsAreNotRolledBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	regressed := 0
	for range 200 {
		a, b := pairs(rng, 200, 1, 0.1)
		sa, _ := PairedSamples("ttft", "lower", a, b, 0.05, 1, rng)
		fa, fb := make([]bool, 200), make([]bool, 200)
		for i := range fa {
			fa[i], fb[i] = rng.Float64() < 0.1, rng.Float64() < 0.1
		}
		ra := PairedRates("invalid_json_rate", fa, fb, 0.02)
		if Decide([]Change{sa, ra}, Options{}).Verdict == RollBack {
			regressed++
		}
	}
	if regressed > 4 {
		t.Errorf("%d of 200 runs of identical arms rolled back", regressed)
	}
}

func TestPairedRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	a, b := make([]bool, 400), make([]bool, 400)
	for i := range a {
		a[i] = rng.Float64() < 0.05
		b[i] = a[i] || rng.Float64() < 0.2 // the candidate breaks 20% more
	}
	ch := PairedRates("invalid_json_rate", a, b, 0.02)
	if ch.Judgement != Regressed || ch.P > 1e-6 || ch.CILow < 0.1 {
		t.Errorf("%+v", ch)
	}
	r := Decide([]Change{ch}, Options{})
	if r.Verdict != RollBack || len(r.Reasons) != 1 {
		t.Errorf("%+v", r)
	}
	none := PairedRates("empty_rate", make([]bool, 400), make([]bool, 400), 0.02)
	if none.Judgement != Holds {
		t.Errorf("no signal on either side: %+v", none)
	}
}

func TestExitCodes(t *testing.T) {
	for v, want := range map[string]int{Keep: 0, RollBack: 1, Inconclusive: 2} {
		if got := ExitCode(v); got != want {
			t.Errorf("%s: %d", v, got)
		}
	}
}

func TestMannWhitney(t *testing.T) {
	// Identical samples: no evidence of a difference.
	a := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	if p := MannWhitney(a, a); p < 0.9 {
		t.Errorf("p(a, a) = %v, want ~1", p)
	}
	// Fully separated samples of 8 and 8: U = 0; the normal
	// approximation with continuity gives p ≈ 0.00094.
	b := []float64{11, 12, 13, 14, 15, 16, 17, 18}
	if p := MannWhitney(a, b); math.Abs(p-0.00094) > 0.0002 {
		t.Errorf("p(separated) = %v, want ≈ 0.00094", p)
	}
}

func TestCompareRatesAtZero(t *testing.T) {
	ch := Rates(0, "failure_rate", 0, 500, 0, 500, 0.02)
	if ch.Judgement != Holds {
		t.Errorf("0 of 500 both: %s [%v, %v], want holds", ch.Judgement, ch.CILow, ch.CIHigh)
	}
	ch = Rates(0, "failure_rate", 0, 10, 0, 10, 0.02)
	if ch.Judgement != Unsure || ch.Need <= 10 {
		t.Errorf("0 of 10 both: %s need %d, want unsure and a larger n", ch.Judgement, ch.Need)
	}
}

func TestChangeJSONHasNoNaN(t *testing.T) {
	b, err := json.Marshal(InfoChange(0, "x", 1, 2, "lower"))
	if err != nil || !strings.Contains(string(b), `"ci_low":null`) || !strings.Contains(string(b), `"delta":1`) {
		t.Fatalf("%s %v", b, err)
	}
}

// The counted resample's median is the median of the resample itself,
// ties and duplicates included.
func TestCountedResampleMedianIsTheResamplesMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 2, 3, 10, 101, 1000} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(rng.IntN(n/3 + 1)) // plenty of ties
		}
		m := newMedians(xs)
		draw := make([]float64, n)
		for range 50 {
			for i := range draw {
				j := rng.IntN(n)
				m.draw(j)
				draw[i] = xs[j]
			}
			if got, want := m.median(), Median(draw); got != want {
				t.Fatalf("n=%d: counted median %v, the resample's %v", n, got, want)
			}
		}
	}
}

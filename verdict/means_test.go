package verdict

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMeans(t *testing.T) {
	same := []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	ch, _ := Means(0, "cost", "lower", same, same, 0.02)
	if ch.Judgement != Holds || ch.Delta != 0 {
		t.Errorf("identical: %+v, want holds", ch)
	}
	dearer := make([]float64, len(same))
	for i := range dearer {
		dearer[i] = 1.1
	}
	if ch, _ = Means(0, "cost", "lower", same, dearer, 0.02); ch.Judgement != Regressed {
		t.Errorf("10%% dearer: %+v, want regressed", ch)
	}
	if ch, _ = Means(0, "cost", "lower", dearer, same, 0.02); ch.Judgement != Holds {
		t.Errorf("10%% cheaper: %+v, want holds", ch)
	}
	// Noisy values with the same mean: the interval covers zero.
	rng := rand.New(rand.NewPCG(1, 2))
	a, b := make([]float64, 200), make([]float64, 200)
	for i := range a {
		a[i], b[i] = 1+rng.NormFloat64()*0.3, 1+rng.NormFloat64()*0.3
	}
	if ch, _ = Means(0, "cost", "lower", a, b, 0.02); ch.CILow > 0 || ch.CIHigh < 0 || ch.Judgement == Regressed {
		t.Errorf("same mean, noisy: %+v", ch)
	}
}

func TestQuantileInterval(t *testing.T) {
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = float64(999 - i)
	}
	lo, hi := QuantileInterval(xs, 0.5)
	if lo > 500 || hi < 500 || hi-lo > 80 {
		t.Errorf("median of 0..999: [%v, %v]", lo, hi)
	}
	if lo, hi = QuantileInterval(xs[:5], 0.9); lo > hi {
		t.Errorf("p90 of five: [%v, %v]", lo, hi)
	}
	if lo, _ = QuantileInterval(nil, 0.5); !math.IsNaN(lo) {
		t.Error("no values: want NaN")
	}
}

func TestMeanInterval(t *testing.T) {
	m, lo, hi := MeanInterval([]float64{1, 2, 3, 4})
	if m != 2.5 || !(lo < 2.5 && hi > 2.5) || math.Abs((hi-m)-(m-lo)) > 1e-12 {
		t.Errorf("mean %v [%v, %v]", m, lo, hi)
	}
	if m, lo, _ = MeanInterval([]float64{7}); m != 7 || !math.IsNaN(lo) {
		t.Errorf("one value: %v, %v", m, lo)
	}
}

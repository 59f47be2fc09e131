package quantile

import (
	"math"
	"testing"
)

func TestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		name string
		s    []float64
		p    float64
		want float64
	}{
		{"median of ten is the 5th (the lower middle, no interpolation)", ten, 0.5, 5},
		{"p90 of ten is the 9th, not the maximum", ten, 0.9, 9},
		{"p99 of ten is the maximum", ten, 0.99, 10},
		{"p0 is the minimum", ten, 0, 1},
		{"p100 is the maximum", ten, 1, 10},
		{"one value", []float64{7}, 0.9, 7},
		{"median of three", []float64{1, 2, 3}, 0.5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Rank(tc.s, tc.p); got != tc.want {
				t.Errorf("Rank(%v, %v) = %v, want %v", tc.s, tc.p, got, tc.want)
			}
		})
	}
	if !math.IsNaN(Rank(nil, 0.5)) {
		t.Error("Rank of nothing is not NaN")
	}
}

func TestRankOfHundreds(t *testing.T) {
	// 1..n: the p-quantile is ceil(p·n) exactly, whatever floating point
	// makes of p·n.
	for _, n := range []int{10, 20, 100, 1000, 1001} {
		s := make([]float64, n)
		for i := range s {
			s[i] = float64(i + 1)
		}
		for _, p := range []float64{0.5, 0.9, 0.95, 0.99} {
			want := math.Ceil(math.Round(p*float64(n)*1e6) / 1e6)
			if got := Rank(s, p); got != want {
				t.Errorf("n=%d p=%v: %v, want %v", n, p, got, want)
			}
		}
	}
}

func TestEnough(t *testing.T) {
	for _, tc := range []struct {
		n    int
		p    float64
		want bool
	}{{1, 0.5, true}, {0, 0.5, false}, {9, 0.9, false}, {10, 0.9, true}, {19, 0.95, false}, {20, 0.95, true}, {99, 0.99, false}, {100, 0.99, true}} {
		if got := Enough(tc.n, tc.p); got != tc.want {
			t.Errorf("Enough(%d, %v) = %v, want %v", tc.n, tc.p, got, tc.want)
		}
	}
}

func TestThreeText(t *testing.T) {
	xs := []float64{3, 1, 2, 10, 9, 8, 7, 6, 5, 4}
	th := ThreeOf(xs)
	if got := th.Text("%.0f"); got != "5 / 9 / -" {
		t.Errorf("ThreeOf(%v).Text = %q", xs, got)
	}
	if xs[0] != 3 {
		t.Error("ThreeOf changed its input")
	}
	if got := ThreeOf(nil).Text("%.0f"); got != "-" {
		t.Errorf("none: %q", got)
	}
}

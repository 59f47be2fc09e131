package verdict

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseObjective(t *testing.T) {
	slos, err := ParseSLOs("ttft=2s, tpot=50ms")
	if err != nil || len(slos) != 2 || slos[0].MaxMs != 2000 || slos[1].MaxMs != 50 {
		t.Fatalf("%v %v", slos, err)
	}
	for _, bad := range []string{"ttft", "ttft=0s", "ttft=-1s", "itl=5ms", "ttft=1s,ttft=2s", "ttft=fast"} {
		if _, err := ParseSLOs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]float64{"p90": 0.9, "95": 0.95, "0.99": 0.99, "p99.9": 0.999} {
		if got, err := ParsePercentile(in); err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"p0", "p100", "x", "1", "-5"} {
		if _, err := ParsePercentile(bad); err == nil {
			t.Errorf("percentile %q accepted", bad)
		}
	}
	a, err := ParseAllow("tpot=+50%,e2e=10%")
	if err != nil || a["tpot"] != 0.5 || a["e2e"] != 0.1 {
		t.Errorf("%v %v", a, err)
	}
	if _, err := ParseAllow("speed=+5%"); err == nil {
		t.Error("an allowance on a figure that is not judged accepted")
	}
}

// Goodput's interval covers the true ratio about 95% of the time for
// Poisson counts, and an SLO check regresses only when the new run's
// share within the SLO is clearly below the percentile.
func TestGoodputAndCrossing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	covered := 0
	for range 400 {
		ma, mb := poisson(rng, 300), poisson(rng, 300)
		g := Goodput(0, ma, 60, mb, 60, 600, 0.05)
		if g.CILow <= 0 && g.CIHigh >= 0 {
			covered++
		}
	}
	if covered < 360 || covered > 395 {
		t.Errorf("the 95%% interval covered the true ratio %d of 400 times", covered)
	}
	if g := Goodput(0, 100, 60, 300, 60, 600, 0.05); g.Judgement != Holds || g.CILow < 1 {
		t.Errorf("tripled goodput: %+v", g)
	}
	if g := Goodput(0, 300, 60, 100, 60, 600, 0.05); g.Judgement != Regressed {
		t.Errorf("a third of the goodput: %+v", g)
	}
	slo := SLO{Metric: "tpot", MaxMs: 50}
	ramp := func(lo, hi float64) []float64 {
		out := make([]float64, 200)
		for i := range out {
			out[i] = lo + (hi-lo)*float64(i)/199
		}
		return out
	}
	if c := Crossing(0, slo, 0.9, ramp(20, 45), ramp(30, 70)); c.Judgement != Regressed {
		t.Errorf("p90 from 42 to 66 ms past 50: %+v", c)
	}
	if c := Crossing(0, slo, 0.9, ramp(20, 45), ramp(25, 52)); c.Judgement != Holds {
		t.Errorf("p90 49 ms, within 50: %+v", c)
	}
	if c := Crossing(0, slo, 0.9, ramp(40, 80), ramp(45, 90)); c.Judgement != Info {
		t.Errorf("missed before and after: %+v", c)
	}
	if c := Crossing(0, slo, 0.9, ramp(20, 45), ramp(20, 54)); c.Judgement != Unsure {
		t.Errorf("p90 at 50.6 ms, 88%% within: not settled at n=200: %+v", c)
	}
}

func poisson(rng *rand.Rand, mean float64) int {
	// Knuth's method in pieces of 30, enough for the test's means.
	n := 0
	for left := mean; left > 0; left -= 30 {
		l, k, p := math.Exp(-math.Min(left, 30)), 0, 1.0
		for {
			p *= rng.Float64()
			if p <= l {
				break
			}
			k++
		}
		n += k
	}
	return n
}

// Whatever the objective's flags and the figures, the rule answers one
// of its three verdicts and does not panic.
func FuzzObjective(f *testing.F) {
	f.Add("ttft=2s,tpot=50ms", "p90", "", "", 0.1, 0.2, -0.3)
	f.Add("", "", "ttft", "tpot=+50%", -0.5, 0.4, 0.1)
	f.Add("e2e=1ms", "99.9", "tpot", "e2e=1%", math.NaN(), math.Inf(1), 0.0)
	f.Fuzz(func(t *testing.T, slo, pct, target, allow string, d, lo, hi float64) {
		var o Options
		var err error
		if o.Objective.SLOs, err = ParseSLOs(slo); err != nil {
			return
		}
		if p, err := ParsePercentile(pct); err == nil {
			o.Objective.Percentile = p
		}
		if CheckTarget(target) == nil {
			o.Objective.Target = target
		}
		if o.Objective.Allow, err = ParseAllow(allow); err != nil {
			return
		}
		changes := []Change{
			{Metric: "ttft", Better: "lower", Delta: d, CILow: lo, CIHigh: hi, N: 100, Base: 100, New: 100 * (1 + d), Judgement: Holds},
			{Metric: "tpot", Better: "lower", Delta: -d, CILow: -hi, CIHigh: -lo, N: 100, Base: 10, New: 10, Judgement: Regressed},
			Attainment(0, 50, 100, 60, 100, 0.02),
			Goodput(0, 50, 10, 60, 10, 100, 0.05),
			Crossing(0, SLO{Metric: "tpot", MaxMs: 50}, o.Objective.Pct(), []float64{10, 20, 60}, []float64{70, 80}),
			Rates(0, "failure_rate", 1, 100, 20, 100, 0.02),
		}
		r := Decide(changes, o)
		if r.Verdict != Keep && r.Verdict != RollBack && r.Verdict != Inconclusive {
			t.Fatalf("verdict %q", r.Verdict)
		}
		if r.Mode == Strict && r.Hint != "" && !strings.Contains(r.Hint, "--slo") {
			t.Fatalf("hint %q", r.Hint)
		}
	})
}

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
		if Decide([]Change{sa, ra}).Verdict == RollBack {
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
	r := Decide([]Change{ch})
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

func TestABFindsThePlantedTradeOff(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var pairs []PairSample
	for range 300 {
		prompt := 50 + rng.ExpFloat64()*100
		p := PairSample{JSONAsked: true, Similarity: 0.5, LengthRatio: 1,
			Primary:   ArmSample{OK: true, TTFT: prompt, TPOT: 10, E2E: prompt + 1000, InvalidJSON: rng.Float64() < 0.01},
			Candidate: ArmSample{OK: true, TTFT: prompt * 0.8, TPOT: 6, E2E: prompt*0.8 + 600, InvalidJSON: rng.Float64() < 0.1}}
		pairs = append(pairs, p)
	}
	r := AB(pairs, Options{})
	if r.Verdict != RollBack || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "invalid_json_rate") {
		t.Fatalf("faster but more broken JSON: %s %v", r.Verdict, r.Reasons)
	}
	for _, ch := range r.Changes {
		if ch.Metric == "ttft" && ch.Judgement != Holds {
			t.Errorf("the faster ttft: %+v", ch)
		}
	}
	var sb strings.Builder
	r.Write(&sb)
	if !strings.Contains(sb.String(), "verdict: ROLL BACK") {
		t.Errorf("%s", sb.String())
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("the report does not encode: %v", err)
	}
}

// TestABNoiseFloor: a latency rise that the A/A arm (the same build
// asked again) shows as well is not a regression of the candidate.
func TestABNoiseFloor(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	var pairs []PairSample
	for range 200 {
		prompt := 50 + rng.ExpFloat64()*100
		// Every second answer is slow, whichever arm gives it: a noisy host.
		slow := func() float64 {
			if rng.IntN(2) == 0 {
				return 1.3
			}
			return 1
		}
		primary := ArmSample{OK: true, TTFT: prompt, E2E: prompt + 500}
		cand := ArmSample{OK: true, TTFT: prompt * 1.15 * slow(), E2E: prompt + 500}
		aa := ArmSample{OK: true, TTFT: prompt * 1.15 * slow(), E2E: prompt + 500}
		pairs = append(pairs, PairSample{Primary: primary, Candidate: cand, Noise: &aa})
	}
	with := AB(pairs, Options{})
	if len(with.Noise) == 0 || with.Verdict == RollBack {
		t.Errorf("a rise the A/A arm shows too: %s %v", with.Verdict, with.Reasons)
	}
	for i := range pairs {
		pairs[i].Noise = nil
	}
	if without := AB(pairs, Options{}); without.Verdict != RollBack {
		t.Errorf("without the A/A arm the same rise is a regression: %s", without.Verdict)
	}
}

func TestSplitFindsARegression(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	var a, b []SplitSample
	for range 300 {
		a = append(a, SplitSample{Arm: ArmSample{OK: true, TTFT: 40 + rng.Float64()*20, E2E: 900}, JSONAsked: true})
		b = append(b, SplitSample{Arm: ArmSample{OK: true, TTFT: 40 + rng.Float64()*20, E2E: 900, InvalidJSON: rng.Float64() < 0.15}, JSONAsked: true})
	}
	r := Split(a, b, Options{})
	if r.Verdict != RollBack || !strings.Contains(strings.Join(r.Reasons, ";"), "invalid_json_rate") {
		t.Errorf("%s %v", r.Verdict, r.Reasons)
	}
	if r := Split(a, a, Options{}); r.Verdict == RollBack {
		t.Errorf("the same arm twice: %s %v", r.Verdict, r.Reasons)
	}
}

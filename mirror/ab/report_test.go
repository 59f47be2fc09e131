package ab

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/quality"
	"github.com/infergate/infergate/verdict"
)

func TestABFindsThePlantedTradeOff(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(8, 9))
	var pairs []mirror.Pair
	for range 300 {
		prompt := 50 + rng.ExpFloat64()*100
		p := mirror.Pair{JSONAsked: true, Similarity: 0.5, LengthRatio: 1,
			Primary:   mirror.Arm{Status: 200, TTFTms: prompt, TPOTms: 10, E2Ems: prompt + 1000, Signals: quality.Signals{InvalidJSON: rng.Float64() < 0.01}},
			Candidate: mirror.Arm{Status: 200, TTFTms: prompt * 0.8, TPOTms: 6, E2Ems: prompt*0.8 + 600, Signals: quality.Signals{InvalidJSON: rng.Float64() < 0.1}}}
		pairs = append(pairs, p)
	}
	r := Paired(pairs, verdict.Options{})
	if r.Verdict != verdict.RollBack || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "invalid_json_rate") {
		t.Fatalf("faster but more broken JSON: %s %v", r.Verdict, r.Reasons)
	}
	for _, ch := range r.Changes {
		if ch.Metric == "ttft" && ch.Judgement != verdict.Holds {
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
	t.Parallel()
	rng := rand.New(rand.NewPCG(10, 11))
	var pairs []mirror.Pair
	for range 200 {
		prompt := 50 + rng.ExpFloat64()*100
		// Every second answer is slow, whichever arm gives it: a noisy host.
		slow := func() float64 {
			if rng.IntN(2) == 0 {
				return 1.3
			}
			return 1
		}
		primary := mirror.Arm{Status: 200, TTFTms: prompt, E2Ems: prompt + 500}
		cand := mirror.Arm{Status: 200, TTFTms: prompt * 1.15 * slow(), E2Ems: prompt + 500}
		aa := mirror.Arm{Status: 200, TTFTms: prompt * 1.15 * slow(), E2Ems: prompt + 500}
		pairs = append(pairs, mirror.Pair{Primary: primary, Candidate: cand, Noise: &aa})
	}
	with := Paired(pairs, verdict.Options{})
	if len(with.Noise) == 0 || with.Verdict == verdict.RollBack {
		t.Errorf("a rise the A/A arm shows too: %s %v", with.Verdict, with.Reasons)
	}
	for i := range pairs {
		pairs[i].Noise = nil
	}
	if without := Paired(pairs, verdict.Options{}); without.Verdict != verdict.RollBack {
		t.Errorf("without the A/A arm the same rise is a regression: %s", without.Verdict)
	}
}

func TestSplitFindsARegression(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 13))
	var a, b []mirror.Pair
	for range 300 {
		a = append(a, mirror.Pair{Split: "primary", Primary: mirror.Arm{Status: 200, TTFTms: 40 + rng.Float64()*20, E2Ems: 900}, JSONAsked: true})
		b = append(b, mirror.Pair{Split: "candidate", Candidate: mirror.Arm{Status: 200, TTFTms: 40 + rng.Float64()*20, E2Ems: 900, Signals: quality.Signals{InvalidJSON: rng.Float64() < 0.15}}, JSONAsked: true})
	}
	r := Compare(append(a, b...), verdict.Options{})
	if r.Verdict != verdict.RollBack || !strings.Contains(strings.Join(r.Reasons, ";"), "invalid_json_rate") {
		t.Errorf("%s %v", r.Verdict, r.Reasons)
	}
	bb := make([]mirror.Pair, len(a))
	for i, p := range a {
		bb[i] = mirror.Pair{Split: "candidate", Candidate: p.Primary, JSONAsked: true}
	}
	if r := Compare(append(a, bb...), verdict.Options{}); r.Verdict == verdict.RollBack {
		t.Errorf("the same arm twice: %s %v", r.Verdict, r.Reasons)
	}
}

// The arms' cached shares: within the tolerance they compare; beyond it
// the reason names both; an arm whose backend said nothing is unknown.
func TestCacheConditions(t *testing.T) {
	t.Parallel()
	arm := func(cached int) mirror.Arm {
		a := mirror.Arm{Status: 200, PromptTokens: 100, TTFTms: 10, E2Ems: 20}
		if cached >= 0 {
			a.CachedTokens = &cached
		}
		return a
	}
	cases := []struct {
		name                 string
		primary, candidate   int
		wantReason, wantUnkn bool
	}{
		{"both cold", 2, 0, false, false},
		{"both warm", 95, 97, false, false},
		{"warm primary, cold candidate", 95, 3, true, false},
		{"candidate silent", 95, -1, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var pairs []mirror.Pair
			for range 30 {
				pairs = append(pairs, mirror.Pair{Primary: arm(tc.primary), Candidate: arm(tc.candidate)})
			}
			r := Paired(pairs, verdict.Options{})
			reason, unknown := r.CacheConditions(verdict.DefaultCacheTolerance)
			if (reason != "") != tc.wantReason || unknown != tc.wantUnkn {
				t.Errorf("primary %d%%, candidate %d%%: reason %q, unknown %v", tc.primary, tc.candidate, reason, unknown)
			}
			if tc.wantReason && !strings.Contains(reason, "primary 95.0%, candidate 3.0%:") {
				t.Errorf("reason %q: want both shares", reason)
			}
		})
	}
}

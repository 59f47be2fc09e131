package ab

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/verdict"
)

// pairsOf are n mirrored pairs a tenth of a second apart: the primary's
// TTFT and TPOT drawn around pt, pp; the candidate's around ct, cp.
func pairsOf(rng *rand.Rand, n int, pt, pp, ct, cp float64) []mirror.Pair {
	start := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	out := make([]mirror.Pair, n)
	arm := func(ttft, tpot float64) mirror.Arm {
		ft, tp := ttft*(0.7+0.6*rng.Float64()), tpot*(0.8+0.4*rng.Float64())
		return mirror.Arm{Status: 200, TTFTms: ft, TPOTms: tp, E2Ems: ft + 63*tp, OutputTokens: 64}
	}
	for i := range out {
		out[i] = mirror.Pair{Time: start.Add(time.Duration(i) * 100 * time.Millisecond), Primary: arm(pt, pp), Candidate: arm(ct, cp)}
	}
	return out
}

func sloOpts(t *testing.T, s string) verdict.Options {
	slos, err := verdict.ParseSLOs(s)
	if err != nil {
		t.Fatal(err)
	}
	return verdict.Options{Objective: verdict.Objective{SLOs: slos}}
}

// The candidate trades TPOT (30 → 42 ms) for TTFT (2.5 s → 0.6 s): KEEP at
// TTFT p90 ≤ 2 s and TPOT p90 ≤ 50 ms, ROLL BACK under the strict rule
// with the hint; past the TPOT SLO, ROLL BACK either way.
func TestABJudgedAtTheSLOs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 9))
	trade := pairsOf(rng, 300, 2500, 30, 600, 42)
	if r := Paired(trade, sloOpts(t, "ttft=2s,tpot=50ms")); r.Verdict != verdict.Keep || r.Mode != verdict.BySLO {
		var b strings.Builder
		r.Write(&b)
		t.Errorf("the trade under SLOs: %s\n%s", r.Verdict, b.String())
	}
	if r := Paired(trade, verdict.Options{}); r.Verdict != verdict.RollBack || !strings.Contains(r.Hint, "--slo") {
		t.Errorf("the trade, strict: %s hint %q", r.Verdict, r.Hint)
	}
	past := pairsOf(rng, 300, 2500, 30, 600, 60)
	if r := Paired(past, sloOpts(t, "ttft=2s,tpot=50ms")); r.Verdict != verdict.RollBack || !strings.Contains(strings.Join(r.Reasons, " "), "tpot_p90≤50ms") {
		t.Errorf("TPOT past its SLO: %s %q", r.Verdict, r.Reasons)
	}
}

// Two identical arms, judged at SLOs they meet about half the time: at
// most 5% of 200 reports roll back.
func TestABIdenticalArmsAtTheSLOs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 9))
	o := sloOpts(t, "ttft=1s,tpot=40ms")
	rolled := 0
	for i := range 200 {
		o.Seed = uint64(i)
		if Paired(pairsOf(rng, 100, 1000, 40, 1000, 40), o).Verdict == verdict.RollBack {
			rolled++
		}
	}
	t.Logf("%d of 200 rolled back", rolled)
	if rolled > 10 {
		t.Errorf("%d of 200 reports on identical arms rolled back", rolled)
	}
}

package bench

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/infergate/infergate/verdict"
)

// runOf is a record of one open-loop stage at 10 req/s for 60 s: n
// requests whose TTFT and TPOT (ms) are drawn around ttft and tpot.
func runOf(rng *rand.Rand, n int, ttft, tpot float64) *Record {
	s := &Summary{Requests: n, OK: n, Window: float64(n) / 10, Samples: map[string][]float64{}, PerRequest: map[string][]float64{}}
	for range n {
		ft := ttft * (0.7 + 0.6*rng.Float64())
		pt := tpot * (0.8 + 0.4*rng.Float64())
		e2e := ft + 63*pt
		for k, v := range map[string]float64{"ttft": ft, "ttft_sched": ft, "tpot": pt, "e2e": e2e} {
			s.Samples[k] = append(s.Samples[k], v)
			s.PerRequest[k] = append(s.PerRequest[k], v)
		}
		s.Samples["speed"] = append(s.Samples["speed"], 1000/pt)
	}
	return &Record{Schema: schema, Stages: []*Summary{s}, Conditions: Conditions{Load: LoadSpec{Mode: "open", Rate: 10}}}
}

func sloOptions(slo string) verdict.Options {
	slos, err := verdict.ParseSLOs(slo)
	if err != nil {
		panic(err)
	}
	return verdict.Options{Objective: verdict.Objective{SLOs: slos}}
}

// A bigger batch: TTFT falls from ~2.5 s to ~0.6 s, TPOT rises from
// 30 to 42 ms. With TTFT p90 ≤ 2 s and TPOT p90 ≤ 50 ms that is the
// change the operator wants; the strict rule rolls it back and says
// which flag would judge it.
func TestTradeKeptUnderSLOsRolledBackWithout(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	base, next := runOf(rng, 400, 2500, 30), runOf(rng, 400, 600, 42)

	strict := Compare(base, next, verdict.Options{})
	if strict.Verdict != verdict.RollBack || !strings.Contains(strict.Hint, "TPOT rose") || !strings.Contains(strict.Hint, "TTFT") || !strings.Contains(strict.Hint, "--slo") {
		t.Errorf("strict: %s, hint %q, reasons %q", strict.Verdict, strict.Hint, strict.Reasons)
	}
	slo := Compare(base, next, sloOptions("ttft=2s,tpot=50ms"))
	if slo.Verdict != verdict.Keep || slo.Mode != verdict.BySLO {
		t.Fatalf("under SLOs: %s %q", slo.Verdict, slo.Reasons)
	}
	g := find(t, slo, "goodput")
	if g.Judgement != verdict.Holds || g.Base > 2.5 || g.New < 9 {
		t.Errorf("goodput %+v, want ~1.7 → ~10 req/s", g)
	}
	if tp := find(t, slo, "tpot"); tp.Judgement != verdict.Info {
		t.Errorf("tpot judged %s under SLOs: only its SLO's check counts", tp.Judgement)
	}
	trade := Compare(base, next, verdict.Options{Objective: verdict.Objective{Target: "ttft", Allow: map[string]float64{"tpot": 0.5, "e2e": 0.5}}})
	if trade.Verdict != verdict.Keep {
		t.Errorf("trade ttft, tpot +50%% allowed: %s %q", trade.Verdict, trade.Reasons)
	}
	tight := Compare(base, next, verdict.Options{Objective: verdict.Objective{Target: "ttft", Allow: map[string]float64{"tpot": 0.1, "e2e": 0.5}}})
	if tight.Verdict != verdict.RollBack {
		t.Errorf("trade with tpot +10%% allowed (it rose 40%%): %s %q", tight.Verdict, tight.Reasons)
	}
}

// The same TTFT gain with TPOT pushed from 40 to 55 ms: past its SLO of
// 50 ms at p90, so it rolls back under SLOs although goodput may not say
// so alone.
func TestCrossingItsSLORollsBack(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	base, next := runOf(rng, 400, 1500, 40), runOf(rng, 400, 600, 55)
	c := Compare(base, next, sloOptions("ttft=2s,tpot=50ms"))
	if c.Verdict != verdict.RollBack {
		t.Fatalf("%s %q", c.Verdict, c.Reasons)
	}
	if !strings.Contains(strings.Join(c.Reasons, " "), "tpot_p90≤50ms no longer holds") {
		t.Errorf("reasons %q", c.Reasons)
	}
}

// Identical conditions measured twice: the verdict may not roll back
// more often than 5% of the time (each judged figure's test runs at 5%
// two-sided, half of that on the side that rolls back; the tolerances
// lower it further). The runs are drawn from a seeded generator, not
// measured: the test reads no clock and may share the CPU.
func TestIdenticalRunsRarelyRollBack(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	pairs, limit := 200, 10 // at most 5% of identical pairs
	if raceBuild {
		pairs, limit = 50, 5
	}
	for _, o := range []verdict.Options{{}, sloOptions("ttft=1100ms,tpot=44ms")} {
		rolled := 0
		for i := range pairs {
			o.Seed = uint64(i)
			if Compare(runOf(rng, 100, 1000, 40), runOf(rng, 100, 1000, 40), o).Verdict == verdict.RollBack {
				rolled++
			}
		}
		t.Logf("%s: %d of %d rolled back", o.Objective.Mode(), rolled, pairs)
		if rolled > limit {
			t.Errorf("%s: %d of %d identical pairs of runs rolled back", o.Objective.Mode(), rolled, pairs)
		}
	}
}

// Closed loop: goodput is shown, not judged, and the report says which
// load mode would make it the figure.
func TestGoodputNotJudgedInClosedLoop(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	base, next := runOf(rng, 300, 1000, 40), runOf(rng, 300, 1000, 40)
	base.Conditions.Load, next.Conditions.Load = LoadSpec{Mode: "closed", Concurrency: 8}, LoadSpec{Mode: "closed", Concurrency: 8}
	c := Compare(base, next, sloOptions("ttft=2s"))
	if g := find(t, c, "goodput"); g.Judgement != verdict.Info {
		t.Errorf("goodput judged in closed loop: %+v", g)
	}
	if !strings.Contains(c.LoadNote, "open-loop") {
		t.Errorf("note %q", c.LoadNote)
	}
}

func TestUnjudgedRecords(t *testing.T) {
	t.Parallel()
	r := &Record{Stages: []*Summary{{Requests: 182, Failed: 182, Errors: map[string]int{"http_404": 182},
		ErrorSamples: map[string]string{"http_404": `{"error":{"message":"model gpt-4o not found"}}`}}}}
	err := Unjudged(r, 0.5)
	if err == nil || !strings.Contains(err.Error(), "no successful request") || !strings.Contains(err.Error(), "182 × http_404") || !strings.Contains(err.Error(), "gpt-4o") {
		t.Errorf("%v", err)
	}
	r.Stages[0].OK, r.Stages[0].Failed = 80, 102
	if err := Unjudged(r, 0.5); err == nil || !strings.Contains(err.Error(), "102 of 182") {
		t.Errorf("%v", err)
	}
	r.Stages[0].OK, r.Stages[0].Failed = 170, 12
	if err := Unjudged(r, 0.5); err != nil {
		t.Error(err)
	}
}

func find(t *testing.T, c *Comparison, metric string) verdict.Change {
	t.Helper()
	for _, ch := range c.Changes {
		if ch.Metric == metric {
			return ch
		}
	}
	t.Fatalf("no %s in %+v", metric, c.Changes)
	return verdict.Change{}
}

package tune

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/proxy/proxytest"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
	"github.com/infergate/infergate/verdict"
)

// The verdict end to end: real simulators behind a real gateway, the
// change made by pointing the gateway at another server, each run a real
// bench record. A server with a bigger batch answers first tokens far
// sooner and decodes each a little slower: the change an operator with
// TTFT p90 ≤ 300 ms and TPOT p90 ≤ 40 ms wants. One that decodes much
// slower pushes TPOT past its SLO.
func TestVerdictJudgesTheTradeEndToEnd(t *testing.T) {
	serveSim := func(seqs int, baseMs, perSeqMs float64) string {
		c, _ := sim.Preset("balanced")
		c.Engine.MaxNumSeqs, c.Engine.DecodeBaseMs, c.Engine.DecodePerSeqMs = seqs, baseMs, perSeqMs
		c.Engine.SaturationBatch = seqs
		return simtest.Start(t, c).URL
	}
	// At 60 requests a second of 32 tokens: 16 sequences at a time queue
	// (TTFT p90 over 2 s, TPOT about 12 ms); 128 do not queue and decode
	// slower, within 40 ms; a 50 ms decode step puts TPOT past 40 ms.
	small, big, slow := serveSim(16, 8, 0.15), serveSim(128, 8, 0.2), serveSim(128, 50, 0.15)
	g := proxytest.Start(t, proxytest.To(small))
	slos, _ := verdict.ParseSLOs("ttft=300ms,tpot=40ms")
	run := func(upstream string) *bench.Record {
		t.Helper()
		if err := g.G.Reload(proxytest.To(upstream)); err != nil {
			t.Fatal(err)
		}
		rec, err := bench.Run(context.Background(), bench.Config{URL: g.URL, SLOs: slos,
			Workload: bench.WorkloadSpec{Model: "sim-model", Stream: true, InputTokens: "32", OutputTokens: "32", ForceOutputLength: true},
			Load:     bench.LoadSpec{Mode: "open", Rate: 60, Duration: 5 * time.Second, WarmupTime: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	base, bigger, slower := run(small), run(big), run(slow)
	bySLO := verdict.Options{Objective: verdict.Objective{SLOs: slos}}

	strict := bench.Compare(base, bigger, verdict.Options{Objective: verdict.Objective{}})
	// Records made with SLOs are judged by them when the command gives
	// no objective; without them the rule is strict.
	if strict.Mode != verdict.BySLO {
		t.Fatalf("records with SLOs judged %s", strict.Mode)
	}
	for _, r := range []*bench.Record{base, bigger} {
		r.Conditions.SLOs = nil
	}
	strict = bench.Compare(base, bigger, verdict.Options{})
	if strict.Verdict != verdict.RollBack || !strings.Contains(strict.Hint, "--slo") || !strings.Contains(strict.Hint, "TPOT") {
		t.Errorf("strict: %s %q hint %q", strict.Verdict, strict.Reasons, strict.Hint)
	}
	t.Logf("strict: %s; hint: %s", strict.Verdict, strict.Hint)
	if c := bench.Compare(base, bigger, bySLO); c.Verdict != verdict.Keep {
		var b strings.Builder
		c.Write(&b)
		t.Errorf("the bigger batch under SLOs: %s\n%s", c.Verdict, b.String())
	}
	if c := bench.Compare(base, slower, bySLO); c.Verdict != verdict.RollBack || !strings.Contains(strings.Join(c.Reasons, " "), "tpot_p90≤40ms no longer holds") {
		var b strings.Builder
		c.Write(&b)
		t.Errorf("TPOT past its SLO: %s\n%s", c.Verdict, b.String())
	}
}

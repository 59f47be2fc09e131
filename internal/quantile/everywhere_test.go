package quantile_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/mirror/ab"
	"github.com/infergate/infergate/tracing"
	"github.com/infergate/infergate/verdict"
)

// TestSamePercentilesEverywhere: the same TTFTs give the same p50, p90
// and p99 in a bench record, in compare, in ab report and in the
// gateway's /admin/stats, because all four print through package
// quantile.
func TestSamePercentilesEverywhere(t *testing.T) {
	for _, n := range []int{10, 100, 1000} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		vals := make([]time.Duration, n) // whole microseconds: every path converts them exactly
		ms := make([]float64, n)
		for i := range vals {
			vals[i] = time.Duration(1000+rng.IntN(500000)) * time.Microsecond
			ms[i] = float64(vals[i].Microseconds()) / 1000
		}
		want := quantile.ThreeOf(ms)

		// bench: a stage's record.
		col := bench.NewCollector()
		start := time.Unix(1000, 0)
		col.Begin(0, start)
		for i, v := range vals {
			col.Add(&bench.Result{Index: i, Sent: start.Add(time.Duration(i) * time.Millisecond), Status: 200, TTFT: v, LastToken: v + time.Millisecond,
				End: v + 2*time.Millisecond, OutputTokens: 2, UsageTokens: 2, ContentEvents: 2})
		}
		stage := col.Summarize(0, bench.LoadSpec{Mode: "closed", Concurrency: 1}, bench.Window{Start: start, Stop: start.Add(time.Duration(n) * time.Millisecond)}, nil)
		p := stage.Metrics["ttft"]
		got := map[string]quantile.Three{"bench": {N: int(p.N), P50: p.P50, P90: p.P90, P99: p.P99}}

		// compare: two such records.
		rec := &bench.Record{Stages: []*bench.Summary{stage}}
		for _, d := range bench.Compare(rec, rec, verdict.Options{}).Dists {
			if d.Metric == "ttft" {
				got["compare base"], got["compare new"] = d.Base, d.New
			}
		}

		// ab report: pairs whose primary had these TTFTs.
		pairs := make([]mirror.Pair, n)
		for i := range pairs {
			a := mirror.Arm{Status: 200, TTFTms: ms[i], E2Ems: ms[i] + 1, TPOTms: 1, OutputTokens: 2}
			pairs[i] = mirror.Pair{ID: "x", Stream: true, Primary: a, Candidate: a}
		}
		got["ab report"] = ab.Compare(pairs, verdict.Options{}).Primary.TTFT

		// /admin/stats: the gateway's recent window.
		rc := tracing.NewRecent(time.Hour)
		now := time.Unix(5000, 0)
		for _, v := range vals {
			s := now.Add(-time.Minute)
			tl := tracing.Timeline{Received: s, Admitted: s, UpstreamStart: s, Connected: s, Sent: s, FirstTokenIn: s.Add(v), FirstTokenOut: s.Add(v),
				LastTokenIn: s.Add(v + time.Millisecond), Done: s.Add(v + time.Millisecond), OutputTokens: 2}
			rc.Add(&tl, "m", "b", true)
		}
		if q := rc.Snapshot(now).All.TTFT; q != nil {
			got["/admin/stats"] = *q
		}

		for where, g := range got {
			if g.Text("%.3f") != want.Text("%.3f") || g.N != n {
				t.Errorf("n=%d: %s gives %s (n %d), want %s", n, where, g.Text("%.3f"), g.N, want.Text("%.3f"))
			}
		}
		if len(got) != 5 {
			t.Errorf("n=%d: only %d of the five places gave figures: %v", n, len(got), got)
		}
	}
}

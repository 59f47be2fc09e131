package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/verdict"
)

func runAgainst(t *testing.T, ttft time.Duration) *Record {
	t.Helper()
	url := startSim(t, ttft, 5*time.Millisecond)
	cfg := baseConfig(url)
	cfg.Workload.OutputTokens = "10"
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 4, Requests: 80, WarmupRequests: 4}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestComparePlantedRegression(t *testing.T) {
	base := runAgainst(t, 50*time.Millisecond)
	worse := runAgainst(t, 60*time.Millisecond) // +20% TTFT
	same := runAgainst(t, 50*time.Millisecond)

	c := Compare(base, worse, verdict.Options{})
	if c.Verdict != verdict.RollBack || verdict.ExitCode(c.Verdict) != 1 {
		var b strings.Builder
		c.Write(&b)
		t.Fatalf("20%% slower TTFT: verdict %s, want ROLL BACK\n%s", c.Verdict, b.String())
	}
	if !strings.Contains(strings.Join(c.Reasons, ";"), "ttft") {
		t.Errorf("reasons %v do not name ttft", c.Reasons)
	}
	c = Compare(base, same, verdict.Options{})
	if c.Verdict == verdict.RollBack {
		var b strings.Builder
		c.Write(&b)
		t.Fatalf("identical runs judged ROLL BACK\n%s", b.String())
	}
	if c.Verdict == verdict.Inconclusive && c.Need <= 80 {
		t.Errorf("INCONCLUSIVE but says %d requests would settle it, no more than it had", c.Need)
	}
}

func TestCompareQualityRegression(t *testing.T) {
	t.Parallel()
	mk := func(failed, refusals int) *Record {
		s := &Summary{Requests: 400, OK: 400 - failed, Failed: failed, Quality: QualityCounts{Refusal: refusals}, Samples: map[string][]float64{}}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 400 {
			s.Samples["ttft"] = append(s.Samples["ttft"], 50+rng.NormFloat64())
		}
		return &Record{Schema: schema, Stages: []*Summary{s}, Conditions: Conditions{Load: LoadSpec{Mode: "closed"}}}
	}
	c := Compare(mk(0, 0), mk(0, 40), verdict.Options{})
	if c.Verdict != verdict.RollBack || !strings.Contains(strings.Join(c.Reasons, ";"), "refusal_rate") {
		t.Errorf("refusals 0%% → 10%%: verdict %s %v, want ROLL BACK naming refusal_rate", c.Verdict, c.Reasons)
	}
	c = Compare(mk(0, 0), mk(0, 0), verdict.Options{})
	if c.Verdict != verdict.Keep {
		var b strings.Builder
		c.Write(&b)
		t.Errorf("same speed, no failures, n=400: verdict %s, want KEEP\n%s", c.Verdict, b.String())
	}
}

func TestDifferencesRefuseOtherConditions(t *testing.T) {
	t.Parallel()
	a := Conditions{Workload: WorkloadSpec{Endpoint: "chat", InputTokens: "256", OutputTokens: "128"}, Load: LoadSpec{Mode: "closed", Concurrency: 8}}
	b := a
	b.URL, b.Host = "http://other", "elsewhere" // what a comparison is for
	// Two fresh seeds are two samples of one workload; the cache state
	// is judged by what the server held (CacheDifferences).
	b.Workload.Seed, b.Workload.Salt, b.Cache = 99, "[run 63] ", CacheWarm
	if d := Differences(&a, &b); len(d) != 0 {
		t.Errorf("URL, host, seed and cache mode differ only, got %v", d)
	}
	b.Load.Concurrency, b.Workload.InputTokens = 16, "512"
	d := Differences(&a, &b)
	if len(d) != 2 || !strings.Contains(strings.Join(d, ";"), "load.concurrency: 8 ≠ 16") || !strings.Contains(strings.Join(d, ";"), "workload.input_tokens") {
		t.Errorf("differences %v, want concurrency and input tokens", d)
	}
}

func TestKnee(t *testing.T) {
	t.Parallel()
	stages := []*Summary{{OutputTokenThroughput: 100}, {OutputTokenThroughput: 190}, {OutputTokenThroughput: 350}, {OutputTokenThroughput: 380}, {OutputTokenThroughput: 385}}
	if k := knee(stages); k != 2 {
		t.Errorf("knee at %d, want 2 (350 ≥ 90%% of 385)", k)
	}
	// Throughput doubling with every level to the last: it never
	// flattened, so there is no knee within these levels, and the record
	// says so rather than marking the last level.
	rising := []*Summary{{Level: 1, OutputTokenThroughput: 40}, {Level: 2, OutputTokenThroughput: 80}, {Level: 4, OutputTokenThroughput: 160}, {Level: 8, OutputTokenThroughput: 300}}
	r := &Record{Stages: rising, Knee: knee(rising)}
	if r.Knee != -1 || !strings.Contains(r.NoKnee(), "no knee within these levels") || !strings.Contains(r.NoKnee(), "+88% over level 4") {
		t.Errorf("rising sweep: knee %d, %q", r.Knee, r.NoKnee())
	}
	var out strings.Builder
	r.writeSweep(&out)
	if strings.Contains(out.String(), "← knee") || !strings.Contains(out.String(), "no knee within these levels") {
		t.Errorf("rising sweep's table:\n%s", out.String())
	}
	// Flattened just: the last level added 10% (< 1/0.9): the knee is
	// the level before it.
	flat := []*Summary{{OutputTokenThroughput: 40}, {OutputTokenThroughput: 80}, {OutputTokenThroughput: 300}, {OutputTokenThroughput: 330}}
	if k := knee(flat); k != 2 {
		t.Errorf("flattened sweep: knee %d, want 2 (300 ≥ 90%% of 330, a level beyond it)", k)
	}
	if r := (&Record{Stages: flat, Knee: 2}); r.NoKnee() != "" {
		t.Errorf("a sweep with a knee: %q", r.NoKnee())
	}
}

func TestJournal(t *testing.T) {
	t.Parallel()
	c := &Comparison{Base: "a.json", New: "b.json", Result: verdict.Result{Verdict: verdict.Keep}, Changes: []verdict.Change{{Metric: "ttft", Delta: 0.01, CILow: math.NaN(), P: math.NaN()}}}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	for range 2 {
		if err := c.AppendJournal(path, "kv cache 0.9"); err != nil {
			t.Fatal(err)
		}
	}
	lines := readLines(t, path)
	if len(lines) != 2 || !strings.Contains(lines[1], `"change":"kv cache 0.9"`) || !strings.Contains(lines[1], `"verdict":"KEEP"`) {
		t.Errorf("journal %q", lines)
	}
}

// In open loop at one rate goodput judges and attainment guards it: an
// attainment too close to call does not hold back a goodput gain that
// settled, and an attainment that fell beyond doubt rolls it back.
func TestOpenLoopAttainmentGuardsGoodput(t *testing.T) {
	t.Parallel()
	run := func(requests, ok, met int, window float64) *Summary {
		s := &Summary{Requests: requests, OK: ok, Window: window, PerRequest: map[string][]float64{}}
		for i := range ok {
			ttft := 3000.0
			if i < met {
				ttft = 500
			}
			s.PerRequest["ttft"] = append(s.PerRequest["ttft"], ttft)
			s.PerRequest["e2e"] = append(s.PerRequest["e2e"], ttft+100)
		}
		return s
	}
	o := verdict.Options{Objective: verdict.Objective{SLOs: []verdict.SLO{{Metric: "ttft", MaxMs: 2000}}}}
	o.Defaults()
	// What CI's tune run measured: a queue deadline shed 56 of 194
	// requests; 96 → 99 met, in 13.5 s → 10.2 s.
	base := run(194, 194, 96, 13.5)
	for _, c := range []struct {
		name string
		next *Summary
		want string
	}{
		{"attainment unsettled", run(194, 138, 99, 10.2), verdict.Keep},
		{"attainment fell", run(194, 120, 70, 7), verdict.RollBack},
	} {
		changes := sloChanges(0, base, c.next, o, true)
		r := verdict.Decide(changes, o)
		if r.Verdict != c.want || changes[1].CILow <= 0 {
			t.Errorf("%s: %s (goodput %s), want %s with goodput up: %q", c.name, r.Verdict, verdict.FormatDelta(changes[1]), c.want, r.Reasons)
		}
		// In closed loop attainment judges alone: unsettled is unsettled.
		if r := verdict.Decide(sloChanges(0, base, c.next, o, false), o); c.want == verdict.Keep && r.Verdict != verdict.Inconclusive {
			t.Errorf("%s, closed loop: %s, want INCONCLUSIVE: %q", c.name, r.Verdict, r.Reasons)
		}
	}
}

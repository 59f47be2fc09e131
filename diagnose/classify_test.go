package diagnose

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/htmlcheck"
	"github.com/infergate/infergate/internal/promtext"
)

// series builds n one-second readings with f setting each.
func series(n int, f func(i int, r *engine.Reading)) []engine.Reading {
	nan := math.NaN()
	rs := make([]engine.Reading, n)
	for i := range rs {
		rs[i] = engine.Reading{At: time.Unix(int64(i), 0), Server: engine.VLLM, Running: nan, Waiting: nan, KVUsage: nan,
			Preemptions: nan, Retracting: nan, MaxRunning: nan, KVTokens: nan, PromptTokens: nan, OutputTokens: nan}
		f(i, &rs[i])
	}
	return rs
}

func flat(n int, v float64) []float64 {
	u := make([]float64, n)
	for i := range u {
		u[i] = v
	}
	return u
}

func gateway(n int, f func(i int, g *GatewayReading)) *Gateway {
	rs := make([]GatewayReading, n)
	for i := range rs {
		rs[i].At = time.Unix(int64(i), 0)
		f(i, &rs[i])
	}
	g := SummariseGateway(rs)
	return &g
}

func TestDiagnose(t *testing.T) {
	const n = 10
	for _, tc := range []struct {
		name, want, confidence string
		backend                []engine.Reading
		util                   []float64
		gw                     *Gateway
	}{
		{"memory", Memory, "high", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = 20, 12, 0.97, float64(3*i)
			r.MaxRunning, r.PromptTokens, r.OutputTokens = 128, float64(5000*i), float64(400*i)
		}), flat(n, 70), nil},
		{"batching", Batching, "high", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = 4, float64(5+3*i), 0.08, 0
			r.PromptTokens, r.OutputTokens = float64(1000*i), float64(500*i)
		}), flat(n, 25), nil},
		{"compute", Compute, "high", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions, r.MaxRunning = 200, 40, 0.55, 0, 256
		}), flat(n, 97), nil},
		{"scheduling", Scheduling, "high", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = 2, 0, 0.03, 0
		}), flat(n, 12), gateway(n, func(i int, g *GatewayReading) {
			g.Queued, g.InFlight, g.Limit, g.Requests = 14, 2, 2, float64(4*i)
			g.QueueWait = promtext.Hist{Sum: float64(i) * 4 * 1.5, Count: float64(4 * i)}
		})},
		{"sparse", None, "high", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = float64(i%3)/4, 0, 0.01, 0
		}), flat(n, 3), gateway(n, func(i int, g *GatewayReading) {})},
		{"fits", None, "", series(n, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = 30, 0, 0.4, 0
		}), flat(n, 50), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Summarise("sim", tc.backend, tc.util)
			rep := Diagnose(Input{Backends: []Backend{b}, Gateway: tc.gw})
			if rep.Bottleneck != tc.want {
				var sb strings.Builder
				rep.Write(&sb)
				t.Fatalf("bottleneck %s, want %s\n%s", rep.Bottleneck, tc.want, sb.String())
			}
			if tc.confidence != "" && rep.Confidence != tc.confidence {
				t.Errorf("confidence %s (score %.2f), want %s", rep.Confidence, rep.Score, tc.confidence)
			}
			if len(rep.Knobs) == 0 || rep.Summary == "" {
				t.Fatalf("no knob or summary: %+v", rep)
			}
			held := 0
			for _, f := range rep.Evidence {
				if f.Holds {
					held++
				}
			}
			if held == 0 {
				t.Fatalf("a verdict without evidence: %+v", rep.Evidence)
			}
		})
	}
}

func TestDiagnoseMemoryKnobsAndCap(t *testing.T) {
	b := Summarise("sim", series(10, func(i int, r *engine.Reading) {
		r.Running, r.Waiting, r.KVUsage, r.Preemptions = 20, 12, 0.97, float64(3*i)
		r.PromptTokens, r.OutputTokens = float64(300*i), float64(400*i)
	}), nil)
	rep := Diagnose(Input{Backends: []Backend{b}})
	if rep.CapAt != 18 {
		t.Errorf("cap at %d, want 90%% of the 20 the full cache held", rep.CapAt)
	}
	if rep.Knobs[0].Knob != "concurrency cap" || !strings.Contains(rep.Knobs[0].Action, "--max-concurrency 18") {
		t.Errorf("first knob %+v, want a concurrency cap at 18", rep.Knobs[0])
	}
	var order []string
	for _, k := range rep.Knobs {
		order = append(order, k.Knob)
	}
	if got := strings.Join(order, ", "); got != "concurrency cap, quantization, KV-cache share, context and output caps, parallelism" {
		t.Errorf("knobs in order %s", got)
	}
	if !strings.Contains(rep.Knobs[1].Skip, "structured output") {
		t.Errorf("quantization without its warning: %+v", rep.Knobs[1])
	}
	if rep.Load != "decode-bound" {
		t.Errorf("load %s, want decode-bound", rep.Load)
	}
}

// TestDiagnoseSweepCap takes the cap from the sweep: the last level
// before preemptions began.
func TestDiagnoseSweepCap(t *testing.T) {
	mk := func(c, tok, speed, pre float64) SweepPoint {
		b := Summarise("sim", series(5, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = c, 0, math.Min(0.99, c/24), pre*float64(i)
		}), nil)
		return SweepPoint{Concurrency: c, OutputTokPerS: Num(tok), PerRequestTokPerS: Num(speed), Backends: []Backend{b}}
	}
	sweep := []SweepPoint{mk(4, 400, 100, 0), mk(8, 780, 97, 0), mk(16, 1400, 88, 0), mk(32, 1300, 40, 2), mk(64, 1250, 20, 6)}
	last := sweep[len(sweep)-1]
	rep := Diagnose(Input{Backends: last.Backends, Sweep: sweep})
	if rep.Bottleneck != Memory || rep.CapAt != 16 {
		t.Fatalf("bottleneck %s cap %d, want memory at 16", rep.Bottleneck, rep.CapAt)
	}
	found := false
	for _, f := range rep.Evidence {
		found = found || (f.Signal == "speed_falls_with_load" && f.Holds)
	}
	if !found {
		t.Errorf("the sweep's falling speed is not in the evidence: %+v", rep.Evidence)
	}
}

// TestDiagnoseAmbiguous: a queue without GPU or KV figures (TGI without
// DCGM) is named with low confidence, saying what would settle it.
func TestDiagnoseAmbiguous(t *testing.T) {
	rs := series(10, func(i int, r *engine.Reading) { r.Server, r.Running, r.Waiting = engine.TGI, 8, 20 })
	rep := Diagnose(Input{Backends: []Backend{Summarise("tgi", rs, nil)}})
	if rep.Confidence != "low" {
		t.Fatalf("confidence %s for %s, want low", rep.Confidence, rep.Bottleneck)
	}
	found := false
	for _, f := range rep.Evidence {
		found = found || strings.Contains(f.Detail, "--dcgm")
	}
	if !found {
		t.Errorf("no hint of what would settle it: %+v", rep.Evidence)
	}
}

func TestNumJSON(t *testing.T) {
	for _, tc := range []struct {
		n    Num
		want string
	}{{Num(math.NaN()), "null"}, {Num(math.Inf(1)), "null"}, {1.23456789, "1.2346"}, {0, "0"}} {
		b, _ := tc.n.MarshalJSON()
		if string(b) != tc.want {
			t.Errorf("%v → %s, want %s", tc.n, b, tc.want)
		}
	}
}

// TestReportHTML renders a diagnosis with a sweep in a real browser: the
// page must draw its charts and log no error.
func TestReportHTML(t *testing.T) {
	mk := func(c, tok, speed, pre float64) SweepPoint {
		b := Summarise("sim", series(5, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = c, 0, math.Min(0.99, c/24), pre*float64(i)
		}), nil)
		return SweepPoint{Concurrency: c, OutputTokPerS: Num(tok), PerRequestTokPerS: Num(speed), TTFTp50: Num(c * 20), Backends: []Backend{b}}
	}
	sweep := []SweepPoint{mk(4, 400, 100, 0), mk(16, 1400, 88, 0), mk(64, 1250, 20, 6)}
	rep := Diagnose(Input{Backends: sweep[2].Backends, Sweep: sweep})
	path := filepath.Join(t.TempDir(), "diagnose.html")
	var b strings.Builder
	if err := rep.WriteHTML(&b, "diagnose <test>"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"bottleneck: memory", "diagnose &lt;test&gt;", "kv_cache_full", "concurrency cap", "<svg"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	htmlcheck.Check(t, path, "#0072B2")
}

// TestDiagnosePerBackend: one replica out of memory among two idle ones
// is named on its own line, whatever the sum says.
func TestDiagnosePerBackend(t *testing.T) {
	idle := func(name string) Backend {
		return Summarise(name, series(10, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = 1, 0, 0.05, 0
		}), flat(10, 10))
	}
	sick := Summarise("gpu-c", series(10, func(i int, r *engine.Reading) {
		r.Running, r.Waiting, r.KVUsage, r.Preemptions = 20, 12, 0.97, float64(3*i)
	}), flat(10, 70))
	rep := Diagnose(Input{Backends: []Backend{idle("gpu-a"), idle("gpu-b"), sick}})
	if len(rep.PerBackend) != 3 {
		t.Fatalf("%d per-backend verdicts, want 3", len(rep.PerBackend))
	}
	for _, b := range rep.PerBackend {
		want := None
		if b.Name == "gpu-c" {
			want = Memory
		}
		if b.Bottleneck != want {
			t.Errorf("%s: %s, want %s", b.Name, b.Bottleneck, want)
		}
	}
	var sb strings.Builder
	rep.Write(&sb)
	if !strings.Contains(sb.String(), "each backend on its own") {
		t.Errorf("the report does not list the backends' verdicts:\n%s", sb.String())
	}
	if one := Diagnose(Input{Backends: []Backend{sick}}); one.PerBackend != nil {
		t.Error("a single backend got a per-backend list")
	}
}

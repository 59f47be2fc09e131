package diagnose

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/engine"
)

// sweepOf builds a sweep from its steps' figures: concurrency, output
// tokens/s, per-request tokens/s, and the backend's running, waiting,
// KV usage, GPU utilisation and preemptions/s meanwhile.
func sweepOf(steps [][8]float64) []SweepPoint {
	var out []SweepPoint
	for _, st := range steps {
		b := Summarise("sim", series(5, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = st[3], st[4], st[5], st[7]*float64(i)
		}), flat(5, st[6]))
		out = append(out, SweepPoint{Concurrency: st[0], OutputTokPerS: Num(st[1]), PerRequestTokPerS: Num(st[2]), Backends: []Backend{b}})
	}
	return out
}

// TestDiagnoseSweepSaturated: a sweep whose heaviest step has nothing
// queued and nothing preempted, but the GPU (or the KV cache) at 98% and
// each request at 43% of the lightest step's speed, is at a limit: it
// was called NONE with high confidence (simulator, diagnose --sweep
// 1,8,32,64).
func TestDiagnoseSweepSaturated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps [][8]float64
		want  string
	}{
		// The GPU pinned: compute.
		{"gpu pinned", [][8]float64{
			{1, 110, 115, 1, 0, 0.01, 30, 0}, {8, 610, 87, 7.8, 0, 0.02, 70, 0},
			{32, 1500, 58, 31, 0, 0.08, 92, 0}, {64, 2300, 49.5, 60, 0.3, 0.17, 98, 0}}, Compute},
		// The KV cache at 98% with no preemption yet: memory.
		{"kv cache full", [][8]float64{
			{1, 110, 115, 1, 0, 0.02, 30, 0}, {8, 610, 87, 7.8, 0, 0.2, 40, 0},
			{32, 1500, 58, 31, 0, 0.7, 50, 0}, {64, 2300, 49.5, 60, 0.2, 0.98, 55, 0}}, Memory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sw := sweepOf(tc.steps)
			rep := Diagnose(Input{Backends: sw[len(sw)-1].Backends, Sweep: sw})
			var sb strings.Builder
			rep.Write(&sb)
			if rep.Bottleneck != tc.want {
				t.Fatalf("bottleneck %s (%s), want %s\n%s", rep.Bottleneck, rep.Confidence, tc.want, sb.String())
			}
			// Throughput still grows at every step: no knee below the
			// heaviest step, so the cap is proposed there.
			if rep.CapAt != 64 {
				t.Errorf("cap at %d, want 64 (no knee in the sweep)", rep.CapAt)
			}
			if !strings.Contains(rep.Summary, "43%") && !strings.Contains(rep.Summary, "98%") {
				t.Errorf("the summary names neither the speed kept nor the full gauge: %s", rep.Summary)
			}
		})
	}
}

// TestDiagnoseNoneAtTheEdge: without a sweep, a window where nothing
// queues but the cache is 98% full is not called a confident NONE.
func TestDiagnoseNoneAtTheEdge(t *testing.T) {
	t.Parallel()
	b := Summarise("sim", series(10, func(i int, r *engine.Reading) {
		r.Running, r.Waiting, r.KVUsage, r.Preemptions = 60, 0, 0.98, 0
	}), flat(10, 50))
	rep := Diagnose(Input{Backends: []Backend{b}})
	if rep.Bottleneck == None && rep.Confidence == "high" {
		t.Fatalf("NONE with high confidence at 98%% KV: %s", rep.Summary)
	}
	if !strings.Contains(rep.Summary, "98%") {
		t.Errorf("the summary does not name the full cache: %s", rep.Summary)
	}
}

// llama builds n readings of a llama.cpp server with slots slots, busy of
// them busy and deferred requests waiting; no KV usage, as current
// servers report none.
func llama(n int, slots, busy, deferred float64) []engine.Reading {
	rs := make([]engine.Reading, n)
	for i := range rs {
		r := engine.NewReading(time.Unix(int64(i), 0), engine.LlamaCpp)
		r.Running, r.Waiting, r.Slots, r.SlotContext = busy, deferred, slots, 2048
		r.PromptTokens, r.OutputTokens = float64(300*i), float64(40*busy*float64(i))
		r.Decodes, r.BusySlotDecodes = float64(40*i), float64(40*i)*busy
		rs[i] = r
	}
	return rs
}

// TestDiagnoseLlamaCppSlots: llama.cpp's slot count is its batch bound;
// every slot busy with requests deferred is a slot limit, and the
// proposal is llama-server's -np and -c, not a gateway cap of 1.
func TestDiagnoseLlamaCppSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		slots, busy, deferred float64
		util                  float64
		want                  string
	}{
		{"np 1, 8 clients", 1, 1, 7, math.NaN(), Batching},
		{"np 4, 16 clients", 4, 4, 12, math.NaN(), Batching},
		{"np 4, 1 client", 4, 1, 0, math.NaN(), None},
		// The GPU known to be pinned: more slots would not help.
		{"np 4, 16 clients, GPU pinned", 4, 4, 12, 97, Compute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := Summarise("llama", llama(10, tc.slots, tc.busy, tc.deferred), flat(10, tc.util))
			rep := Diagnose(Input{Backends: []Backend{b}})
			var sb strings.Builder
			rep.Write(&sb)
			text := sb.String()
			if rep.Bottleneck != tc.want {
				t.Fatalf("bottleneck %s, want %s\n%s", rep.Bottleneck, tc.want, text)
			}
			if strings.Contains(text, "NaN") {
				t.Errorf("NaN in the report:\n%s", text)
			}
			if tc.want != Batching {
				return
			}
			if rep.Confidence != "medium" {
				t.Errorf("confidence %s without any hardware figure, want medium", rep.Confidence)
			}
			if k := rep.Knobs[0]; !strings.Contains(k.Action, "-np/--parallel") || !strings.Contains(k.Action, "-c ") {
				t.Errorf("first knob %+v does not name -np and -c", k)
			}
			if strings.Contains(text, "--max-concurrency") {
				t.Errorf("a gateway cap proposed for a slot limit:\n%s", text)
			}
			if rep.CapAt != 0 {
				t.Errorf("cap at %d for a slot limit", rep.CapAt)
			}
		})
	}
}

// TestReportNeverNaN: whatever is unknown, no output prints NaN.
func TestReportNeverNaN(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	empty := Summarise("down", nil, nil)
	unknown := Summarise("odd", series(5, func(i int, r *engine.Reading) { r.Server = engine.Unknown }), nil)
	gw := gateway(5, func(i int, g *GatewayReading) { g.Queued, g.InFlight, g.Limit = 3, 1, 1 })
	sw := []SweepPoint{{Concurrency: 1, OutputTokPerS: Num(nan), PerRequestTokPerS: Num(nan), TTFTp50: Num(nan), TTFTp90: Num(nan), RequestsPerS: Num(nan)},
		{Concurrency: 8, OutputTokPerS: 0, PerRequestTokPerS: Num(math.Inf(1)), TTFTp50: Num(nan), TTFTp90: Num(nan), RequestsPerS: Num(nan), Backends: []Backend{empty}}}
	for _, in := range []Input{
		{},
		{Backends: []Backend{empty}},
		{Backends: []Backend{unknown}, Gateway: gw},
		{Backends: []Backend{empty, unknown}, Gateway: gw, Sweep: sw},
		{Backends: []Backend{Summarise("llama", llama(5, 1, 1, 7), nil)}, Gateway: gw},
	} {
		noNaN(t, Diagnose(in))
	}
}

func noNaN(t *testing.T, rep Report) {
	t.Helper()
	var text, page strings.Builder
	rep.Write(&text)
	if err := rep.WriteHTML(&page, "t"); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for name, out := range map[string]string{"text": text.String(), "HTML": page.String(), "JSON": string(j)} {
		if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
			t.Errorf("%s output prints NaN or Inf:\n%s", name, out)
		}
	}
}

// FuzzDiagnoseNaN: any mix of known and unknown figures gives a report
// without NaN, and no panic.
func FuzzDiagnoseNaN(f *testing.F) {
	f.Add(1.0, 7.0, -1.0, -1.0, 1.0, 0.0, -1.0, 0.5)
	f.Add(60.0, 0.0, 0.98, 98.0, -1.0, -1.0, 3.0, -1.0)
	f.Fuzz(func(t *testing.T, running, waiting, kv, util, slots, preempt, gwQueued, speed float64) {
		or := func(v float64) float64 {
			if v < 0 {
				return math.NaN()
			}
			return v
		}
		rs := series(4, func(i int, r *engine.Reading) {
			r.Running, r.Waiting, r.KVUsage, r.Preemptions = or(running), or(waiting), or(kv), or(preempt)*float64(i)
			if or(slots) > 0 {
				r.Server, r.Slots = engine.LlamaCpp, slots
			}
		})
		b := Summarise("b", rs, flat(4, or(util)))
		in := Input{Backends: []Backend{b}}
		if !math.IsNaN(or(gwQueued)) {
			in.Gateway = gateway(4, func(i int, g *GatewayReading) { g.Queued = gwQueued })
		}
		if !math.IsNaN(or(speed)) {
			in.Sweep = []SweepPoint{{Concurrency: 1, PerRequestTokPerS: 100, OutputTokPerS: 100}, {Concurrency: 8, PerRequestTokPerS: Num(100 * speed), OutputTokPerS: Num(400), Backends: []Backend{b}}}
		}
		noNaN(t, Diagnose(in))
	})
}

package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

func stageOf(level, thr, ttft float64) *Summary {
	return &Summary{Level: level, Requests: 10, OutputTokenThroughput: thr, Metrics: map[string]*Percentiles{"ttft": {N: 10, P50: ttft}}}
}

func TestOverSaturated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stages []*Summary
		stop   bool
	}{
		{"still gaining", []*Summary{stageOf(1, 100, 20), stageOf(2, 190, 25), stageOf(4, 350, 40)}, false},
		{"flat, TTFT steady (a plateau that does not queue)", []*Summary{stageOf(1, 100, 20), stageOf(2, 101, 21), stageOf(4, 102, 22)}, false},
		{"flat, TTFT growing", []*Summary{stageOf(1, 100, 20), stageOf(2, 180, 60), stageOf(4, 185, 200)}, true},
		{"fell, TTFT growing", []*Summary{stageOf(1, 100, 20), stageOf(2, 180, 60), stageOf(4, 120, 900)}, true},
		{"gaining 10%, TTFT growing", []*Summary{stageOf(1, 100, 20), stageOf(2, 180, 60), stageOf(4, 198, 200)}, false},
		{"two stages", []*Summary{stageOf(1, 100, 20), stageOf(2, 100, 200)}, false},
	} {
		if stop, why := overSaturated(tc.stages); stop != tc.stop || stop && !strings.Contains(why, "flat") {
			t.Errorf("%s: stop %v (%s), want %v", tc.name, stop, why, tc.stop)
		}
	}
	failing := []*Summary{stageOf(1, 100, 20)}
	failing[0].Failed = 6
	if stop, why := overSaturated(failing); !stop || !strings.Contains(why, "failed 6 of 10") {
		t.Errorf("a failing stage: %v %s", stop, why)
	}
}

// TestSweepStopsPastTheKnee: a rate sweep against the compute-bound sim
// stops itself once throughput is flat and TTFT grows, says why, and
// does not run the levels beyond.
func TestSweepStopsPastTheKnee(t *testing.T) {
	t.Parallel()
	cfg, err := sim.Preset("compute-bound")
	if err != nil {
		t.Fatal(err)
	}
	// The simulator runs in real time: a CPU starved enough lowers its
	// ceiling, and the sweep stops early (before the fourth level, or on
	// a level's failed requests). Such a sweep is made once more on a
	// fresh simulator, and the second must hold; a sweep that never stops
	// fails at once.
	var (
		c   Config
		rec *Record
		n   int
	)
	for attempt := 1; ; attempt++ {
		url := simtest.Start(t, cfg).URL
		c = baseConfig(url)
		c.Workload.InputTokens, c.Workload.OutputTokens = "32", "4"
		c.Load = LoadSpec{Mode: "open", Rate: 20, Arrival: "constant", Duration: 500 * time.Millisecond}
		c.Sweep = []float64{20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240}
		var err error
		rec, err = Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		n = len(rec.Stages)
		early := rec.StopReason != "" && (n < 4 || !strings.Contains(rec.StopReason, "over-saturated"))
		if !early || attempt == 2 {
			break
		}
		t.Logf("stopped early after %d stages (a starved run?): %s; once more", n, rec.StopReason)
	}
	if rec.StopReason == "" || n >= len(c.Sweep) || n < 4 || !strings.Contains(rec.StopReason, "over-saturated") {
		t.Fatalf("%d of %d stages ran; stop reason %q", n, len(c.Sweep), rec.StopReason)
	}
	last := rec.Stages[n-1]
	if rec.Knee < 0 || rec.Knee >= n || last.Metrics["ttft"].P50 < 2*rec.Stages[0].Metrics["ttft"].P50 {
		t.Errorf("knee %d; TTFT p50 %.1f ms at the last stage, %.1f at the first", rec.Knee, last.Metrics["ttft"].P50, rec.Stages[0].Metrics["ttft"].P50)
	}
	var b strings.Builder
	rec.WriteText(&b)
	if !strings.Contains(b.String(), "sweep stopped: over-saturated") {
		t.Errorf("the report does not say why the sweep stopped:\n%s", b.String())
	}
	t.Logf("stopped after %d stages: %s", n, rec.StopReason)
}

package engine

import (
	"bytes"
	"math"
	"os"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/promtext"
)

func scrapeFile(t *testing.T, name string) *promtext.Scrape {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := promtext.Parse(bytes.NewReader(b), time.Unix(1000, 0))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestReadServers reads each server's exposition, written from its
// documented metric names and format, into the common terms.
func TestReadServers(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		file, server                                        string
		running, waiting, kv, preempt, retracting, maxRun   float64
		kvTokens, prompt, output, ttftCount, queueSum, itlN float64
	}{
		{"vllm.txt", VLLM, 48, 17, 0.9712, 312, nan, nan, 29205 * 16, 1048576, 524288, 4096, 1024, 520192},
		{"vllm_old.txt", VLLM, 4, 0, 0.052, 0, nan, nan, nan, nan, nan, 0, 0, 100},
		{"sglang.txt", SGLang, 162, 2826, 0.28, nan, 3, 4097, 161721, 8.128902e+06, 7.557572e+06, 11008, 0, 0},
		{"tgi.txt", TGI, 8, 5, nan, nan, nan, nan, nan, 32384, 64768, 0, 12.65, 253},
		// Current llama.cpp (captured from the server with -np 1 under 8
		// clients): no KV gauge; prompt tokens are the uncached and the
		// cached ones together.
		{"llamacpp.txt", LlamaCpp, 1, 6, nan, nan, nan, nan, nan, 49 + 0, 64, 0, 0, 0},
		// Older llama.cpp, with kv_cache_usage_ratio and no cached count.
		{"llamacpp_old.txt", LlamaCpp, 4, 9, 0.41, nan, nan, nan, nan, 4213, 9866, 0, 0, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := Read(scrapeFile(t, tc.file))
			if r.Server != tc.server {
				t.Fatalf("server %q, want %q", r.Server, tc.server)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{{"running", r.Running, tc.running}, {"waiting", r.Waiting, tc.waiting}, {"kv", r.KVUsage, tc.kv},
				{"preemptions", r.Preemptions, tc.preempt}, {"retracting", r.Retracting, tc.retracting},
				{"max running", r.MaxRunning, tc.maxRun}, {"kv tokens", r.KVTokens, tc.kvTokens},
				{"prompt", r.PromptTokens, tc.prompt}, {"output", r.OutputTokens, tc.output},
				{"ttft count", r.TTFT.Count, tc.ttftCount}, {"queue sum", r.Queue.Sum, tc.queueSum}, {"itl count", r.ITL.Count, tc.itlN}} {
				if math.IsNaN(c.want) != math.IsNaN(c.got) || (!math.IsNaN(c.want) && !near(c.got, c.want)) {
					t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// TestWaitingUncachedTokens reads SGLang's /v1/loads?format=prometheus:
// testdata/sglang_loads.txt is written as _format_loads_prometheus
// (python/sglang/srt/entrypoints/v1_loads.py) writes the core fields of
// LoadSnapshot.to_dict for two DP ranks: "# TYPE sglang_<field> gauge",
// then sglang_<field>{dp_rank="N"} value, no HELP lines. The ranks' waiting
// uncached tokens add up; /metrics (which lacks the gauge) reads NaN.
func TestWaitingUncachedTokens(t *testing.T) {
	if got := WaitingUncachedTokens(scrapeFile(t, "sglang_loads.txt")); got != 24576+425 {
		t.Errorf("sglang_loads.txt: waiting uncached tokens %v, want %v", got, 24576+425)
	}
	for _, f := range []string{"sglang.txt", "vllm.txt", "llamacpp.txt"} {
		if got := WaitingUncachedTokens(scrapeFile(t, f)); !math.IsNaN(got) {
			t.Errorf("%s: waiting uncached tokens %v, want NaN (not in /metrics)", f, got)
		}
	}
}

func TestSGLangLoadsPath(t *testing.T) {
	for in, want := range map[string]string{
		"/metrics":       "/v1/loads?include=core&format=prometheus",
		"/sg/metrics":    "/sg/v1/loads?include=core&format=prometheus",
		"/metrics?x=1":   "/v1/loads?x=1&include=core&format=prometheus",
		"/custom/scrape": "/v1/loads?include=core&format=prometheus",
	} {
		if got := SGLangLoadsPath(in); got != want {
			t.Errorf("SGLangLoadsPath(%q) = %q, want %q", in, got, want)
		}
	}
}

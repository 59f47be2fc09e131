package collect

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/diagnose"
)

func scrapeFile(t *testing.T, name string) *Scrape {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(bytes.NewReader(b), time.Unix(1000, 0))
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
		{"vllm.txt", diagnose.ServerVLLM, 48, 17, 0.9712, 312, nan, nan, 29205 * 16, 1048576, 524288, 4096, 1024, 520192},
		{"vllm_old.txt", diagnose.ServerVLLM, 4, 0, 0.052, 0, nan, nan, nan, nan, nan, 0, 0, 100},
		{"sglang.txt", diagnose.ServerSGLang, 162, 2826, 0.28, nan, 3, 4097, 161721, 8.128902e+06, 7.557572e+06, 11008, 0, 0},
		{"tgi.txt", diagnose.ServerTGI, 8, 5, nan, nan, nan, nan, nan, 32384, 64768, 0, 12.65, 253},
		// Current llama.cpp (captured from the server with -np 1 under 8
		// clients): no KV gauge; prompt tokens are the uncached and the
		// cached ones together.
		{"llamacpp.txt", diagnose.ServerLlamaCpp, 1, 6, nan, nan, nan, nan, nan, 49 + 0, 64, 0, 0, 0},
		// Older llama.cpp, with kv_cache_usage_ratio and no cached count.
		{"llamacpp_old.txt", diagnose.ServerLlamaCpp, 4, 9, 0.41, nan, nan, nan, nan, 4213, 9866, 0, 0, 0},
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

func TestGPUUtilAveragesGPUs(t *testing.T) {
	if u := GPUUtil(scrapeFile(t, "dcgm.txt")); u != 95 {
		t.Fatalf("GPU util %v, want the mean of 97 and 93", u)
	}
	if u := GPUUtil(scrapeFile(t, "vllm.txt")); !math.IsNaN(u) {
		t.Fatalf("GPU util %v from a server without DCGM, want unknown", u)
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	for _, in := range []string{"vllm:num_requests_running{ 3", "# TYPE x gauge\nx 1\n# TYPE x counter\n", "x{a=\"b\"} notanumber"} {
		if _, err := Parse(strings.NewReader(in), time.Now()); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

// FuzzParse holds that no exposition text panics the reader or the
// summaries built on it, and that what they report is a number or
// unknown, never infinite.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm.txt", "vllm_old.txt", "sglang.txt", "tgi.txt", "llamacpp.txt", "dcgm.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("vllm:num_requests_running NaN\nvllm:kv_cache_usage_perc +Inf\n"))
	f.Add([]byte("infergate_queue_depth 3\ninfergate_shaping_in_flight{level=\"global\",unit=\"requests\"} 4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		at := time.Unix(0, 0)
		s, err := Parse(bytes.NewReader(b), at)
		if err != nil {
			return
		}
		r := Read(s)
		r2 := r
		r2.At = at.Add(time.Second)
		w := diagnose.Summarise("b", []diagnose.Reading{r, r2, r2}, []float64{GPUUtil(s)})
		for _, v := range []diagnose.Num{w.Running.Mean, w.KVUsage.Max, w.PreemptionsPerS, w.OutputTokPerS, w.TTFT} {
			if math.IsInf(float64(v), 0) {
				t.Fatalf("infinite figure from %q", b)
			}
		}
		if g, ok := ReadGateway(s); ok {
			_ = diagnose.SummariseGateway([]diagnose.GatewayReading{g, g})
		}
		rep := diagnose.Diagnose(diagnose.Input{Backends: []diagnose.Backend{w}})
		if rep.Bottleneck == "" {
			t.Fatal("no verdict")
		}
	})
}

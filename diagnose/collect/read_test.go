package collect

import (
	"bytes"
	"math"
	"os"
	"testing"
	"time"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/promtext"
)

// engineData holds the servers' expositions engine's tests read; the
// fuzz target below starts from them too.
const engineData = "../../internal/engine/testdata/"

func scrapeFile(t *testing.T, path string) *promtext.Scrape {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := promtext.Parse(bytes.NewReader(b), time.Unix(1000, 0))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

func TestGPUUtilAveragesGPUs(t *testing.T) {
	t.Parallel()
	if u := GPUUtil(scrapeFile(t, "testdata/dcgm.txt")); u != 95 {
		t.Fatalf("GPU util %v, want the mean of 97 and 93", u)
	}
	if u := GPUUtil(scrapeFile(t, engineData+"vllm.txt")); !math.IsNaN(u) {
		t.Fatalf("GPU util %v from a server without DCGM, want unknown", u)
	}
}

// FuzzReadings holds that no exposition text panics the readers or the
// summaries built on them, and that what they report is a number or
// unknown, never infinite.
func FuzzReadings(f *testing.F) {
	for _, path := range []string{engineData + "vllm.txt", engineData + "vllm_old.txt", engineData + "sglang.txt",
		engineData + "tgi.txt", engineData + "llamacpp.txt", "testdata/dcgm.txt"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("vllm:num_requests_running NaN\nvllm:kv_cache_usage_perc +Inf\n"))
	f.Add([]byte("infergate_queue_depth 3\ninfergate_shaping_in_flight{level=\"global\",unit=\"requests\"} 4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		at := time.Unix(0, 0)
		s, err := promtext.Parse(bytes.NewReader(b), at)
		if err != nil {
			return
		}
		r := engine.Read(s)
		r2 := r
		r2.At = at.Add(time.Second)
		w := diagnose.Summarise("b", []engine.Reading{r, r2, r2}, []float64{GPUUtil(s)})
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

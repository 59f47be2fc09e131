package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/htmlcheck"
	"github.com/infergate/infergate/sim/simtest"
	"github.com/infergate/infergate/verdict"
)

// startSim runs a simulator in fixed mode (constant TTFT and ITL) on a
// loopback port.
func startSim(t *testing.T, ttft, itl time.Duration) string {
	return simtest.Start(t, simtest.Fixed(ttft, itl)).URL
}

func baseConfig(url string) Config {
	return Config{
		URL:      url,
		Workload: WorkloadSpec{Endpoint: "chat", Model: "sim-model", Stream: true, InputTokens: "64", OutputTokens: "20", ForceOutputLength: true, Seed: 1},
		Load:     LoadSpec{Mode: "closed", Concurrency: 4, Requests: 40, WarmupRequests: 4},
	}
}

func ptr(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func TestRunMatchesSimTimings(t *testing.T) {
	url := startSim(t, 50*time.Millisecond, 10*time.Millisecond)
	rec, err := Run(context.Background(), baseConfig(url))
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Stages[0]
	if s.Requests != 40 || s.OK != 40 || s.Warmup != 4 {
		t.Fatalf("requests %d ok %d warm-up %d, want 40, 40, 4 (errors %v)", s.Requests, s.OK, s.Warmup, s.ErrorSamples)
	}
	// The sim answers 50ms after the request and 10ms between tokens; a
	// client on this machine sees that plus a little.
	checks := []struct {
		metric   string
		lo, hi   float64
		quantile func(*Percentiles) float64
	}{
		// Upper bounds leave room for a CI machine busy with other tests.
		{"ttft", 49.5, 62, func(p *Percentiles) float64 { return p.P50 }},
		{"tpot", 9.5, 11.5, func(p *Percentiles) float64 { return p.P50 }},
		{"itl", 9.5, 11.5, func(p *Percentiles) float64 { return p.P50 }},
		{"e2e", 49.5 + 19*9.5, 62 + 19*11.5, func(p *Percentiles) float64 { return p.P50 }},
		{"output_tokens", 20, 20, func(p *Percentiles) float64 { return p.Min }},
		{"output_tokens", 20, 20, func(p *Percentiles) float64 { return p.Max }},
	}
	for _, c := range checks {
		p := s.Metrics[c.metric]
		if p == nil {
			t.Fatalf("no %s", c.metric)
		}
		if v := c.quantile(p); v < c.lo || v > c.hi {
			t.Errorf("%s = %.2f, want within [%v, %v] (configured ttft 50ms, itl 10ms)", c.metric, v, c.lo, c.hi)
		}
	}
	if n := s.Metrics["itl"].N; n != 40*19 {
		t.Errorf("itl has %d gaps, want 40 × 19 (warm-up left out)", n)
	}
	if s.UsageMissing != 0 || s.OutputTokens != 40*20 {
		t.Errorf("usage missing %d, output tokens %d; want 0 and 800", s.UsageMissing, s.OutputTokens)
	}
	if s.Metrics["ttft"].P99 != nil {
		t.Errorf("p99 shown for n=40: %v", ptr(s.Metrics["ttft"].P99))
	}
	if len(rec.Warnings) > 0 {
		t.Errorf("warnings %v", rec.Warnings)
	}
}

// scriptServer answers every request with the script: each step writes
// its text after its delay.
type step struct {
	after time.Duration
	text  string
}

func scriptServer(t *testing.T, steps []step) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, st := range steps {
			time.Sleep(st.after)
			io.WriteString(w, st.text)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func chunk(content string) string {
	return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", content)
}

const (
	roleChunk  = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	finalChunk = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	usageChunk = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\n"
	doneChunk  = "data: [DONE]\n\n"
)

func TestRoleChunkIsNotTTFTAndUsageDoesNotStretchE2E(t *testing.T) {
	// A gateway that sends the role chunk at once, content after 60ms, and
	// holds the usage chunk back for 150ms.
	url := scriptServer(t, []step{{0, roleChunk}, {60 * time.Millisecond, chunk("a")}, {10 * time.Millisecond, chunk("b")},
		{10 * time.Millisecond, chunk("c") + finalChunk}, {150 * time.Millisecond, usageChunk + doneChunk}})
	cfg := baseConfig(url)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 2, Requests: 6}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Stages[0]
	if s.OK != 6 {
		t.Fatalf("%d of 6 ok: %v", s.OK, s.ErrorSamples)
	}
	m := s.Metrics
	if v := m["first_event"].P50; v > 20 {
		t.Errorf("first_event %.1fms, want the role chunk's ~0ms", v)
	}
	if v := m["ttft"].P50; v < 59 || v > 90 {
		t.Errorf("ttft %.1fms, want ~60ms: the role-only chunk must not count", v)
	}
	if v := m["e2e"].P50; v < 79 || v > 120 {
		t.Errorf("e2e %.1fms, want ~80ms: the late usage chunk must not stretch it", v)
	}
	if v := m["stream_end"].P50; v < 229 {
		t.Errorf("stream_end %.1fms, want ≥ 230ms (it includes usage and [DONE])", v)
	}
	if s.OutputTokens != 18 {
		t.Errorf("output tokens %d, want 6 × 3 from usage", s.OutputTokens)
	}
}

func TestOpenLoopShowsClientQueueing(t *testing.T) {
	// Capacity: one request in flight (client cap), 50ms each, so 20/s;
	// offered: 50/s. TTFT from the actual send stays ~50ms, the naive
	// figure; from the intended send it grows with the queue.
	url := scriptServer(t, []step{{50 * time.Millisecond, chunk("x") + finalChunk + usageChunk + doneChunk}})
	cfg := baseConfig(url)
	cfg.Load = LoadSpec{Mode: "open", Rate: 50, Arrival: "constant", MaxConcurrency: 1, Requests: 30}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Stages[0]
	if s.OK != 30 {
		t.Fatalf("%d of 30 ok: %v", s.OK, s.ErrorSamples)
	}
	naive, sched := s.Metrics["ttft"], s.Metrics["ttft_sched"]
	if naive.P50 > 80 {
		t.Errorf("ttft p50 %.1fms, want ~50ms", naive.P50)
	}
	// Request k waits k × (50 − 20)ms more than the one before: the last
	// ones wait most of a second.
	if sched.Max < 600 || sched.P50 < 5*naive.P50 {
		t.Errorf("ttft_sched p50 %.1f max %.1f ms, want growing far past ttft p50 %.1f", sched.P50, sched.Max, naive.P50)
	}
	xs := s.Samples["ttft_sched"]
	first, last := verdict.Median(xs[:10]), verdict.Median(xs[len(xs)-10:])
	if last < first+200 {
		t.Errorf("ttft_sched first third %.1fms, last third %.1fms: want it to grow", first, last)
	}
	// The cap lets 20/s leave of the 50/s requested, and the report says so.
	if s.AchievedRate > 25 || s.RequestedRate != 50 {
		t.Errorf("achieved %.1f of requested %.1f/s, want about 20 of 50", s.AchievedRate, s.RequestedRate)
	}
	if lag := s.Metrics["send_lag"]; lag == nil || lag.Max < 500 {
		t.Errorf("send lag %+v, want it to reach past 500ms", lag)
	}
}

func TestRunCountsErrorsByClass(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	n := 0
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		n++
		switch n % 4 {
		case 0:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		case 1:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chunk("a")) // no [DONE]
		case 2:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {not json\n\n")
		case 3:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chunk("a")+"data: {\"error\":{\"message\":\"boom\"}}\n\n"+doneChunk)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := baseConfig(srv.URL)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 1, Requests: 8}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"http_503": 2, ErrTruncated: 2, ErrMalformed: 2, ErrEvent: 2}
	if got := rec.Stages[0].Errors; !reflect.DeepEqual(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
}

func TestRecordRoundTrips(t *testing.T) {
	t.Parallel()
	url := startSim(t, 5*time.Millisecond, time.Millisecond)
	cfg := baseConfig(url)
	cfg.SLOs = []verdict.SLO{{Metric: "ttft", MaxMs: 1000}}
	cfg.Sweep = []float64{1, 2, 4}
	cfg.Load.Requests = 8
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Stages) != 3 || rec.Stages[2].Level != 4 {
		t.Fatalf("%d stages, want 3 at 1, 2, 4", len(rec.Stages))
	}
	path := filepath.Join(t.TempDir(), "run.json")
	if err := rec.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	// Times lose their monotonic reading in JSON; compare the rest.
	rec.Conditions.Start = back.Conditions.Start
	if !reflect.DeepEqual(rec, back) {
		t.Errorf("record changed through JSON")
	}
	if back.Stages[0].GoodputShare != 1 {
		t.Errorf("goodput share %v, want 1 for ttft ≤ 1s", back.Stages[0].GoodputShare)
	}
	var html strings.Builder
	if err := back.WriteHTML(&html); err != nil || strings.Count(html.String(), "<svg") < 3 || !strings.Contains(html.String(), "knee") ||
		strings.Contains(html.String(), "<script") || strings.Contains(html.String(), "http://cdn") || strings.Contains(html.String(), "https://") {
		t.Errorf("HTML report: err %v, %d bytes, want inline charts, the knee, no script and nothing fetched", err, html.Len())
	}
	if err := os.WriteFile(path, []byte(`{"schema":"other/v9"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRecord(path); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("a record of another schema: err %v", err)
	}
}

func TestCSVAndEventsStream(t *testing.T) {
	t.Parallel()
	url := startSim(t, 2*time.Millisecond, time.Millisecond)
	cfg := baseConfig(url)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 2, Requests: 5, WarmupRequests: 1}
	var csvOut, events strings.Builder
	cfg.CSV, cfg.Events = &csvOut, &events
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	if len(lines) != 1+6 || !strings.HasPrefix(lines[0], "stage,index,warmup,") {
		t.Fatalf("CSV has %d lines, want a header and 6 rows (one warm-up):\n%s", len(lines), csvOut.String())
	}
	ev := strings.Split(strings.TrimSpace(events.String()), "\n")
	if len(ev) != 6 || strings.Count(ev[0], ",") < 20 {
		t.Errorf("events: %d lines, want 6 with 20 event times each; first %s", len(ev), ev[0])
	}
}

func TestNonStreaming(t *testing.T) {
	url := startSim(t, 20*time.Millisecond, time.Millisecond)
	cfg := baseConfig(url)
	cfg.Workload.Stream = false
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 2, Requests: 10}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Stages[0]
	if s.OK != 10 || s.OutputTokens != 200 || s.UsageMissing != 0 {
		t.Fatalf("ok %d, output tokens %d, usage missing %d; want 10, 200, 0 (%v)", s.OK, s.OutputTokens, s.UsageMissing, s.ErrorSamples)
	}
	// The whole answer arrives at once: TTFT is its arrival, ~20ms + 19 × 1ms.
	if v := s.Metrics["ttft"].P50; v < 38 || v > 60 {
		t.Errorf("non-streaming ttft %.1fms, want ~39ms", v)
	}
	if s.Quality.Empty != 0 || s.Quality.FinishLength != 10 {
		t.Errorf("quality %+v, want no empty answer and 10 finish_reason length", s.Quality)
	}
}

func TestStreamsKeepTheirConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	peers := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			peers[r.RemoteAddr] = true
			mu.Unlock()
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, roleChunk+chunk("a")+chunk("b")+finalChunk+usageChunk+doneChunk)
	}))
	defer srv.Close()
	for _, stream := range []bool{true, false} {
		mu.Lock()
		clear(peers)
		mu.Unlock()
		cfg := baseConfig(srv.URL)
		cfg.Workload.Stream = stream
		cfg.Load = LoadSpec{Mode: "closed", Concurrency: 2, Requests: 30}
		rec, err := Run(context.Background(), cfg)
		var af *AllFailed
		switch {
		case !stream && errors.As(err, &af):
			// Every non-streamed request gets a stream back and fails
			// alike: the run stops after the first ones, and their
			// connections were still kept.
		case err != nil:
			t.Fatal(err)
		}
		mu.Lock()
		n := len(peers)
		mu.Unlock()
		if stream && rec.Stages[0].OK != 30 {
			t.Fatalf("stream=%v: %d of 30 ok: %v", stream, rec.Stages[0].OK, rec.Stages[0].ErrorSamples)
		}
		if n > 2 {
			t.Errorf("stream=%v: 30 requests by 2 users opened %d connections, want 2 (keep-alive)", stream, n)
		}
	}
}

func TestLargeResponseHeaders(t *testing.T) {
	t.Parallel()
	// Providers behind CDNs send kilobytes of headers; the small reader
	// hands them to a larger one.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Set-Cookie", strings.Repeat("c", 3000))
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chunk("a")+chunk("b")+finalChunk+usageChunk+doneChunk)
	}))
	defer srv.Close()
	cfg := baseConfig(srv.URL)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 1, Requests: 3}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := rec.Stages[0]; s.OK != 3 || s.OutputTokens != 9 {
		t.Errorf("ok %d tokens %d, want 3 and 9 (%v)", s.OK, s.OutputTokens, s.ErrorSamples)
	}
}

func TestGatewayTimingIsRead(t *testing.T) {
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7},\"infergate_timing\":{\"ttft_ms\":40.000,\"queue_ms\":5.000,\"gateway_ms\":0.500,\"connect_ms\":0.100,\"network_ms\":0.200,\"model_ttft_ms\":34.000,\"decode_ms\":10.000,\"total_ms\":49.800}}\n\n"
	url := scriptServer(t, []step{{40 * time.Millisecond, chunk("a")}, {10 * time.Millisecond, chunk("b") + finalChunk + usage + doneChunk}})
	cfg := baseConfig(url)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 1, Requests: 3}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := rec.Stages[0].Metrics
	if m["gw_model_ttft"] == nil || m["gw_model_ttft"].P50 != 34 || m["gw_queue"].P50 != 5 {
		t.Fatalf("gateway timing not read: %+v", m["gw_model_ttft"])
	}
	// The client saw ~40 ms; the gateway's own TTFT is 40 ms: the network
	// between them is what is left, near zero here.
	if c := m["client_network"]; c == nil || c.P50 > 15 {
		t.Errorf("client_network %+v, want small", c)
	}
	var out strings.Builder
	rec.WriteText(&out)
	if !strings.Contains(out.String(), "where the time went") {
		t.Errorf("report lacks the attribution table:\n%s", out.String())
	}
}

// TestHTMLReportDrawsOffline opens a record's HTML report in headless
// Chromium: the charts draw with no network and no script.
func TestHTMLReportDrawsOffline(t *testing.T) {
	t.Parallel()
	rec := &Record{Conditions: Conditions{URL: "http://127.0.0.1:1", Workload: WorkloadSpec{Model: "m", Endpoint: "chat", Stream: true}, Load: LoadSpec{Mode: "closed", Concurrency: 4}}, Knee: -1}
	for lvl := range 2 {
		s := &Summary{Stage: lvl, Level: float64(4 * (lvl + 1)), Requests: 100, OK: 100, OutputTokenThroughput: 500 * float64(lvl+1),
			Metrics: map[string]*Percentiles{"ttft": {N: 100, P50: 40}}, Samples: map[string][]float64{}}
		for i := range 100 {
			s.Samples["ttft"] = append(s.Samples["ttft"], 30+float64(i%37)+float64(lvl*10))
			s.Samples["tpot"] = append(s.Samples["tpot"], 8+float64(i%5))
			s.Samples["e2e"] = append(s.Samples["e2e"], 900+float64(i*3))
		}
		for sec := range 10 {
			s.Timeline = append(s.Timeline, Bucket{T: float64(sec), OutputTokens: 400 + float64(sec*10), TTFTP50: 40})
		}
		rec.Stages = append(rec.Stages, s)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	htmlcheck.Check(t, path, "#0072B2")
}

// A model the server does not serve fails every request alike: bench
// stops after the first few, writes no record, and names the models the
// server lists.
func TestStopsWhenTheFirstRequestsAllFailAlike(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"sim-model","object":"model"}]}`)
			return
		}
		posts.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"The model gpt-4o does not exist.","type":"NotFoundError","code":404}}`)
	}))
	defer srv.Close()
	cfg := baseConfig(srv.URL)
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 4, Requests: 500}
	rec, err := Run(context.Background(), cfg)
	var af *AllFailed
	if !errors.As(err, &af) || rec != nil {
		t.Fatalf("record %v, error %v", rec != nil, err)
	}
	msg := err.Error()
	for _, want := range []string{"first 8 requests all failed alike", "http_404", "gpt-4o does not exist", "sim-model", "--model"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if n := posts.Load(); n > 40 {
		t.Errorf("%d requests sent before stopping, want a few more than 8", n)
	}
}

// A server that sheds every request (503, or 429 from a tenant cap) is
// full, not misconfigured: an overload run measures its answers to the end.
func TestOverloadAnswersDoNotStopARun(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		var posts atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/models" {
				io.WriteString(w, `{"object":"list","data":[{"id":"sim-model","object":"model"}]}`)
				return
			}
			posts.Add(1)
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(code)
			io.WriteString(w, `{"error":{"message":"full","type":"server_error","code":"capacity_exceeded"}}`)
		}))
		cfg := baseConfig(srv.URL)
		cfg.Load = LoadSpec{Mode: "closed", Concurrency: 4, Requests: 60}
		rec, err := Run(context.Background(), cfg)
		srv.Close()
		if err != nil || rec == nil {
			t.Fatalf("%d: record %v, error %v", code, rec != nil, err)
		}
		if n := posts.Load(); n < 60 {
			t.Errorf("%d: %d requests sent, want all 60", code, n)
		}
	}
}

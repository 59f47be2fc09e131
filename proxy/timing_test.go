package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/tracing"
)

// serverTiming parses "name;dur=1.5, ..." into milliseconds by name.
func serverTiming(t *testing.T, h string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for part := range strings.SplitSeq(h, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(part), ";dur=")
		v, err := strconv.ParseFloat(dur, 64)
		if !ok || err != nil {
			t.Fatalf("Server-Timing %q: bad part %q", h, part)
		}
		out[name] = v
	}
	return out
}

func TestServerTimingOnlyWhenAsked(t *testing.T) {
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Infergate-Timing") != "" {
			t.Error("the timing request header reached the backend")
		}
		time.Sleep(40 * time.Millisecond)
		jsonHandler(200, `{"choices":[{"message":{"content":"hi"}}]}`)(w, r)
	})
	gw := startGateway(t, testConfig(b.URL))
	_, h, _ := post(t, gw.URL, "/v1/chat/completions", plainBody)
	if h.Get("Server-Timing") != "" {
		t.Errorf("Server-Timing %q sent to a client that did not ask", h.Get("Server-Timing"))
	}
	_, h, _ = post(t, gw.URL, "/v1/chat/completions", plainBody, "X-Infergate-Timing", "1")
	st := serverTiming(t, h.Get("Server-Timing"))
	// The backend's 40 ms land in model; the parts add up to total. What
	// is held is where the wait went, not how fast a loaded machine
	// runs: the other parts together stay under the backend's 40 ms
	// (a loopback hop and the gateway's own work take well under a
	// millisecond on a quiet one), so the wait cannot be among them.
	if st["model"] < 39 {
		t.Errorf("model %.3f ms, want the backend's 40 ms (%v)", st["model"], st)
	}
	sum := st["queue"] + st["gateway"] + st["connect"] + st["network"] + st["model"] + st["decode"]
	if d := sum - st["total"]; d > 0.01 || d < -0.01 {
		t.Errorf("parts add up to %.3f ms, total %.3f (%v)", sum, st["total"], st)
	}
	if rest := st["total"] - st["model"]; rest >= 40 {
		t.Errorf("%.3f ms outside model, as much as the backend's wait (%v)", rest, st)
	}
}

func TestQueueWaitLandsInQueue(t *testing.T) {
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		jsonHandler(200, `{"choices":[{"message":{"content":"hi"}}]}`)(w, r)
	})
	cfg := testConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	gw := startGateway(t, cfg)
	go send(gw.URL, plainBody)
	waitFor(t, 2*time.Second, "one in flight", func() bool { return gw.lim.Stats().InFlightRequests == 1 })
	_, h, _ := post(t, gw.URL, "/v1/chat/completions", plainBody, "X-Infergate-Timing", "1")
	st := serverTiming(t, h.Get("Server-Timing"))
	if st["queue"] < 50 || st["model"] < 99 {
		t.Errorf("queue %.1f ms, model %.1f ms: want the wait behind the other request in queue and the backend's 100 ms in model (%v)", st["queue"], st["model"], st)
	}
}

const usageEvent = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"

func TestStreamTimingOnTheUsageChunk(t *testing.T) {
	script := chunk("a") + chunk("b") + finishEvent + usageEvent + doneEvent
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		time.Sleep(30 * time.Millisecond)
		w.Write([]byte(script))
	})
	gw := startGateway(t, testConfig(b.URL))
	// A client that does not ask gets the backend's bytes, unchanged.
	if _, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody); body != script {
		t.Errorf("stream changed for a client that did not ask:\n%q\nwant\n%q", body, script)
	}
	_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody, "X-Infergate-Timing", "1")
	evs := events(body)
	var usage string
	for _, e := range evs {
		if strings.Contains(e, `"usage"`) {
			usage = e
		}
	}
	var u struct {
		Usage  map[string]int     `json:"usage"`
		Timing map[string]float64 `json:"infergate_timing"`
	}
	if err := json.Unmarshal([]byte(usage), &u); err != nil || u.Usage["completion_tokens"] != 2 {
		t.Fatalf("usage chunk %q: %v", usage, err)
	}
	tm := u.Timing
	if tm["model_ttft_ms"] < 29 || tm["ttft_ms"] < tm["model_ttft_ms"] {
		t.Errorf("timing %v: want the backend's 30 ms in model_ttft_ms, within ttft_ms", tm)
	}
	sum := tm["queue_ms"] + tm["gateway_ms"] + tm["connect_ms"] + tm["network_ms"] + tm["model_ttft_ms"] + tm["decode_ms"]
	if d := sum - tm["total_ms"]; d > 0.01 || d < -0.01 {
		t.Errorf("parts add up to %.3f, total %.3f (%v)", sum, tm["total_ms"], tm)
	}
	want := events(script)
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for i := range evs {
		if evs[i] != want[i] && !strings.Contains(want[i], `"usage"`) {
			t.Errorf("event %d changed: %q, want %q", i, evs[i], want[i])
		}
	}
}

func TestRequestLog(t *testing.T) {
	script := chunk("a") + chunk("b") + finishEvent + usageEvent + doneEvent
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(script))
	})
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	cfg := testConfig(b.URL)
	cfg.RequestLog = tracing.LogConfig{Path: path, BodyBytes: 1 << 10}
	gw := startGateway(t, cfg)
	// A refused reload changes nothing: not the log's sample rate either.
	refused := gw.Config()
	refused.RequestLog.SampleRate = 0.000001
	refused.Shaping.Redis.Addr = "127.0.0.1:1" // needs a restart
	if err := gw.Reload(refused); err == nil {
		t.Fatal("a reload that changes shaping.redis was accepted")
	}
	for range 3 {
		post(t, gw.URL, "/v1/chat/completions", streamBody, "Authorization", "Bearer sk-1")
	}
	post(t, gw.URL, "/v1/chat/completions", `{"model":"nope","messages":[]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gw.Shutdown(ctx) // flushes the log
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), raw)
	}
	var e tracing.Entry
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
		t.Fatal(err)
	}
	if e.Model != "m" || e.Status != 200 || e.Outcome != "ok" || e.OutputTokens != 2 || e.InputTokens != 3 || e.Timing == nil ||
		string(e.Body) != streamBody || !strings.HasPrefix(e.Tenant, "key-") || e.Time.IsZero() {
		t.Errorf("entry %s", lines[0])
	}
	if strings.Contains(string(raw), "sk-1") {
		t.Error("an API key reached the request log")
	}
	if !strings.Contains(lines[3], `"status":404`) {
		t.Errorf("the refused request's line: %s", lines[3])
	}
}

func TestTimingOnAFinishChunkWithUsage(t *testing.T) {
	// Some servers send the usage on the chunk that finishes.
	last := `data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n"
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(chunk("a") + last + doneEvent))
	})
	gw := startGateway(t, testConfig(b.URL))
	_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody, "X-Infergate-Timing", "1")
	evs := events(body)
	if len(evs) != 3 || !strings.Contains(evs[1], `"infergate_timing":{"ttft_ms":`) || !json.Valid([]byte(evs[1])) {
		t.Errorf("events %q: want the timing on the finishing chunk", evs)
	}
}

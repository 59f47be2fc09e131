package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/sony/gobreaker/v2"
)

// deadURL is a localhost address with nothing listening.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestFailoverBeforeFirstByte(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bad  func(t *testing.T) string
	}{
		{"connect refused", deadURL},
		{"503", func(t *testing.T) string { return newTestBackend(t, jsonHandler(503, `{"error":"overloaded"}`)).URL }},
		{"429", func(t *testing.T) string { return newTestBackend(t, jsonHandler(429, `{"error":"slow down"}`)).URL }},
		{"reset before headers", func(t *testing.T) string {
			return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) { resetConn(w) }).URL
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := newTestBackend(t, sseHandler(3, 0))
			cfg := testConfig(tc.bad(t), good.URL)
			p := cfg.Pools["p"]
			p.Selection = WeightedRoundRobinPolicy // the bad one first, deterministically
			cfg.Pools["p"] = p
			gw := startGateway(t, cfg)
			for i := range 4 {
				code, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
				if code != 200 || !strings.HasSuffix(body, doneEvent) {
					t.Fatalf("request %d: status %d body %q, want a full stream from the good backend", i, code, body)
				}
			}
			if got := good.requests.Load(); got != 4 {
				t.Errorf("good backend served %d of 4", got)
			}
		})
	}
}

func TestNoRetryAfterFirstByte(t *testing.T) {
	t.Parallel()
	first := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chunk("a"))
		w.(http.Flusher).Flush()
		resetConn(w)
	})
	second := newTestBackend(t, sseHandler(3, 0))
	cfg := testConfig(first.URL, second.URL)
	p := cfg.Pools["p"]
	p.Selection = WeightedRoundRobinPolicy
	cfg.Pools["p"] = p
	gw := startGateway(t, cfg)
	_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
	evs := events(body)
	if len(evs) != 2 || !strings.Contains(evs[0], `"a"`) || !strings.Contains(evs[1], "upstream_stream_ended") {
		t.Errorf("events %q: want the first backend's event then an error event", evs)
	}
	if n := second.requests.Load(); n != 0 {
		t.Errorf("second backend got %d requests after the first byte went out", n)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	var bes []*testBackend
	var urls []string
	for range 4 {
		b := newTestBackend(t, jsonHandler(500, `{"error":{"message":"boom"}}`))
		bes = append(bes, b)
		urls = append(urls, b.URL)
	}
	cfg := testConfig(urls...)
	cfg.Retries.Max = 1
	gw := startGateway(t, cfg)
	code, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody)
	if code != 500 || !strings.Contains(body, "boom") {
		t.Errorf("status %d body %q: want the last backend's 500 passed through", code, body)
	}
	total := int64(0)
	for _, b := range bes {
		total += b.requests.Load()
	}
	if total != 2 {
		t.Errorf("%d attempts with retries.max=1, want 2", total)
	}
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	b := newRetryBudget(0.5, 0)
	now := time.Now()
	b.tokens = 0
	for range 4 {
		b.request(now)
	}
	got := 0
	for range 10 {
		if b.retry(now) {
			got++
		}
	}
	if got != 2 {
		t.Errorf("4 requests at ratio 0.5 allowed %d retries, want 2", got)
	}
	b2 := newRetryBudget(0, 10)
	b2.tokens = 0
	b2.retry(now)
	if !b2.retry(now.Add(150 * time.Millisecond)) {
		t.Error("10/s floor allowed no retry after 150ms")
	}
}

func TestBreakerOpensAndRecovers(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	flaky := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			jsonHandler(500, `{}`)(w, r)
			return
		}
		jsonHandler(200, `{"ok":true}`)(w, r)
	})
	healthy := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(flaky.URL, healthy.URL)
	p := cfg.Pools["p"]
	p.Selection = WeightedRoundRobinPolicy
	p.Ejection.ConsecutiveFailures = -1 // test the breaker alone
	p.Breaker = BreakerConfig{FailureRatio: 0.5, MinRequests: 3, Interval: time.Minute, OpenTimeout: 300 * time.Millisecond, HalfOpenRequests: 1}
	cfg.Pools["p"] = p
	cfg.Retries.Max = 1
	gw := startGateway(t, cfg)
	fb := gw.state.Load().pools["p"].backends[0]
	for range 6 {
		if code, _, _ := post(t, gw.URL, "/v1/chat/completions", plainBody); code != 200 {
			t.Fatalf("status %d: failover should hide the failing backend", code)
		}
	}
	if fb.BreakerState() != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 failures, want open", fb.BreakerState())
	}
	before := flaky.requests.Load()
	for range 4 {
		post(t, gw.URL, "/v1/chat/completions", plainBody)
	}
	if flaky.requests.Load() != before {
		t.Errorf("open breaker still let %d requests through", flaky.requests.Load()-before)
	}
	failing.Store(false)
	time.Sleep(350 * time.Millisecond)
	for range 4 {
		post(t, gw.URL, "/v1/chat/completions", plainBody)
	}
	if fb.BreakerState() != gobreaker.StateClosed || flaky.requests.Load() == before {
		t.Errorf("breaker %v after recovery (backend got %d new requests), want closed via a half-open probe",
			fb.BreakerState(), flaky.requests.Load()-before)
	}
}

func TestPassiveEjection(t *testing.T) {
	t.Parallel()
	bad := newTestBackend(t, jsonHandler(502, `{}`))
	good := newTestBackend(t, jsonHandler(200, `{}`))
	cfg := testConfig(bad.URL, good.URL)
	p := cfg.Pools["p"]
	p.Selection = WeightedRoundRobinPolicy
	p.Ejection = EjectionConfig{ConsecutiveFailures: 2, Duration: time.Minute}
	p.Breaker.MinRequests = 1000
	cfg.Pools["p"] = p
	gw := startGateway(t, cfg)
	for range 8 {
		post(t, gw.URL, "/v1/chat/completions", plainBody)
	}
	if n := bad.requests.Load(); n != 2 {
		t.Errorf("failing backend got %d requests, want 2 before ejection", n)
	}
}

func TestActiveHealthCheck(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	up.Store(true)
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !up.Load() {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	})
	cfg := testConfig(be.URL)
	p := cfg.Pools["p"]
	p.Health = HealthConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2}
	cfg.Pools["p"] = p
	gw := startGateway(t, cfg)
	ready := func() int {
		resp, err := http.Get(gw.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if ready() != 200 {
		t.Fatal("not ready with a healthy backend")
	}
	up.Store(false)
	waitFor(t, 2*time.Second, "readyz to fail", func() bool { return ready() == 503 })
	code, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody)
	var e struct{ Error openai.Error }
	json.Unmarshal([]byte(body), &e)
	if code != 503 || e.Error.Code == nil || *e.Error.Code != "no_backend" {
		t.Errorf("with no healthy backend: status %d body %s, want 503 no_backend", code, body)
	}
	up.Store(true)
	waitFor(t, 2*time.Second, "readyz to recover", func() bool { return ready() == 200 })
}

func TestModelLabelsAreBounded(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, testConfig("http://127.0.0.1:1"))
	for i := range maxModelLabels + 10 {
		x := &exchange{g: gw.Gateway, model: fmt.Sprint("model-", i), outcome: outcomeOK}
		x.record()
	}
	mfs, _ := gw.Metrics().Gather()
	series := 0
	for _, mf := range mfs {
		if mf.GetName() == "infergate_requests_total" {
			series = len(mf.Metric)
		}
	}
	if series != maxModelLabels+1 {
		t.Errorf("%d series for %d model names, want %d (the rest as other)", series, maxModelLabels+10, maxModelLabels+1)
	}
}

// A reload carries unchanged backends over with their state: an in-flight
// stream still counts against its backend, and a changed backend is new.
func TestReloadKeepsUnchangedBackends(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chunk("a"))
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, finishEvent+doneEvent)
	})
	other := newTestBackend(t, sseHandler(1, 0))
	cfg := testConfig(slow.URL)
	gw := startGateway(t, cfg)
	before := gw.state.Load().pools["p"].backends[0]
	done := make(chan string, 1)
	go func() {
		_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
		done <- body
	}()
	waitFor(t, 2*time.Second, "the stream to start", func() bool { return before.Outstanding() == 1 })

	next := testConfig(slow.URL, other.URL)
	if err := gw.Reload(next); err != nil {
		t.Fatal(err)
	}
	pool := gw.state.Load().pools["p"]
	if pool.backends[0] != before || pool.backends[0].Outstanding() != 1 {
		t.Errorf("unchanged backend not carried over (same=%v, outstanding %d)", pool.backends[0] == before, pool.backends[0].Outstanding())
	}
	if pool.backends[1].Outstanding() != 0 {
		t.Error("new backend starts with requests")
	}
	// Least-outstanding now sends new work to the idle backend.
	if code, _, _ := post(t, gw.URL, "/v1/chat/completions", streamBody); code != 200 || other.requests.Load() != 1 {
		t.Errorf("status %d, idle backend got %d: the busy one's in-flight stream was forgotten", code, other.requests.Load())
	}
	close(release)
	if body := <-done; !strings.HasSuffix(body, doneEvent) {
		t.Errorf("stream across the reload ended %q", body)
	}
	waitFor(t, time.Second, "outstanding back to 0", func() bool { return before.Outstanding() == 0 })

	changed := testConfig(slow.URL, other.URL)
	p := changed.Pools["p"]
	p.Backends[0].Weight = 3
	changed.Pools["p"] = p
	if err := gw.Reload(changed); err != nil {
		t.Fatal(err)
	}
	if gw.state.Load().pools["p"].backends[0] == before {
		t.Error("a backend whose settings changed was carried over")
	}
}

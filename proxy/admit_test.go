package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/shaping"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// concurrencyBackend streams slowly and records the most requests it had
// at once.
func concurrencyBackend(t *testing.T, hold time.Duration) (*testBackend, *atomic.Int64) {
	var now, peak atomic.Int64
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(hold)
		sseHandler(2, 0)(w, r)
	})
	return b, &peak
}

// send is post for goroutines: a transport error is status 0, not Fatal.
func send(url, body string, hdr ...string) (int, http.Header, string) {
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func errorBody(t *testing.T, body string) (typ, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e.Error.Type, e.Error.Code
}

func TestCapShedsWithoutQueue(t *testing.T) {
	t.Parallel()
	b, peak := concurrencyBackend(t, 200*time.Millisecond)
	cfg := testConfig(b.URL)
	cfg.Shaping = shaping.Config{Global: shaping.Cap{MaxRequests: 2}, Queue: shaping.QueueConfig{MaxWaiting: -1}}
	gw := startGateway(t, cfg)
	type answer struct {
		status int
		hdr    http.Header
		body   string
	}
	answers := make(chan answer, 5)
	for range 5 {
		go func() {
			s, h, body := send(gw.URL, streamBody)
			answers <- answer{s, h, body}
		}()
	}
	ok, shed := 0, 0
	for range 5 {
		a := <-answers
		switch a.status {
		case 200:
			ok++
		case 503:
			shed++
			typ, code := errorBody(t, a.body)
			if typ != "service_unavailable_error" || code != "capacity_exceeded" || a.hdr.Get("Retry-After") == "" {
				t.Errorf("shed answer: type %q code %q Retry-After %q", typ, code, a.hdr.Get("Retry-After"))
			}
		default:
			t.Errorf("status %d: %s", a.status, a.body)
		}
	}
	if ok != 2 || shed != 3 || peak.Load() > 2 {
		t.Errorf("%d ok, %d shed, backend peak %d; want 2, 3 and at most 2", ok, shed, peak.Load())
	}
	waitFor(t, 2*time.Second, "slots back", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
}

func TestQueueHoldsTheCapAtTheBackend(t *testing.T) {
	t.Parallel()
	b, peak := concurrencyBackend(t, 30*time.Millisecond)
	cfg := testConfig(b.URL)
	cfg.Shaping = shaping.Config{Global: shaping.Cap{MaxRequests: 2}, Queue: shaping.QueueConfig{MaxWaiting: 100, Timeout: 10 * time.Second}}
	gw := startGateway(t, cfg)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, _, body := send(gw.URL, streamBody); s != 200 || !strings.Contains(body, "[DONE]") {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || peak.Load() != 2 {
		t.Errorf("%d failed, backend peak %d; want none and exactly the cap, 2", failed.Load(), peak.Load())
	}
	if s := gw.lim.Stats(); s.Queued == 0 || s.InFlightRequests != 0 || s.Waiting != 0 {
		t.Errorf("limiter after the run: %+v", s)
	}
	// The queue shows on /metrics.
	resp, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"infergate_queue_depth", "infergate_queue_wait_seconds", "infergate_shaping_in_flight", "infergate_shaping_rejections_total"} {
		if mfs[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if h := mfs["infergate_queue_wait_seconds"].Metric[0].Histogram; h.GetSampleCount() != 12 {
		t.Errorf("queue wait observed %d times, want 12", h.GetSampleCount())
	}
}

func TestTenantCapIs429(t *testing.T) {
	t.Parallel()
	b, _ := concurrencyBackend(t, 300*time.Millisecond)
	cfg := testConfig(b.URL)
	cfg.Shaping = shaping.Config{
		Tenants: map[string]shaping.Tenant{"acme": {Cap: shaping.Cap{MaxRequests: 1}, APIKeys: []string{"sk-acme"}}},
		Queue:   shaping.QueueConfig{MaxWaiting: -1},
	}
	gw := startGateway(t, cfg)
	first := make(chan int)
	go func() {
		s, _, _ := send(gw.URL, streamBody, "Authorization", "Bearer sk-acme")
		first <- s
	}()
	waitFor(t, 2*time.Second, "first request admitted", func() bool { return gw.lim.Stats().InFlightRequests == 1 })
	s, h, body := post(t, gw.URL, "/v1/chat/completions", streamBody, "Authorization", "Bearer sk-acme")
	typ, code := errorBody(t, body)
	if s != 429 || typ != "rate_limit_error" || code != "tenant_limit_reached" || h.Get("Retry-After") == "" {
		t.Errorf("second acme request: %d %s %s Retry-After %q", s, typ, code, h.Get("Retry-After"))
	}
	// Another key is another tenant, not held by acme's cap.
	if s, _, _ := post(t, gw.URL, "/v1/chat/completions", streamBody, "Authorization", "Bearer sk-other"); s != 200 {
		t.Errorf("another tenant: status %d", s)
	}
	if s := <-first; s != 200 {
		t.Errorf("first acme request: %d", s)
	}
	if strings.Contains(gw.logs.String(), "sk-other") {
		t.Error("an API key reached the logs")
	}
}

func TestClientLeavingTheQueueFreesItsPlace(t *testing.T) {
	b, _ := concurrencyBackend(t, 500*time.Millisecond)
	cfg := testConfig(b.URL)
	cfg.Shaping = shaping.Config{Global: shaping.Cap{MaxRequests: 1}, Queue: shaping.QueueConfig{MaxWaiting: 10, Timeout: 10 * time.Second}}
	gw := startGateway(t, cfg)
	go send(gw.URL, streamBody)
	waitFor(t, 2*time.Second, "one in flight", func() bool { return gw.lim.Stats().InFlightRequests == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/v1/chat/completions", strings.NewReader(streamBody))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, 2*time.Second, "one waiting", func() bool { return gw.lim.Stats().Waiting == 1 })
	left := time.Now()
	cancel()
	// The hang-up watcher polls every 20 ms.
	waitFor(t, time.Second, "the waiter gone", func() bool { return gw.lim.Stats().Waiting == 0 })
	if d := time.Since(left); d > 500*time.Millisecond {
		t.Errorf("left the queue %v after the client", d)
	}
	if s := gw.lim.Stats(); s.Cancelled != 1 {
		t.Errorf("stats %+v, want one abandoned wait", s)
	}
	waitFor(t, 3*time.Second, "slots back", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	if b.requests.Load() != 1 {
		t.Errorf("the backend saw %d requests; the one that left must not reach it", b.requests.Load())
	}
}

func TestReloadChangesCaps(t *testing.T) {
	t.Parallel()
	b, _ := concurrencyBackend(t, 300*time.Millisecond)
	cfg := testConfig(b.URL)
	cfg.Shaping = shaping.Config{Global: shaping.Cap{MaxRequests: 1}, Queue: shaping.QueueConfig{MaxWaiting: -1}}
	gw := startGateway(t, cfg)
	done := make(chan int)
	go func() {
		s, _, _ := send(gw.URL, streamBody)
		done <- s
	}()
	waitFor(t, 2*time.Second, "one in flight", func() bool { return gw.lim.Stats().InFlightRequests == 1 })
	if s, _, _ := post(t, gw.URL, "/v1/chat/completions", streamBody); s != 503 {
		t.Errorf("over the cap: %d, want 503", s)
	}
	next := testConfig(b.URL)
	next.Shaping = shaping.Config{Global: shaping.Cap{MaxRequests: 2}, Queue: shaping.QueueConfig{MaxWaiting: -1}}
	if err := gw.Reload(next); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := post(t, gw.URL, "/v1/chat/completions", streamBody); s != 200 {
		t.Errorf("after raising the cap: %d, want 200", s)
	}
	if s := <-done; s != 200 {
		t.Errorf("the request in flight across the reload: %d", s)
	}
	bad := testConfig(b.URL)
	bad.Shaping = shaping.Config{Pools: map[string]shaping.Cap{"nope": {MaxRequests: 1}}}
	if err := gw.Reload(bad); err == nil || !strings.Contains(err.Error(), "shaping.pools.nope") {
		t.Errorf("reload with a cap on an unknown pool: %v", err)
	}
}

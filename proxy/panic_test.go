package proxy

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

func withFailpoints(f failpoints) Option { return func(g *Gateway) { g.fail = f } }

// A panic while serving one request ends that request only: 20 streams
// running beside it finish, the process carries on, the client of the
// panicking request is told in OpenAI's form (a 500 before the first
// byte, an SSE error event after it), its slot is released, and the
// metric counts each panic where it happened.
func TestPanicEndsOneRequestOnly(t *testing.T) {
	be := newTestBackend(t, sseHandler(30, 5*time.Millisecond))
	cfg := testConfig(be.URL)
	cfg.Shaping.Global.MaxRequests = 32
	gw := startGateway(t, cfg, withFailpoints(func(point, id string) {
		if id == "boom-"+point {
			panic("test: a bug on the request path at " + point)
		}
	}))

	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
			if status != 200 || !strings.Contains(body, "[DONE]") || strings.Contains(body, `"error"`) {
				errs <- body
			}
			_ = i
		}()
	}
	time.Sleep(20 * time.Millisecond) // the streams are running

	// Before the first byte: a 500 in OpenAI's error form.
	status, hdr, body := post(t, gw.URL, "/v1/chat/completions", streamBody, "X-Request-Id", "boom-admitted")
	var e struct {
		Error struct{ Type, Code string }
	}
	if status != 500 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "internal_error" || e.Error.Type != "server_error" {
		t.Errorf("panic before the first byte: %d %s, want 500 internal_error", status, body)
	}
	if hdr.Get("X-Request-Id") != "boom-admitted" {
		t.Errorf("X-Request-Id %q", hdr.Get("X-Request-Id"))
	}
	// During a backend attempt: the attempt's permit and count go back.
	if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody, "X-Request-Id", "boom-attempt"); status != 500 {
		t.Errorf("panic during an attempt: %d %s, want 500", status, body)
	}
	// After the first byte: the stream ends with an error event.
	status, _, body = post(t, gw.URL, "/v1/chat/completions", streamBody, "X-Request-Id", "boom-stream")
	evs := events(body)
	if status != 200 || len(evs) == 0 || !strings.Contains(evs[len(evs)-1], `"internal_error"`) {
		t.Errorf("panic on the stream: %d, events %q; want 200 and a last event with internal_error", status, evs)
	}

	wg.Wait()
	close(errs)
	for b := range errs {
		t.Errorf("a stream beside the panics did not finish cleanly: %s", b)
	}
	// The process serves on, and nothing is held.
	if status, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody); status != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("after the panics: %d %s", status, body)
	}
	waitFor(t, 2*time.Second, "slots released", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	for _, p := range gw.state.Load().pools {
		for _, b := range p.backends {
			if n := b.Outstanding(); n != 0 {
				t.Errorf("backend %s has %d requests outstanding after the panics", b.name, n)
			}
		}
	}
	for where, want := range map[string]float64{"request": 2, "stream": 1} {
		if got := counterValue(t, gw.Gateway, "infergate_panics_total", "where", where); got != want {
			t.Errorf("infergate_panics_total{where=%q} = %v, want %v", where, got, want)
		}
	}
	if got := counterValue(t, gw.Gateway, "infergate_requests_total", "outcome", "panic"); got != 3 {
		t.Errorf("requests with outcome panic: %v, want 3", got)
	}
	if !strings.Contains(gw.logs.String(), "panic recovered") || !strings.Contains(gw.logs.String(), "goroutine") {
		t.Error("the panic was not logged with its stack")
	}
}

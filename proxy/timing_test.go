package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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
	// The backend's 40 ms land in model; the parts add up to total.
	if st["model"] < 39 || st["model"] > 60 {
		t.Errorf("model %.3f ms, want the backend's 40 ms (%v)", st["model"], st)
	}
	sum := st["queue"] + st["gateway"] + st["connect"] + st["network"] + st["model"] + st["decode"]
	if d := sum - st["total"]; d > 0.01 || d < -0.01 {
		t.Errorf("parts add up to %.3f ms, total %.3f (%v)", sum, st["total"], st)
	}
	if st["gateway"] > 5 || st["network"] > 1 {
		t.Errorf("gateway %.3f ms, network %.3f ms on loopback: too much (%v)", st["gateway"], st["network"], st)
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

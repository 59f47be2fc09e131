package proxy

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// timedStream sends a streaming request that asks for the gateway's
// timing and returns the infergate_timing object of its usage chunk.
func timedStream(t *testing.T, url, body string) openai.Timing {
	t.Helper()
	code, _, out := send(url, body, "X-Infergate-Timing", "1")
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	for _, ev := range events(out) {
		var c struct {
			Timing *openai.Timing `json:"infergate_timing"`
		}
		if json.Unmarshal([]byte(ev), &c) == nil && c.Timing != nil {
			return *c.Timing
		}
	}
	t.Fatalf("no infergate_timing in %s", out)
	return openai.Timing{}
}

func addsUp(t *testing.T, tm openai.Timing) {
	t.Helper()
	sum := tm.Queue + tm.Gateway + tm.Connect + tm.Network + tm.ModelTTFT + tm.Decode
	// Each part is rounded to the microsecond.
	if d := sum - tm.Total; d > 0.01 || d < -0.01 {
		t.Errorf("parts add up to %.3f ms, total %.3f ms (%+v)", sum, tm.Total, tm)
	}
}

// The sim's prefill is model time; with per-request metrics the backend's
// own split shows it as prefill, and its decode as decode.
func TestSimPrefillLandsInModel(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Model = "m"
	cfg.PerRequestMetrics = true
	cfg.Engine.PrefillTokensPerS = 10000 // 1000 prompt tokens: 100 ms of prefill
	url := simtest.Start(t, cfg).URL
	gw := startGateway(t, testConfig(url))
	prompt := strings.Repeat("hello ", 1000)
	body := fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":20,"ignore_eos":true,"messages":[{"role":"user","content":%q}]}`, prompt)
	// The lower bounds are the sim's sleeps and hold on any machine; the
	// upper ones (nothing in queue or gateway, the two decodes alike) are
	// what a starved CPU breaks: a request whose only faults are those is
	// measured once more, and the second must hold.
	for attempt := 1; ; attempt++ {
		tm := timedStream(t, gw.URL, body)
		addsUp(t, tm)
		if tm.ModelTTFT < 95 {
			t.Errorf("model TTFT %.1f ms, want the sim's 100 ms of prefill (%+v)", tm.ModelTTFT, tm)
		}
		b := tm.Backend
		if b == nil || b.Source != "vllm" || b.Prefill == nil || b.Queue == nil || b.Decode == nil {
			t.Fatalf("backend split %+v, want vLLM's queue, prefill and decode", b)
		}
		if *b.Prefill < 95 || *b.Prefill > tm.ModelTTFT || *b.Decode <= 0 {
			t.Errorf("backend prefill %.1f ms, decode %.1f ms; want prefill ≥ 100 ms and within model TTFT %.1f", *b.Prefill, *b.Decode, tm.ModelTTFT)
		}
		if t.Failed() {
			return
		}
		var slow []string
		if tm.ModelTTFT > 400 {
			slow = append(slow, fmt.Sprintf("model TTFT %.1f ms, want the sim's 100 ms of prefill", tm.ModelTTFT))
		}
		// The engine's first → last token and the gateway's first → last in
		// (less its relay time) see the same decode, up to delivery jitter.
		if d := *b.Decode - tm.Decode; d > 0.1*tm.Decode+2 || d < -0.1*tm.Decode-2 {
			slow = append(slow, fmt.Sprintf("backend decode %.1f ms against the gateway's %.1f ms", *b.Decode, tm.Decode))
		}
		if tm.Queue > 5 || tm.Gateway > 10 {
			slow = append(slow, fmt.Sprintf("queue %.1f ms, gateway %.1f ms: nothing should be there", tm.Queue, tm.Gateway))
		}
		if len(slow) == 0 {
			return
		}
		if attempt == 2 {
			t.Fatalf("%s (%+v)", strings.Join(slow, "; "), tm)
		}
		t.Logf("attempt 1, starved? %s (%+v); once more", strings.Join(slow, "; "), tm)
	}
}

// A backend slow to accept a connection (a slow TLS handshake here): its
// time lands in connect, and only for the request that dialled.
func TestSlowConnectLandsInConnect(t *testing.T) {
	be := httptest.NewUnstartedServer(sseHandler(3, 0))
	be.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		time.Sleep(80 * time.Millisecond)
		return nil, nil
	}}
	be.StartTLS()
	t.Cleanup(be.Close)
	cfg := testConfig(be.URL)
	p := cfg.Pools["p"]
	p.Backends[0].TLS.InsecureSkipVerify = true
	cfg.Pools["p"] = p
	gw := startGateway(t, cfg)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	be.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, chunk("a")+chunk("b")+finishEvent+usageEvent+doneEvent)
	})
	first := timedStream(t, gw.URL, body)
	addsUp(t, first)
	if first.Connect < 80 || first.Connect > 400 {
		t.Errorf("first request: connect %.1f ms, want the 80 ms handshake (%+v)", first.Connect, first)
	}
	if first.ModelTTFT > 40 || first.Gateway > 20 {
		t.Errorf("first request: the handshake leaked into model %.1f ms or gateway %.1f ms", first.ModelTTFT, first.Gateway)
	}
	pooled := timedStream(t, gw.URL, body)
	if pooled.Connect > 5 {
		t.Errorf("pooled connection: connect %.1f ms, want ~0", pooled.Connect)
	}
}

// TGI reports its split in headers, llama.cpp in a "timings" object: both
// reach the client's Server-Timing, within model.
func TestBackendSplitOfOtherServers(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		queue   float64 // -1: not reported
		prefill float64
	}{
		{"tgi headers", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(50 * time.Millisecond)
			w.Header().Set("X-Queue-Time", "20")
			w.Header().Set("X-Inference-Time", "28")
			jsonHandler(200, `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`)(w, r)
		}, 20, -1},
		{"llama.cpp timings", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(50 * time.Millisecond)
			jsonHandler(200, `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"timings":{"prompt_n":9,"prompt_ms":30.5,"predicted_n":1,"predicted_ms":15}}`)(w, r)
		}, -1, 30.5},
		// A server claiming more than the time it took gets no more than
		// model: the parts still add up.
		{"overstated", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond)
			w.Header().Set("X-Queue-Time", "5000")
			jsonHandler(200, `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`)(w, r)
		}, -2, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be := newTestBackend(t, tc.handler)
			gw := startGateway(t, testConfig(be.URL))
			_, h, _ := post(t, gw.URL, "/v1/chat/completions", plainBody, "X-Infergate-Timing", "1")
			st := serverTiming(t, h.Get("Server-Timing"))
			q, hasQ := st["backend-queue"]
			p, hasP := st["prefill"]
			switch {
			case tc.queue == -2:
				if !hasQ || q > st["model"]+0.001 {
					t.Errorf("backend queue %.3f ms, want capped at model %.3f ms (%v)", q, st["model"], st)
				}
			case tc.queue >= 0 && (!hasQ || q != tc.queue):
				t.Errorf("backend queue %.3f (%v), want %v (%v)", q, hasQ, tc.queue, st)
			case tc.queue < 0 && hasQ:
				t.Errorf("backend queue %v reported by a server that gave none", q)
			}
			if tc.prefill >= 0 && (!hasP || p != tc.prefill) || tc.prefill < 0 && hasP {
				t.Errorf("prefill %.3f (%v), want %v (%v)", p, hasP, tc.prefill, st)
			}
			if st["model"] < 19 {
				t.Errorf("model %.3f ms, want the backend's sleep (%v)", st["model"], st)
			}
		})
	}
}

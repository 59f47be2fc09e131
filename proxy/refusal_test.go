package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
	"github.com/sony/gobreaker/v2"
)

// The refusals vLLM writes (create_error_response of QueueOverflowError
// and MaxQueuedTokensError, vllm/exceptions.py; tests/v1/engine/
// test_admission_control.py asserts the type is HTTPStatus(503).phrase),
// and 503s that are not refusals.
func TestParseRefusal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		ok         bool
		why        refusal
	}{
		{"queue full", `{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`, true, refusedRequests},
		{"token backlog", `{"error":{"message":"The engine has reached its prefill token backlog limit. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`, true, refusedTokens},
		// The PR's first form of the messages.
		{"first form", `{"error":{"message":"Request queue full.","type":"Service Unavailable","param":null,"code":503}}`, true, refusedRequests},
		// A sleeping or dead engine, a proxy's page, our own sim's fault:
		// failures, not a full queue.
		{"engine dead", `{"error":{"message":"EngineCore encountered an issue.","type":"Service Unavailable","param":null,"code":503}}`, false, 0},
		{"other type", `{"error":{"message":"The engine is currently busy and cannot accept new requests.","type":"InjectedFault","param":null,"code":503}}`, false, 0},
		{"other code", `{"error":{"message":"The engine is currently busy and cannot accept new requests.","type":"Service Unavailable","param":null,"code":500}}`, false, 0},
		{"flat", `{"error":"overloaded"}`, false, 0},
		{"html", `<html><title>503 Service Unavailable</title></html>`, false, 0},
		{"empty", ``, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, ok := parseRefusal([]byte(tc.body))
			if ok != tc.ok || why != tc.why {
				t.Errorf("parseRefusal(%s) = %v, %v; want %v, %v", tc.body, why, ok, tc.why, tc.ok)
			}
		})
	}
}

func FuzzParseRefusal(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`))
	f.Add([]byte(`{"error":null}`))
	f.Add([]byte(`{"error":{"message":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if why, ok := parseRefusal(b); ok && why >= numRefusals {
			t.Fatalf("reason %d out of range", why)
		}
	})
}

// queueSim is a simulator serving model m that refuses as vLLM does
// beyond one unfinished request.
func queueSim(t *testing.T) *simtest.Server {
	cfg := simtest.Fixed(0, 20*time.Millisecond)
	cfg.Model = "m"
	cfg.Admission.MaxNumQueuedReqs = 1
	return simtest.Start(t, cfg)
}

// fill takes s's one place with a long stream of its own, sent straight
// to it, until the test ends.
func fill(t *testing.T, s *simtest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hold"}],"stream":true,"max_tokens":8000,"ignore_eos":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("holding stream: status %d", resp.StatusCode)
	}
	if _, err := openai.NewEventReader(resp.Body, nil, 1<<20).Next(); err != nil {
		t.Fatalf("holding stream: %v", err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
}

// simMetric sums a simulator's samples of the series name.
func simMetric(t *testing.T, s *simtest.Server, name string) float64 {
	t.Helper()
	_, _, body := do(t, "GET", s.URL+"/metrics", "")
	var n float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				n += v
			}
		}
	}
	return n
}

func rejections(t *testing.T, s *simtest.Server) float64 {
	return simMetric(t, s, "vllm:admission_rejections_total")
}

// refusalGateway runs a gateway over the simulators whose breaker and
// ejection would take a backend out after two failures: a refusal
// counted as one would show.
func refusalGateway(t *testing.T, selection string, weights []int, sims ...*simtest.Server) *testGateway {
	t.Helper()
	var urls []string
	for _, s := range sims {
		urls = append(urls, s.URL)
	}
	cfg := testConfig(urls...)
	p := cfg.Pools["p"]
	p.Selection = selection
	for i, w := range weights {
		p.Backends[i].Weight = w
	}
	p.Load.Interval = 20 * time.Millisecond
	p.Ejection = EjectionConfig{ConsecutiveFailures: 2, Duration: time.Minute}
	p.Breaker = BreakerConfig{FailureRatio: 0.5, MinRequests: 2, Interval: time.Minute, OpenTimeout: time.Minute, HalfOpenRequests: 1}
	cfg.Pools["p"] = p
	cfg.Retries.BudgetMinPerSecond = 1000 // the budget is not what is tested
	return startGateway(t, cfg)
}

// A vLLM that refuses at admission is healthy, only full: the request is
// tried on the other backend before its first byte, the client never sees
// the 503, and the full backend's breaker and ejection take no note.
func TestAdmissionRefusalTriedElsewhere(t *testing.T) {
	t.Parallel()
	full, room := queueSim(t), simtest.Start(t, func() sim.Config { c := simtest.Fixed(0, 0); c.Model = "m"; return c }())
	fill(t, full)
	// The full one first, every time: weighted round robin alternates,
	// and every other request meets the refusal.
	gw := refusalGateway(t, WeightedRoundRobinPolicy, nil, full, room)
	for i := range 6 {
		body := plainBody
		if i%2 == 1 {
			body = streamBody
		}
		code, _, got := post(t, gw.URL, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("request %d: status %d %s; want 200 from the backend with room", i, code, got)
		}
	}
	if n := rejections(t, full); n < 3 {
		t.Fatalf("the full backend refused %v requests, want at least 3 (the test must meet refusals)", n)
	}
	fb := gw.state.Load().pools["p"].backends[0]
	if st := fb.BreakerState(); st != gobreaker.StateClosed || !fb.Available(time.Now()) {
		t.Errorf("full backend: breaker %v, available %v after refusals; want closed and available (full, not failing)", st, fb.Available(time.Now()))
	}
	if n := fb.refusals[refusedRequests].Load(); n < 3 {
		t.Errorf("gateway counted %d refusals, want at least 3", n)
	}
	if !strings.Contains(gw.logs.String(), "refused the request at admission") {
		t.Error("no log line for the refusal")
	}
}

// Selection load holds a refusing backend back from the next picks:
// weighted 10 to 1 it would be every pick's first choice, yet after its
// first refusal the requests go straight to the other.
func TestAdmissionRefusalHoldsTheBackendBack(t *testing.T) {
	t.Parallel()
	// The hold lasts refusalHold from the refusal: the eight requests and
	// the stats read must all fall within it for the claim to be tested.
	// On a CPU starved enough that they did not, what the full backend got
	// after the hold lapsed says nothing, and the run is made once more
	// on fresh simulators; the second must fit.
	for attempt := 1; ; attempt++ {
		full, room := queueSim(t), simtest.Start(t, func() sim.Config { c := simtest.Fixed(0, 0); c.Model = "m"; return c }())
		fill(t, full)
		gw := refusalGateway(t, LoadPolicy, []int{10, 1}, full, room)
		start := time.Now()
		for i := range 8 {
			if code, _, got := post(t, gw.URL, "/v1/chat/completions", plainBody); code != 200 {
				t.Fatalf("request %d: status %d %s", i, code, got)
			}
		}
		st := backendStates(gw)[full.URL]
		n := rejections(t, full)
		if took := time.Since(start); took >= refusalHold && attempt == 1 {
			t.Logf("the requests took %v, past the %v hold: starved, once more", took, refusalHold)
			continue
		}
		if n != 1 {
			t.Errorf("the full backend refused %v requests, want 1: after it, held back from the picks", n)
		}
		if st.Load == nil || st.Load.HeldMs <= 0 || st.Load.Refusals["queued_requests"] != 1 {
			t.Errorf("admin stats of the full backend: %+v; want held and 1 queued_requests refusal", st.Load)
		}
		return
	}
}

// With every backend full the client gets the gateway's own 503 with
// Retry-After, in OpenAI's error shape, and no breaker opens.
func TestAdmissionRefusalEverywhere(t *testing.T) {
	t.Parallel()
	a, b := queueSim(t), queueSim(t)
	fill(t, a)
	fill(t, b)
	gw := refusalGateway(t, LeastOutstandingPolicy, nil, a, b)
	for range 3 {
		code, h, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
		if code != 503 || h.Get("Retry-After") != "1" || !strings.Contains(body, `"code":"backends_full"`) || !strings.Contains(body, `"type":"`+openai.TypeUnavailable+`"`) {
			t.Fatalf("status %d Retry-After %q body %s; want 503, Retry-After 1, backends_full", code, h.Get("Retry-After"), body)
		}
	}
	if n := rejections(t, a) + rejections(t, b); n != 6 {
		t.Errorf("%v refusals for 3 requests on 2 backends, want 6 (each tried once)", n)
	}
	for _, be := range gw.state.Load().pools["p"].backends {
		if st := be.BreakerState(); st != gobreaker.StateClosed || !be.Available(time.Now()) {
			t.Errorf("%s: breaker %v, available %v; want closed", be.name, st, be.Available(time.Now()))
		}
	}
}

// A stream that has sent its first byte is never tried again elsewhere:
// the sim resets it after two tokens, and the client gets those and an
// error event, the other backend nothing.
func TestStreamNeverRetriedAfterFirstByte(t *testing.T) {
	t.Parallel()
	cfg := simtest.Fixed(0, 0)
	cfg.Model, cfg.Faults.ResetAfter = "m", 2
	breaking := simtest.Start(t, cfg)
	other := queueSim(t) // counts what it is sent in its metrics
	gw := refusalGateway(t, WeightedRoundRobinPolicy, nil, breaking, other)
	_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
	evs := events(body)
	if len(evs) < 2 || !strings.Contains(evs[len(evs)-1], "upstream_stream_ended") {
		t.Fatalf("events %q: want the first tokens then an error event", evs)
	}
	if n := simMetric(t, other, "vllm:prompt_tokens_total"); n != 0 {
		t.Errorf("the other backend was sent %v prompt tokens after the first byte went out, want none", n)
	}
}

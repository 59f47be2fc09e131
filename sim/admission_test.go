package sim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

// vLLM's refusals as its server writes them (create_error_response of a
// QueueOverflowError or MaxQueuedTokensError, vllm/exceptions.py; the
// type is HTTPStatus(503).phrase, as tests/v1/engine/
// test_admission_control.py asserts).
const (
	wantQueueFull    = `{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`
	wantTokenBacklog = `{"error":{"message":"The engine has reached its prefill token backlog limit. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`
)

func post(t *testing.T, url, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// holdStream starts a stream and returns once its first event (or, with
// content, its first content token) has arrived, and a cancel that ends
// it and waits until the simulator let go of it.
func holdStream(t *testing.T, url, body string, content bool, s *Server) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	er := openai.NewEventReader(resp.Body, nil, 1<<20)
	for {
		ev, err := er.Next()
		if err != nil {
			t.Fatalf("held stream: %v", err)
		}
		if !content || strings.Contains(string(openai.EventData(ev)), `"content":"`) {
			break
		}
	}
	return func() {
		stop()
		resp.Body.Close()
		deadline := time.Now().Add(5 * time.Second)
		for s.admit.reqs.Load() != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := s.admit.reqs.Load(); n != 0 {
			t.Fatalf("%d requests still admitted after the client left", n)
		}
	}
}

// TestAdmissionQueuedRequests: with --max-num-queued-reqs 1, a second
// request while one runs is refused with vLLM's exact 503 (no
// Retry-After) and counted by reason; once the first ends, requests are
// admitted again.
func TestAdmissionQueuedRequests(t *testing.T) {
	cfg := fixedConfig(0, 50*time.Millisecond)
	cfg.Admission.MaxNumQueuedReqs = 1
	url, s := startSim(t, cfg)
	release := holdStream(t, url, chatBody(`,"max_tokens":1000,"ignore_eos":true`), false, s)
	status, body, h := post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	if status != 503 || body != wantQueueFull || h.Get("Retry-After") != "" || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("second request: %d %q (Retry-After %q, Content-Type %q); want 503 %s, no Retry-After", status, body, h.Get("Retry-After"), h.Get("Content-Type"), wantQueueFull)
	}
	if got := scrape(t, url)["vllm:admission_rejections_total"]; got != 1 {
		t.Errorf("vllm:admission_rejections_total = %v, want 1", got)
	}
	release()
	if status, body, _ := post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); status != 200 {
		t.Fatalf("after the first ended: %d %s, want 200", status, body)
	}
}

// TestAdmissionQueuedTokens: with --max-num-queued-tokens 1 and a slow
// prefill, a request is refused with the backlog message while another's
// prompt awaits its first token, and admitted once that token is out
// although the first request still decodes.
func TestAdmissionQueuedTokens(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.PrefillTokensPerS = 10 // a 20-token prompt takes two seconds
	cfg.Engine.MaxBatchedTokens = 0
	cfg.Admission.MaxNumQueuedTokens = 1
	url, s := startSim(t, cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"Tell me about prefix caches in serving engines."}],"max_tokens":1}`)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.admit.tokens.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	status, body, _ := post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
	if status != 503 || body != wantTokenBacklog {
		t.Fatalf("while a prompt prefills: %d %q, want 503 %s", status, body, wantTokenBacklog)
	}
	<-done
	cfg.Engine.PrefillTokensPerS = 1e6
	cfg.Engine.DecodeBaseMs = 20
	url, s = startSim(t, cfg)
	release := holdStream(t, url, chatBody(`,"max_tokens":1000,"ignore_eos":true`), true, s)
	defer release()
	if status, body, _ := post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`); status != 200 {
		t.Fatalf("while the other decodes: %d %s, want 200", status, body)
	}
}

package proxy

import (
	"testing"

	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/policy"
)

// TestLlamaBackendCountHostileFirst: on the real llama.cpp server, the
// first requests after start are ones whose count the server refuses (a
// 400 for a content part it does not know, a 500 for a tool it cannot
// parse); they are estimated, the form is still learned (by the probe,
// not by them), and the requests after them are counted exactly.
func TestLlamaBackendCountHostileFirst(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 2, Context: 4096})
	cfg := testConfig(srv.URL)
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerBackend}
	cfg.Shaping.Global.MaxTokens = 1 << 30
	gw := startGateway(t, cfg)
	b := gw.state.Load().pools["p"].backends[0]
	for _, h := range []string{
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"bogus","text":"x"}]}]}`,
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"nope"}]}`,
	} {
		if status, _, resp := post(t, gw.URL, "/v1/chat/completions", h); status < 400 {
			t.Errorf("%s: %d %.200s; llama.cpp refuses it", h, status, resp)
		}
		if f := countForm(b.counts.form.Load()); f != formInputTokens {
			t.Fatalf("after %s: form %s, want input_tokens", h, f)
		}
	}
	for i, body := range llamaCountBodies()[:4] {
		if counted, served := countedVsServed(t, gw, "/v1/chat/completions", body); counted != served || served == 0 {
			t.Errorf("request %d: the gateway counted %d, llama.cpp %d", i, counted, served)
		}
	}
	if e, n := b.counts.by[formNone].Load(), b.counts.by[formInputTokens].Load(); e != 2 || n != 4 {
		t.Errorf("%d estimated, %d counted; want the 2 refused and the 4 others", e, n)
	}
}

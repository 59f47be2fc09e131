package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
)

// countServer is a backend that counts prompts in one server's dialect,
// as that server answers each form (ENGINES.md; llama.cpp's
// tools/server/server-context.cpp): its chat answers' usage.prompt_tokens
// is its own count, so the gateway's count can be held to it.
type countServer struct {
	*testBackend
	mu      sync.Mutex
	dialect string // vllm, llamacpp, llamacpp-old (no input_tokens), fastapi (422), none
	fail    atomic.Bool
	hits    map[string]int
}

// countPrompt is the fake's template and tokenizer: a BOS, four tokens of
// framing per message, two per word of content, and one per 8 bytes of
// tools (or per 8 bytes of a Responses input). Nothing like the
// gateway's estimate, so an estimate cannot pass for it.
func countPrompt(body []byte) int {
	var r struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		Tools json.RawMessage `json:"tools"`
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &r) != nil {
		return 0
	}
	n := 1 + len(r.Tools)/8 + len(r.Input)/8
	for _, m := range r.Messages {
		n += 4 + 2*len(strings.Fields(m.Content))
	}
	return n
}

func startCountServer(t *testing.T, dialect string) *countServer {
	s := &countServer{dialect: dialect, hits: map[string]int{}}
	s.testBackend = newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.hits[r.URL.Path]++
		d := s.dialect
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		answer := func(v any) { b, _ := json.Marshal(v); w.Write(b) }
		llama := d == "llamacpp" || d == "llamacpp-old"
		switch {
		case r.URL.Path == "/v1/chat/completions":
			answer(map[string]any{"id": "c", "object": "chat.completion", "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
				"usage": map[string]any{"prompt_tokens": countPrompt(body), "completion_tokens": 1, "total_tokens": countPrompt(body) + 1}})
		case r.URL.Path == "/v1/responses":
			answer(map[string]any{"id": "resp_1", "object": "response", "status": "completed", "output": []any{},
				"usage": map[string]any{"input_tokens": countPrompt(body), "output_tokens": 1, "total_tokens": countPrompt(body) + 1}})
		case s.fail.Load():
			w.WriteHeader(500)
			w.Write([]byte(`{"error":{"code":500,"message":"boom","type":"server_error"}}`))
		case r.URL.Path == "/tokenize" && d == "fastapi":
			// A server whose /tokenize takes another body: FastAPI's 422.
			w.WriteHeader(422)
			w.Write([]byte(`{"detail":[{"type":"missing","loc":["body","prompt"],"msg":"Field required"}]}`))
		case r.URL.Path == "/tokenize" && d == "vllm" && strings.Contains(string(body), `"type":"bogus"`):
			// vLLM's validation of a message part it does not know.
			w.WriteHeader(422)
			w.Write([]byte(`{"detail":[{"type":"literal_error","loc":["body","messages",0,"content",0,"type"],"msg":"Input should be 'text'"}]}`))
		case r.URL.Path == "/tokenize" && d == "vllm" && strings.Contains(string(body), "say nothing"):
			// An answer that is no count.
			answer(map[string]any{"count": 0, "tokens": []int{}})
		case r.URL.Path == "/tokenize" && d == "vllm" && strings.Contains(string(body), "say garbage"):
			w.Write([]byte(`<html>proxy error</html>`))
		case r.URL.Path == "/tokenize" && d == "vllm":
			n := countPrompt(body)
			answer(map[string]any{"count": n, "max_model_len": 4096, "tokens": make([]int, n), "token_strs": nil})
		case r.URL.Path == "/tokenize" && llama:
			// The content form only; any other body is 200 {"tokens":[]}.
			var c struct {
				Content    *string `json:"content"`
				AddSpecial bool    `json:"add_special"`
			}
			json.Unmarshal(body, &c)
			toks := []int{}
			if c.Content != nil {
				toks = make([]int, len(strings.Fields(*c.Content)))
				if c.AddSpecial {
					toks = append(toks, 1) // the BOS
				}
			}
			answer(map[string]any{"tokens": toks})
		case (r.URL.Path == "/v1/chat/completions/input_tokens" || r.URL.Path == "/v1/responses/input_tokens") && d == "llamacpp":
			answer(map[string]any{"input_tokens": countPrompt(body), "object": "response.input_tokens"})
		case r.URL.Path == "/apply-template" && llama:
			// The prompt the template renders: as many words as the
			// prompt has tokens, less the BOS /tokenize adds.
			answer(map[string]any{"prompt": strings.TrimSpace(strings.Repeat("w ", countPrompt(body)-1))})
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`))
		}
	})
	return s
}

func (s *countServer) hit(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

func (s *countServer) setDialect(d string) {
	s.mu.Lock()
	s.dialect = d
	s.mu.Unlock()
}

// countGateway is a gateway whose policy counts every chat prompt with
// the backend's count (a token cap asks for the count of each).
func countGateway(t *testing.T, url string) *testGateway {
	cfg := testConfig(url)
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerBackend}
	cfg.Shaping.Global.MaxTokens = 1 << 30
	return startGateway(t, cfg)
}

// countedVsServed sends a request and returns the gateway's count
// (X-Infergate-Input-Tokens) and the server's usage of the prompt.
func countedVsServed(t *testing.T, gw *testGateway, path, body string) (counted, served int) {
	t.Helper()
	status, h, resp := post(t, gw.URL, path, body)
	if status != 200 {
		t.Fatalf("%s: %d %s", body, status, resp)
	}
	var u struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			InputTokens  int `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(resp), &u); err != nil {
		t.Fatalf("%s: %v", resp, err)
	}
	counted, _ = strconv.Atoi(h.Get("X-Infergate-Input-Tokens"))
	return counted, u.Usage.PromptTokens + u.Usage.InputTokens
}

var countBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`,
	`{"model":"m","messages":[{"role":"system","content":"Be terse, always."},{"role":"user","content":"Ünïcödé – 東京 🚀 works?"},{"role":"assistant","content":"yes it does"},{"role":"user","content":"and now?"}]}`,
	`{"model":"m","stream":false,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"messages":[{"role":"user","content":"weather in Paris"}]}`,
}

// TestBackendCountForms: each server's dialect of counting is learned
// with the probe on the first request and then used alone, and the gateway's count is the
// server's own count of the prompt it serves, tools included.
func TestBackendCountForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dialect string
		form    countForm
		// calls each path got for len(countBodies) requests
		calls map[string]int
	}{
		{"vLLM and SGLang: /tokenize with messages", "vllm", formTokenize,
			map[string]int{"/tokenize": 1 + 3, "/v1/chat/completions/input_tokens": 0, "/apply-template": 0}},
		// /tokenize's 200 {"tokens":[]} is not a count: probed once,
		// then input_tokens alone.
		{"llama.cpp: input_tokens", "llamacpp", formInputTokens,
			map[string]int{"/tokenize": 1, "/v1/chat/completions/input_tokens": 1 + 3, "/apply-template": 0}},
		// Without input_tokens (404): the template, then its tokens.
		{"older llama.cpp: apply-template and tokenize", "llamacpp-old", formApplyTemplate,
			map[string]int{"/tokenize": 2 + 3, "/v1/chat/completions/input_tokens": 1, "/apply-template": 1 + 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startCountServer(t, tc.dialect)
			gw := countGateway(t, s.URL)
			for _, body := range countBodies {
				if counted, served := countedVsServed(t, gw, "/v1/chat/completions", body); counted != served || counted == 0 {
					t.Errorf("%s: the gateway counted %d, the server %d", body, counted, served)
				}
			}
			for path, want := range tc.calls {
				if got := s.hit(path); got != want {
					t.Errorf("POST %s: %d calls, want %d", path, got, want)
				}
			}
			b := gw.state.Load().pools["p"].backends[0]
			if f := countForm(b.counts.form.Load()); f != tc.form || b.counts.by[tc.form].Load() != int64(len(countBodies)) || b.counts.by[formNone].Load() != 0 {
				t.Errorf("learned %s, counts %d by it and %d estimated", f, b.counts.by[tc.form].Load(), b.counts.by[formNone].Load())
			}
			if !strings.Contains(gw.logs.String(), "form="+tc.form.String()) {
				t.Errorf("the learned form is not logged:\n%s", gw.logs)
			}
		})
	}
}

// TestBackendCountResponses: a Responses request on llama.cpp is counted
// by its own /v1/responses/input_tokens, the request as sent.
func TestBackendCountResponses(t *testing.T) {
	t.Parallel()
	s := startCountServer(t, "llamacpp")
	gw := countGateway(t, s.URL)
	body := `{"model":"m","instructions":"Be terse.","input":[{"role":"user","content":[{"type":"input_text","text":"hello there, how are you"}]}]}`
	if counted, served := countedVsServed(t, gw, "/v1/responses", body); counted != served || counted == 0 {
		t.Errorf("the gateway counted %d, the server %d", counted, served)
	}
	// The form is learned with the probe, a chat request.
	if s.hit("/v1/responses/input_tokens") != 1 || s.hit("/v1/chat/completions/input_tokens") != 1 {
		t.Errorf("calls %v", s.hits)
	}
}

// TestBackendCountNone: a backend that counts in no form is estimated,
// said once in the log and in the metric on every request, and not asked
// again on every request: only after countRelearn.
func TestBackendCountNone(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"none", "fastapi"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testBackendCountNone(t, dialect)
		})
	}
}

func testBackendCountNone(t *testing.T, dialect string) {
	s := startCountServer(t, dialect)
	gw := countGateway(t, s.URL)
	for range 3 {
		if counted, served := countedVsServed(t, gw, "/v1/chat/completions", countBodies[1]); counted == served || counted == 0 {
			t.Errorf("counted %d, served %d: an estimate was expected", counted, served)
		}
	}
	if got := s.hit("/tokenize") + s.hit("/v1/chat/completions/input_tokens") + s.hit("/apply-template"); got != 3 {
		t.Errorf("%d count calls for 3 requests, want the 3 forms probed once", got)
	}
	b := gw.state.Load().pools["p"].backends[0]
	if n := b.counts.by[formNone].Load(); n != 3 {
		t.Errorf("%d requests counted as estimated, want 3", n)
	}
	if logs := gw.logs.String(); strings.Count(logs, "gives no token count") != 1 {
		t.Errorf("want one warning:\n%s", logs)
	}
	// Past countRelearn the forms are tried again: the server may have
	// been upgraded.
	s.setDialect("llamacpp")
	b.counts.retry.Store(time.Now().Add(-time.Second).UnixNano())
	if counted, served := countedVsServed(t, gw, "/v1/chat/completions", countBodies[0]); counted != served {
		t.Errorf("after the retry: counted %d, served %d", counted, served)
	}
	if f := countForm(b.counts.form.Load()); f != formInputTokens {
		t.Errorf("learned %s", f)
	}
}

// TestBackendCountChanges: a learned form that fails for one request
// leaves the estimate for it (logged and counted) but stays learned; one
// that the server stops speaking (a 404) is learned again at once.
func TestBackendCountChanges(t *testing.T) {
	t.Parallel()
	s := startCountServer(t, "llamacpp")
	gw := countGateway(t, s.URL)
	b := gw.state.Load().pools["p"].backends[0]
	if c, sv := countedVsServed(t, gw, "/v1/chat/completions", countBodies[0]); c != sv {
		t.Fatalf("counted %d, served %d", c, sv)
	}
	s.fail.Store(true)
	if c, sv := countedVsServed(t, gw, "/v1/chat/completions", countBodies[1]); c == sv || c == 0 {
		t.Errorf("a failed count: counted %d, served %d", c, sv)
	}
	s.fail.Store(false)
	if f := countForm(b.counts.form.Load()); f != formInputTokens || b.counts.by[formNone].Load() != 1 {
		t.Errorf("after a 500: form %s, %d estimated", f, b.counts.by[formNone].Load())
	}
	if !strings.Contains(gw.logs.String(), "backend token count failed") {
		t.Errorf("the fallback is not logged:\n%s", gw.logs)
	}
	probes := s.hit("/tokenize")
	// The server is replaced by a vLLM: input_tokens is a 404.
	s.setDialect("vllm")
	if c, sv := countedVsServed(t, gw, "/v1/chat/completions", countBodies[2]); c != sv {
		t.Errorf("after the change: counted %d, served %d", c, sv)
	}
	// The probe on input_tokens confirms the 404; /tokenize: the probe,
	// then the request.
	if f := countForm(b.counts.form.Load()); f != formTokenize || s.hit("/tokenize") != probes+2 {
		t.Errorf("form %s after the change; /tokenize calls %d → %d", f, probes, s.hit("/tokenize"))
	}
}

// TestBackendCountUpstreamModel: the backend is asked with the model name
// it serves, in every form.
func TestBackendCountUpstreamModel(t *testing.T) {
	t.Parallel()
	var got []string
	var mu sync.Mutex
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		env, _ := openai.ScanRequest(body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+env.Model)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/chat/completions/input_tokens":
			w.Write([]byte(`{"input_tokens":9}`))
		case "/tokenize":
			w.Write([]byte(`{"tokens":[]}`))
		default:
			w.Write([]byte(`{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`))
		}
	})
	cfg := testConfig(be.URL)
	cfg.Models[0].UpstreamModel = "served-name"
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerBackend}
	cfg.Shaping.Global.MaxTokens = 1 << 30
	gw := startGateway(t, cfg)
	if c, sv := countedVsServed(t, gw, "/v1/chat/completions", countBodies[0]); c != 9 || sv != 9 {
		t.Errorf("counted %d, served %d", c, sv)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/tokenize served-name", "/v1/chat/completions/input_tokens served-name", "/v1/chat/completions/input_tokens served-name", "/v1/chat/completions served-name"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// TestBackendCountHostile: a client's request whose count the server
// refuses (vLLM's 422 for a message part its validation rejects, a count
// of 0, an answer that is not JSON) is estimated alone: the form is
// learned with the gateway's probe, never with that request, and stays
// learned, so every other tenant's requests are still counted exactly.
func TestBackendCountHostile(t *testing.T) {
	t.Parallel()
	s := startCountServer(t, "vllm")
	gw := countGateway(t, s.URL)
	b := gw.state.Load().pools["p"].backends[0]
	hostile := []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"bogus","text":"x"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"say nothing"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"say garbage"}]}`,
	}
	// The first request after start is hostile: it does not decide the form.
	for round := range 3 {
		for _, h := range hostile {
			if status, _, resp := post(t, gw.URL, "/v1/chat/completions", h); status != 200 {
				t.Fatalf("%s: %d %s", h, status, resp)
			}
			if f := countForm(b.counts.form.Load()); f != formTokenize {
				t.Fatalf("round %d, after %s: form %s, want tokenize", round, h, f)
			}
		}
		for _, body := range countBodies {
			if counted, served := countedVsServed(t, gw, "/v1/chat/completions", body); counted != served || counted == 0 {
				t.Errorf("round %d, %s: the gateway counted %d, the server %d", round, body, counted, served)
			}
		}
	}
	if n := b.counts.by[formNone].Load(); n != 9 {
		t.Errorf("%d requests estimated, want the 9 hostile ones", n)
	}
	if n := b.counts.by[formTokenize].Load(); n != 9 {
		t.Errorf("%d requests counted, want the 9 others", n)
	}
	// No relearning: the other forms were never tried; /tokenize had the
	// probe that learned it, one call a request, and one probe that
	// checked it (at most one a countRelearn).
	if s.hit("/v1/chat/completions/input_tokens") != 0 || s.hit("/apply-template") != 0 || s.hit("/tokenize") != 2+18 {
		t.Errorf("count calls %v", s.hits)
	}
	logs := gw.logs.String()
	if strings.Count(logs, "backend token count failed") != 1 || strings.Contains(logs, "no longer counts") || strings.Contains(logs, "gives no token count") {
		t.Errorf("want one rate-limited warning of a failed count:\n%s", logs)
	}
}

// TestBackendCountSwaps: servers replaced twice within a minute are
// learned again each time (the probe confirms the 404), and said once.
func TestBackendCountSwaps(t *testing.T) {
	t.Parallel()
	s := startCountServer(t, "llamacpp")
	gw := countGateway(t, s.URL)
	b := gw.state.Load().pools["p"].backends[0]
	for i, step := range []struct {
		dialect string
		form    countForm
	}{{"llamacpp", formInputTokens}, {"vllm", formTokenize}, {"llamacpp", formInputTokens}} {
		s.setDialect(step.dialect)
		if c, sv := countedVsServed(t, gw, "/v1/chat/completions", countBodies[i]); c != sv {
			t.Errorf("%s: counted %d, served %d", step.dialect, c, sv)
		}
		if f := countForm(b.counts.form.Load()); f != step.form {
			t.Errorf("%s: form %s, want %s", step.dialect, f, step.form)
		}
	}
	if n := strings.Count(gw.logs.String(), "no longer counts"); n != 1 {
		t.Errorf("%d warnings of a form gone, want 1:\n%s", n, gw.logs)
	}
}

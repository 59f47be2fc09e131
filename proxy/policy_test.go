package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/sim/simtest"
	"github.com/infergate/infergate/tracing"
)

func sha256Key(k string) string {
	s := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(s[:])
}

// longChatBody is a chat of turns user/assistant pairs of about 40 words
// each after a system prompt, with extra members appended.
func longChatBody(model string, turns int, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"messages":[{"role":"system","content":"You are terse."}`, model)
	for i := range turns {
		words := strings.Repeat(fmt.Sprintf("turn %d says the queue is long and the batch is small ", i), 4)
		fmt.Fprintf(&b, `,{"role":"user","content":%q},{"role":"assistant","content":%q}`, "question "+words, "answer "+words)
	}
	fmt.Fprintf(&b, `,{"role":"user","content":"and the last question?"}]%s}`, extra)
	return b.String()
}

func policyConfig(url string) Config {
	cfg := testConfig(url)
	cfg.Auth.Required = true
	cfg.Tenants = map[string]TenantConfig{
		"acme":  {Tenant: policy.Tenant{APIKeys: []string{sha256Key("sk-acme-secret")}}},
		"small": {Tenant: policy.Tenant{APIKeys: []string{"sk-small-secret"}, Models: []string{"other"}}},
	}
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerCL100K, StreamUsage: true,
		Limits: policy.Limits{MaxInputTokens: 300, Trim: policy.DropOldest, MaxOutputTokens: 5}}
	return cfg
}

// TestPolicyEndToEnd sends a long chat through the gateway to the
// simulator: the simulator gets the trimmed request with the clamped
// output, the client is told by headers, the stream has no usage chunk
// the client did not ask for, and the request log attributes the length
// finish to the policy with the exact output count from that usage.
func TestPolicyEndToEnd(t *testing.T) {
	t.Parallel()
	s := simtest.Start(t, simtest.Fixed(time.Millisecond, time.Millisecond))
	cfg := policyConfig(s.URL)
	cfg.Models[0].UpstreamModel = "sim-model" // the policy's rewrite and the model's, together
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	cfg.RequestLog = tracing.LogConfig{Path: path}
	gw := startGateway(t, cfg)

	// The same chat straight to the simulator: how long it is untrimmed.
	long := longChatBody("m", 20, `,"ignore_eos":true`)
	_, _, direct := post(t, s.URL, "/v1/chat/completions", strings.Replace(long, `"model":"m"`, `"model":"sim-model"`, 1))
	var full openai.ChatResponse
	if err := json.Unmarshal([]byte(direct), &full); err != nil || full.Usage == nil || full.Usage.PromptTokens < 1000 {
		t.Fatalf("the untrimmed chat: %s", direct)
	}

	status, h, body := post(t, gw.URL, "/v1/chat/completions", long, "Authorization", "Bearer sk-acme-secret")
	var resp openai.ChatResponse
	if status != 200 || json.Unmarshal([]byte(body), &resp) != nil || resp.Usage == nil {
		t.Fatalf("%d %s", status, body)
	}
	trimmed, _ := strconv.Atoi(h.Get("X-Infergate-Trimmed-Tokens"))
	if trimmed < 1000 || h.Get("X-Infergate-Max-Tokens-Clamped") != "5" || h.Get("X-Infergate-Max-Tokens-Requested") != "none" {
		t.Errorf("headers: %v", h)
	}
	if p := resp.Usage.PromptTokens; p > 300 || p < 100 {
		t.Errorf("the simulator counted %d prompt tokens, want the trimmed ≤ 300 (untrimmed %d)", p, full.Usage.PromptTokens)
	}
	if resp.Usage.CompletionTokens != 5 || *resp.Choices[0].FinishReason != "length" {
		t.Errorf("output %d tokens, finish %s; want the clamp's 5 and length", resp.Usage.CompletionTokens, *resp.Choices[0].FinishReason)
	}

	// A stream that did not ask for usage: the gateway asked, and took
	// the usage chunk out.
	stream := longChatBody("m", 20, `,"ignore_eos":true,"stream":true,"max_tokens":9000`)
	status, h, body = post(t, gw.URL, "/v1/chat/completions", stream, "Authorization", "Bearer sk-acme-secret")
	if status != 200 || h.Get("X-Infergate-Max-Tokens-Requested") != "9000" {
		t.Fatalf("%d %v", status, h)
	}
	evs := events(body)
	for _, e := range evs {
		if strings.Contains(e, `"usage"`) {
			t.Errorf("the client got a usage chunk it did not ask for: %s", e)
		}
	}
	if len(evs) < 3 || evs[len(evs)-1] != "[DONE]" {
		t.Errorf("events %q", evs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gw.Shutdown(ctx)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), raw)
	}
	for _, l := range lines {
		var e tracing.Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.Tenant != "acme" || !e.LengthByPolicy || e.Policy == nil || e.Policy.TrimmedTokens < 1000 || e.Policy.MaxTokens != 5 ||
			e.OutputTokens != 5 || e.Policy.InputTokens > 300 {
			t.Errorf("entry %s", l)
		}
	}
	if strings.Contains(string(raw)+gw.logs.String(), "sk-acme-secret") {
		t.Error("a key reached the logs")
	}
	if !strings.Contains(gw.logs.String(), "length_by_policy=true") {
		t.Error("the log line does not attribute the length finish to the policy")
	}
}

func TestPolicyAuthAndModels(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	})
	gw := startGateway(t, policyConfig(b.URL))
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no key", "", plainBody, 401, "invalid_api_key"},
		{"unknown key", "Bearer sk-guess", plainBody, 401, "invalid_api_key"},
		{"wrong scheme", "Basic sk-acme-secret", plainBody, 401, "invalid_api_key"},
		{"a model the tenant may not use", "Bearer sk-small-secret", plainBody, 403, "model_not_allowed"},
		{"malformed messages", "Bearer sk-acme-secret", `{"model":"m","messages":[{"content":"` + strings.Repeat("x ", 400) + `"}]}`, 400, "invalid_value"},
		{"a role of the wrong type", "Bearer sk-acme-secret", `{"model":"m","messages":[{"role":["user"],"content":"` + strings.Repeat("x ", 400) + `"}]}`, 400, "invalid_value"},
		{"too long to trim", "Bearer sk-acme-secret", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 400) + `"}]}`, 400, "context_length_exceeded"},
		{"allowed", "Bearer sk-acme-secret", plainBody, 200, ""},
	} {
		before := b.requests.Load()
		status, h, body := post(t, gw.URL, "/v1/chat/completions", tc.body, "Authorization", tc.key)
		var e struct{ Error openai.Error }
		_ = json.Unmarshal([]byte(body), &e)
		switch {
		case status != tc.status:
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		case tc.code != "" && (e.Error.Code == nil || *e.Error.Code != tc.code || e.Error.Type != openai.TypeInvalidRequest):
			t.Errorf("%s: %s, want code %s", tc.name, body, tc.code)
		case tc.status == 401 && h.Get("WWW-Authenticate") == "":
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		case tc.status != 200 && b.requests.Load() != before:
			t.Errorf("%s: the refused request reached the backend", tc.name)
		}
	}
	// The model list needs a key too.
	req, _ := http.NewRequest("GET", gw.URL+"/v1/models", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("GET /v1/models without a key: %v %v", resp.StatusCode, err)
	}
	if strings.Contains(gw.logs.String(), "secret") {
		t.Error("a key reached the log")
	}
}

// TestPolicyPassThroughIsByteIdentical: a request the policy does not
// change reaches the backend as the exact bytes the client sent.
func TestPolicyPassThroughIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	})
	gw := startGateway(t, policyConfig(b.URL))
	sent := "{ \"messages\" : [ {\"content\":\"caf\\u00e9 \\ud83d\\ude00\", \"role\":\"user\",\"x-vendor\":{\"a\":[1,2.50,null]}} ],\n\t\"model\":\"m\", \"max_tokens\" : 4 , \"temperature\":1e-1}"
	status, h, _ := post(t, gw.URL, "/v1/chat/completions", sent, "Authorization", "Bearer sk-acme-secret")
	if status != 200 || h.Get("X-Infergate-Max-Tokens-Clamped") != "" {
		t.Fatalf("%d %v", status, h)
	}
	if _, got := b.last(); got != sent {
		t.Errorf("the backend got\n%s\nthe client sent\n%s", got, sent)
	}
	// Output caps are for the completion routes: an embeddings request
	// gets no max_tokens.
	emb := `{"model":"m","input":"hello"}`
	if status, _, _ := post(t, gw.URL, "/v1/embeddings", emb, "Authorization", "Bearer sk-acme-secret"); status != 200 {
		t.Fatalf("embeddings: %d", status)
	}
	if _, got := b.last(); got != emb {
		t.Errorf("the embeddings request became %s", got)
	}
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	cfg := testConfig(b.URL)
	cfg.Server.AdminAuth = sha256Key("admin-secret")
	gw := startGateway(t, cfg)
	get := func(path, key string) int {
		req, _ := http.NewRequest("GET", gw.AdminURL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, key string
		want      int
	}{
		{"/metrics", "", 401}, {"/metrics", "wrong", 401}, {"/metrics", "admin-secret", 200},
		{"/admin/stats", "", 401}, {"/admin/stats", "admin-secret", 200},
		{"/healthz", "", 200},
	} {
		if got := get(tc.path, tc.key); got != tc.want {
			t.Errorf("%s with key %q: %d, want %d", tc.path, tc.key, got, tc.want)
		}
	}
}

// TestPolicyReload: a reload changes the policy; a refused one changes
// nothing; the deprecated shaping.tenants still names tenants, with a
// warning.
func TestPolicyReload(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
	})
	cfg := policyConfig(b.URL)
	gw := startGateway(t, cfg)
	clamped := func() string {
		_, h, _ := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":100}`, "Authorization", "Bearer sk-acme-secret")
		return h.Get("X-Infergate-Max-Tokens-Clamped")
	}
	if got := clamped(); got != "5" {
		t.Fatalf("clamped to %q", got)
	}
	next := policyConfig(b.URL)
	next.Policy.MaxOutputTokens = 50
	if err := gw.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := clamped(); got != "50" {
		t.Fatalf("after reload clamped to %q", got)
	}
	bad := policyConfig(b.URL)
	bad.Policy.MaxOutputTokens = 7
	bad.Policy.Models = map[string]policy.Model{"m": {Tokenizer: "p50k_bas"}}
	if err := gw.Reload(bad); err == nil || !strings.Contains(err.Error(), "policy.models.m.tokenizer") {
		t.Fatalf("a bad tokenizer: %v", err)
	}
	if got := clamped(); got != "50" {
		t.Fatalf("a refused reload changed the clamp to %q", got)
	}
}

// TestBackendTokenizer: with tokenizer "backend" the prompt is counted by
// the backend's /tokenize (the simulator's, vLLM's form), exactly as the
// backend then counts it, and trimmed by that count.
func TestBackendTokenizer(t *testing.T) {
	t.Parallel()
	s := simtest.Start(t, simtest.Fixed(time.Millisecond, time.Millisecond))
	cfg := testConfig(s.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerBackend, Limits: policy.Limits{MaxInputTokens: 400, Trim: policy.DropOldest}}
	gw := startGateway(t, cfg)
	status, h, body := post(t, gw.URL, "/v1/chat/completions", longChatBody("m", 10, `,"max_tokens":2`))
	var resp openai.ChatResponse
	if status != 200 || json.Unmarshal([]byte(body), &resp) != nil || resp.Usage == nil {
		t.Fatalf("%d %s", status, body)
	}
	counted, _ := strconv.Atoi(h.Get("X-Infergate-Input-Tokens"))
	if counted > 400 || h.Get("X-Infergate-Trimmed-Tokens") == "" {
		t.Errorf("headers %v", h)
	}
	// The backend's count of what it got is within the rounding of the
	// proportional split of its count of the whole.
	if d := resp.Usage.PromptTokens - counted; d < -10 || d > 10 || resp.Usage.PromptTokens > 400 {
		t.Errorf("the gateway counted %d, the backend %d", counted, resp.Usage.PromptTokens)
	}
}

// TestLegacyShapingTenants: tenants under shaping.tenants still name
// their keys' requests, with a warning; one listed in both places is
// refused.
func TestLegacyShapingTenants(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
	})
	cfg := testConfig(b.URL)
	cfg.Auth.Required = true
	cfg.Shaping.Tenants = map[string]shaping.Tenant{"old": {APIKeys: []string{"sk-old-style"}, Cap: shaping.Cap{MaxRequests: 4}}}
	gw := startGateway(t, cfg)
	if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody, "Authorization", "Bearer sk-old-style"); status != 200 {
		t.Fatalf("a key under shaping.tenants: %d %s", status, body)
	}
	if !strings.Contains(gw.logs.String(), "shaping.tenants is deprecated") {
		t.Error("no deprecation warning")
	}
	both := testConfig(b.URL)
	both.Shaping.Tenants = map[string]shaping.Tenant{"dup": {}}
	both.Tenants = map[string]TenantConfig{"dup": {}}
	if _, err := New(both, nil); err == nil || !strings.Contains(err.Error(), "tenants.dup") {
		t.Errorf("a tenant in both places: %v", err)
	}
}

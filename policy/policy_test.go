package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func sha(key string) string {
	s := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestIdentify(t *testing.T) {
	c := Config{Auth: Auth{Required: true}, Tenants: map[string]Tenant{
		"team-a": {APIKeys: []string{"sk-alpha-1", sha("sk-alpha-2")}},
		"team-b": {APIKeys: []string{sha("sk-beta")}},
	}}
	p := mustCompile(t, c)
	for _, tc := range []struct {
		header, tenant string
		status         int
	}{
		{"Bearer sk-alpha-1", "team-a", 0},
		{"Bearer sk-alpha-2", "team-a", 0},
		{"bearer   sk-beta ", "team-b", 0},
		{"Bearer sk-nope", "", 401},
		{"", "", 401},
		{"Basic c2stYWxwaGEtMQ==", "", 401},
		{"Bearer " + strings.Repeat("x", 10000), "", 401},
	} {
		id, err := p.Identify([]byte(tc.header))
		var pe *Error
		switch {
		case tc.status == 0 && (err != nil || id.Tenant != tc.tenant || !id.Known):
			t.Errorf("%.30q: %+v, %v; want tenant %s", tc.header, id, err, tc.tenant)
		case tc.status != 0 && (!errors.As(err, &pe) || pe.Status != tc.status || pe.Code != "invalid_api_key"):
			t.Errorf("%.30q: %v, want %d invalid_api_key", tc.header, err, tc.status)
		case pe != nil && (strings.Contains(pe.Message, "sk-") || strings.Contains(pe.Message, "xxxx")):
			t.Errorf("the error repeats the key: %s", pe.Message)
		}
	}

	// Without auth.required an unknown key is a tenant of its own, named
	// by a hash that does not reveal the key.
	c.Auth.Required = false
	p = mustCompile(t, c)
	id, err := p.Identify([]byte("Bearer sk-unknown-secret"))
	if err != nil || id.Known || !strings.HasPrefix(id.Tenant, "key-") || strings.Contains(id.Tenant, "secret") || len(id.Tenant) != 16 {
		t.Errorf("unknown key: %+v, %v", id, err)
	}
	if id, _ := p.Identify(nil); id.Tenant != "anonymous" {
		t.Errorf("no key: %+v", id)
	}
}

func TestConfigErrorsNameTheFieldNotTheKey(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Tenants: map[string]Tenant{"a": {APIKeys: []string{"sha256:abc"}}}}, "tenants.a.api_keys[0]"},
		{Config{Tenants: map[string]Tenant{"a": {APIKeys: []string{"sk secret with space"}}}}, "tenants.a.api_keys[0]"},
		{Config{Tenants: map[string]Tenant{"a": {APIKeys: []string{"sk-dup"}}, "b": {APIKeys: []string{sha("sk-dup")}}}}, "tenants.b.api_keys[0]: a key of tenant a"},
		{Config{Auth: Auth{Required: true}}, "auth.required"},
		{Config{Limits: Limits{Trim: "chop"}}, "policy.trim"},
		{Config{Models: map[string]Model{"m": {Tokenizer: "p50k"}}}, "policy.models.m.tokenizer"},
		{Config{Models: map[string]Model{"m": {Limits: Limits{MaxInputTokens: -1}}}}, "policy.models.m"},
		{Config{Tenants: map[string]Tenant{"t": {Limits: Limits{MaxOutputTokens: -5}}}}, "tenants.t"},
	} {
		_, err := Compile(tc.c, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile: %v, want an error naming %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}

func TestModelNotAllowed(t *testing.T) {
	p := mustCompile(t, Config{Tenants: map[string]Tenant{"t": {APIKeys: []string{"k"}, Models: []string{"small", "medium"}}}})
	if _, err := apply(t, p, "t", chatBody(t, "medium", []msg{{"role": "user", "content": "hi"}}, nil)); err != nil {
		t.Fatalf("an allowed model: %v", err)
	}
	_, err := apply(t, p, "t", chatBody(t, "large", []msg{{"role": "user", "content": "hi"}}, nil))
	var pe *Error
	if !errors.As(err, &pe) || pe.Status != 403 || pe.Code != "model_not_allowed" || !strings.Contains(pe.Message, "large") {
		t.Fatalf("a model not allowed: %v", err)
	}
	// Other tenants are not limited by t's list.
	if _, err := apply(t, p, "other", chatBody(t, "large", []msg{{"role": "user", "content": "hi"}}, nil)); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

func TestPassThroughKeepsTheBytes(t *testing.T) {
	body := []byte(`{"model":"m",  "messages":[{"role":"user","content":"hi"}], "temperature":0.2, "max_tokens":50}`)
	for name, c := range map[string]Config{
		"no policy":       {},
		"under the limit": {Limits: Limits{MaxInputTokens: 1000, Trim: DropOldest, MaxOutputTokens: 100}},
	} {
		d, err := apply(t, mustCompile(t, c), "", body)
		if err != nil || d.Body != nil || d.Clamped || d.TrimmedTokens != 0 {
			t.Errorf("%s: %+v, %v; want the bytes forwarded as received", name, d, err)
		}
	}
}

func TestOutputCaps(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxOutputTokens: 256}})
	for _, tc := range []struct {
		body, want  string
		clampedFrom int
	}{
		{`{"model":"m","max_tokens":1000,"x":1}`, `{"model":"m","max_tokens":256,"x":1}`, 1000},
		{`{"model":"m","max_completion_tokens":4096}`, `{"model":"m","max_completion_tokens":256}`, 4096},
		{`{"model":"m","max_tokens":2000,"max_completion_tokens":900}`, `{"model":"m","max_tokens":256,"max_completion_tokens":256}`, 900},
		{`{"model":"m"}`, `{"model":"m","max_tokens":256}`, -1},
		{`{"model":"m","max_tokens":null }`, `{"model":"m","max_tokens":256 }`, -1},
		{`{"model":"m","max_tokens":100}`, ``, 0},
	} {
		d, err := apply(t, p, "", []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Body) != tc.want || (tc.want != "" && (!d.Clamped || d.ClampedFrom != tc.clampedFrom)) {
			t.Errorf("%s: %s (clamped %v from %d), want %s from %d", tc.body, d.Body, d.Clamped, d.ClampedFrom, tc.want, tc.clampedFrom)
		}
		if tc.want != "" && d.MaxTokens != 256 {
			t.Errorf("%s: MaxTokens %d", tc.body, d.MaxTokens)
		}
	}
	// A tenant's default below the ceiling; a bad value is refused.
	p = mustCompile(t, Config{Limits: Limits{MaxOutputTokens: 256},
		Tenants: map[string]Tenant{"t": {Limits: Limits{DefaultOutputTokens: 64}}}})
	if d, _ := apply(t, p, "t", []byte(`{"model":"m"}`)); string(d.Body) != `{"model":"m","max_tokens":64}` {
		t.Errorf("tenant default: %s", d.Body)
	}
	if _, err := apply(t, p, "t", []byte(`{"model":"m","max_tokens":"lots"}`)); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("a string max_tokens: %v", err)
	}
}

func TestStreamUsage(t *testing.T) {
	p := mustCompile(t, Config{StreamUsage: true})
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":null}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":{}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
	} {
		d, err := apply(t, p, "", []byte(tc.body))
		if err != nil || string(d.Body) != tc.want || !d.StripUsage {
			t.Errorf("%s: %s strip=%v %v, want %s", tc.body, d.Body, d.StripUsage, err, tc.want)
		}
	}
	for _, body := range []string{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, `{"model":"m"}`} {
		if d, _ := apply(t, p, "", []byte(body)); d.Body != nil || d.StripUsage {
			t.Errorf("%s: changed to %s", body, d.Body)
		}
	}
}

func TestMalformedMessagesNameTheField(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 5}})
	for body, field := range map[string]string{
		`{"model":"m","messages":"hello there, a long string"}`:                                "messages:",
		`{"model":"m","messages":[{"content":"no role at all, and long"}]}`:                    "messages[0].role: missing",
		`{"model":"m","messages":[{"role":"user","content":"ok"},{"role":7,"content":"x"}]}`:   "messages[1].role",
		`{"model":"m","messages":[{"role":"user","content":{"text":"an object, not parts"}}]}`: "messages[0].content",
		`{"model":"m","messages":[{"role":"user","content":[42, "not parts either"]}]}`:        "messages[0].content[0]",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`:      "messages[0].content[0].text",
		`{"model":"m","messages":["a string message that is long"]}`:                           "messages[0]",
		`{"model":"m","messages":[{"role":"assistant","tool_calls":{"id":"x"}}]}`:              "messages[0].tool_calls",
		`{"model":"m","prompt":"no messages at all, and long enough"}`:                         "messages: missing",
	} {
		_, err := apply(t, p, "", []byte(body))
		var pe *Error
		if !errors.As(err, &pe) || pe.Status != 400 || !strings.Contains(pe.Message, field) {
			t.Errorf("%s: %v, want 400 naming %q", body, err, field)
		}
	}
}

func TestReject(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 100, Trim: Reject}, Tokenizer: TokenizerCL100K})
	body := chatBody(t, "m", longChat(10, 30), nil)
	_, err := apply(t, p, "", body)
	var pe *Error
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Code != "context_length_exceeded" || !strings.Contains(pe.Message, "at most 100") {
		t.Fatalf("%v", err)
	}
}

func TestDropOldest(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 2000, Trim: DropOldest}, Tokenizer: TokenizerCL100K})
	in := longChat(100, 60) // about 13k tokens
	body := chatBody(t, "m", in, map[string]any{"temperature": 0.3, "vendor_extension": map[string]any{"keep": []int{1, 2}}})
	d, err := apply(t, p, "", body)
	if err != nil {
		t.Fatal(err)
	}
	out := messagesOf(t, d.Body)
	if d.InputTokens > 2000 || d.TrimmedTokens <= 0 || d.TrimmedMessages != len(in)-len(out) {
		t.Fatalf("%+v", d)
	}
	// Count what was sent again, independently of the decision.
	counter := mustCompile(t, Config{Tokenizer: TokenizerCL100K})
	check, err := counter.Apply(Request{Model: "m", Body: d.Body, Env: scan(t, d.Body), Chat: true, Count: true})
	if err != nil || check.InputTokens != d.InputTokens {
		t.Fatalf("the trimmed body counts %d tokens (%v); the decision said %d", check.InputTokens, err, d.InputTokens)
	}
	if out[0]["role"] != "system" || out[1]["role"] != "user" {
		t.Errorf("the system prompt must stay and a user turn follow it: %v, %v", out[0]["role"], out[1]["role"])
	}
	last := in[len(in)-1]
	if out[len(out)-1]["content"] != last["content"] {
		t.Errorf("the newest message was dropped")
	}
	// Every kept tool result has its call, every kept call its results.
	calls, results := map[string]bool{}, map[string]bool{}
	for _, m := range out {
		if tc, ok := m["tool_calls"].([]any); ok {
			for _, c := range tc {
				calls[c.(map[string]any)["id"].(string)] = true
			}
		}
		if id, ok := m["tool_call_id"].(string); ok {
			results[id] = true
		}
	}
	for id := range results {
		if !calls[id] {
			t.Errorf("tool result %s kept without its call", id)
		}
	}
	for id := range calls {
		if !results[id] {
			t.Errorf("tool call %s kept without its result", id)
		}
	}
	if len(calls) == 0 {
		t.Errorf("no tool call survived: the test does not test pairs")
	}
	// Every member the trim did not mean to change is byte-identical.
	for _, k := range []string{`"temperature":0.3`, `"vendor_extension":{"keep":[1,2]}`, `"model":"m"`} {
		if !bytes.Contains(d.Body, []byte(k)) {
			t.Errorf("%s lost", k)
		}
	}
}

func TestDropOldestRefusesWhenTheNewestTurnIsTooLong(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 50, Trim: DropOldest}, Tokenizer: TokenizerCL100K})
	_, err := apply(t, p, "", chatBody(t, "m", []msg{{"role": "user", "content": words(200, 0)}}, nil))
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != "context_length_exceeded" {
		t.Fatalf("%v", err)
	}
}

func TestTruncateMiddle(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 600, Trim: TruncateMiddle}, Tokenizer: TokenizerO200K})
	doc := "HEAD-MARKER " + words(3000, 5) + " TAIL-MARKER"
	in := []msg{
		{"role": "system", "content": "Summarise the document."},
		{"role": "user", "content": []any{
			msg{"type": "text", "text": "See the picture too."},
			msg{"type": "image_url", "image_url": msg{"url": "data:image/png;base64,iVBORw0KGgo="}},
		}},
		{"role": "user", "content": doc},
	}
	body := chatBody(t, "m", in, nil)
	d, err := apply(t, p, "", body)
	if err != nil {
		t.Fatal(err)
	}
	out := messagesOf(t, d.Body)
	if len(out) != 3 || d.InputTokens > 600 || d.TrimmedTokens < 2000 {
		t.Fatalf("%d messages, %+v", len(out), d)
	}
	s := out[2]["content"].(string)
	if !strings.HasPrefix(s, "HEAD-MARKER gateway") || !strings.HasSuffix(s, "TAIL-MARKER") || !strings.Contains(s, truncateMarker) {
		t.Errorf("head and tail not kept: %.40q ... %.40q", s, s[max(0, len(s)-40):])
	}
	// The multimodal message is byte-identical.
	first, _ := json.Marshal(in[1])
	if !bytes.Contains(d.Body, first) {
		t.Errorf("the image message changed")
	}
}

func TestDuplicatedMembersAreRefused(t *testing.T) {
	p := mustCompile(t, Config{Limits: Limits{MaxOutputTokens: 10}})
	for body, field := range map[string]string{
		`{"model":"m","max_tokens":5,"max_tokens":5000}`:                         "max_tokens",
		`{"model":"m","messages":[],"messages":[{"role":"user","content":"x"}]}`: "messages",
		`{"model":"m","stream":true,"stream_options":{},"stream_options":null}`:  "stream_options",
	} {
		_, err := apply(t, p, "", []byte(body))
		var pe *Error
		if !errors.As(err, &pe) || pe.Status != 400 || !strings.HasPrefix(pe.Message, field+":") {
			t.Errorf("%s: %v, want 400 naming %s", body, err, field)
		}
	}
}

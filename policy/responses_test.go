package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/infergate/infergate/openai"
)

func applyResponses(t *testing.T, p *Policy, body []byte) (Decision, error) {
	t.Helper()
	env, err := openai.ScanRequest(body)
	if err != nil {
		t.Fatalf("ScanRequest: %v", err)
	}
	return p.Apply(Request{Model: env.Model, Body: body, Env: env, Responses: true, Count: true})
}

// TestResponsesInput: a Responses request's input items are counted as
// the same conversation sent as chat messages counts, trimmed by whole
// turns with a function call and its output kept together, and
// instructions always kept.
func TestResponsesInput(t *testing.T) {
	p := mustCompile(t, Config{Tokenizer: TokenizerCL100K})
	chat := chatBody(t, "m", []msg{{"role": "system", "content": "Be terse."}, {"role": "user", "content": "What is a KV cache?"}}, nil)
	resp := []byte(`{"model":"m","instructions":"Be terse.","input":[{"role":"user","content":[{"type":"input_text","text":"What is a KV cache?"}]}]}`)
	dc, err1 := apply(t, mustCompile(t, Config{Tokenizer: TokenizerCL100K}), "", chat)
	check, _ := p.Apply(Request{Model: "m", Body: chat, Env: scan(t, chat), Chat: true, Count: true})
	dr, err2 := applyResponses(t, p, resp)
	if err1 != nil || err2 != nil || dr.InputTokens == 0 || dr.InputTokens != check.InputTokens {
		t.Fatalf("responses counts %d (%v); the same as chat counts %d (%v, %+v)", dr.InputTokens, err2, check.InputTokens, err1, dc)
	}
	str := []byte(`{"model":"m","instructions":"Be terse.","input":"What is a KV cache?"}`)
	if ds, err := applyResponses(t, p, str); err != nil || ds.InputTokens != dr.InputTokens {
		t.Errorf("a string input counts %d (%v), its one-item form %d", ds.InputTokens, err, dr.InputTokens)
	}

	var items []map[string]any
	for i := range 30 {
		items = append(items, map[string]any{"role": "user", "content": words(80, i)})
		items = append(items, map[string]any{"type": "function_call", "call_id": "c" + string(rune('a'+i%26)) + strings.Repeat("x", i), "name": "lookup", "arguments": `{"q":"` + words(10, i) + `"}`})
		items = append(items, map[string]any{"type": "function_call_output", "call_id": "c" + string(rune('a'+i%26)) + strings.Repeat("x", i), "output": words(40, i+100)})
		items = append(items, map[string]any{"role": "assistant", "content": []map[string]any{{"type": "output_text", "text": words(30, i+200)}}})
	}
	in, _ := json.Marshal(items)
	body := []byte(`{"model":"m","instructions":"Be terse.","input":` + string(in) + `,"max_output_tokens":5000}`)
	trim := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 1500, Trim: DropOldest, MaxOutputTokens: 512}, Tokenizer: TokenizerCL100K})
	d, err := applyResponses(t, trim, body)
	if err != nil || d.InputTokens > 1500 || d.TrimmedMessages == 0 || d.TrimmedMessages%4 != 0 {
		t.Fatalf("%+v %v", d, err)
	}
	var out struct {
		Instructions string           `json:"instructions"`
		Input        []map[string]any `json:"input"`
		Max          int              `json:"max_output_tokens"`
	}
	if err := json.Unmarshal(d.Body, &out); err != nil {
		t.Fatalf("%v\n%s", err, d.Body)
	}
	if out.Instructions != "Be terse." || out.Max != 512 || !d.Clamped || out.Input[0]["role"] != "user" || len(out.Input) != len(items)-d.TrimmedMessages {
		t.Errorf("trimmed request: instructions %q, max_output_tokens %d, first %v, %d items", out.Instructions, out.Max, out.Input[0], len(out.Input))
	}
	if again, _ := applyResponses(t, p, d.Body); again.InputTokens != d.InputTokens {
		t.Errorf("the trimmed body counts %d; the decision said %d", again.InputTokens, d.InputTokens)
	}

	// A long string input is shortened in the middle.
	long := []byte(`{"model":"m","input":` + string(must(json.Marshal(words(3000, 7)))) + `}`)
	mid := mustCompile(t, Config{Limits: Limits{MaxInputTokens: 500, Trim: TruncateMiddle}, Tokenizer: TokenizerCL100K})
	if d, err := applyResponses(t, mid, long); err != nil || d.InputTokens > 500 || !strings.Contains(string(d.Body), `"input":"`) {
		t.Errorf("truncate_middle on a string input: %+v %v", d, err)
	}
	// A continued response: counted honestly as unknown history.
	d, err = applyResponses(t, p, []byte(`{"model":"m","input":"and then?","previous_response_id":"resp_1"}`))
	if err != nil || !d.UnknownHistory {
		t.Errorf("previous_response_id: %+v %v", d, err)
	}
	for _, bad := range []string{`{"model":"m","input":42}`, `{"model":"m","input":[{"content":"no role"}]}`, `{"model":"m"}`} {
		if _, err := applyResponses(t, p, []byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestResponsesExactCount: with tokenizer "backend", a Responses
// request's instructions and input reach the backend's count as the chat
// messages they amount to, and its count is the decision's.
func TestResponsesExactCount(t *testing.T) {
	p := mustCompile(t, Config{Tokenizer: TokenizerBackend})
	body := []byte(`{"model":"m","instructions":"Be terse.","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}]}`)
	env, _ := openai.ScanRequest(body)
	var sent []byte
	d, err := p.Apply(Request{Model: "m", Body: body, Env: env, Responses: true, Count: true, Exact: func(in ExactInput) (int, error) { sent = in.Messages; return 42, nil }})
	var msgs []map[string]any
	if err != nil || d.InputTokens != 42 || d.Estimated || json.Unmarshal(sent, &msgs) != nil || len(msgs) != 2 || msgs[0]["role"] != "system" || msgs[0]["content"] != "Be terse." {
		t.Errorf("decision %+v (%v); the backend was asked to count %s", d, err, sent)
	}
}

// TestChatExactCount: with tokenizer "backend", a chat request's messages,
// tools and body reach the backend's count, whose count is the
// decision's; a count that fails or is not positive leaves the estimate.
func TestChatExactCount(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, Config{Tokenizer: TokenizerBackend})
	body := []byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hello"}]}`)
	env, _ := openai.ScanRequest(body)
	for _, tc := range []struct {
		name  string
		n     int
		err   error
		exact bool
	}{
		{"counted", 42, nil, true},
		{"failed", 0, errors.New("status 500"), false},
		// llama.cpp's /tokenize answers a form it ignores with no tokens.
		{"zero is not a count", 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in ExactInput
			d, err := p.Apply(Request{Model: "m", Body: body, Env: env, Chat: true, Count: true, Exact: func(x ExactInput) (int, error) { in = x; return tc.n, tc.err }})
			if err != nil || string(in.Messages) != `[{"role":"user","content":"hello"}]` || string(in.Tools) != `[{"type":"function","function":{"name":"f"}}]` || string(in.Body) != string(body) || in.Responses {
				t.Fatalf("%v; the backend was asked %+v", err, in)
			}
			if tc.exact != !d.Estimated || tc.exact && d.InputTokens != tc.n || !tc.exact && d.InputTokens <= 0 {
				t.Errorf("decision %+v", d)
			}
		})
	}
}

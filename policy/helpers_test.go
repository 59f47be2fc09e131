package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/infergate/infergate/openai"
)

// apply scans body and applies p to it as tenant's chat request.
func apply(t testing.TB, p *Policy, tenant string, body []byte) (Decision, error) {
	t.Helper()
	env, err := openai.ScanRequest(body)
	if err != nil {
		t.Fatalf("ScanRequest: %v", err)
	}
	return p.Apply(Request{Tenant: tenant, Model: env.Model, Body: body, Env: env, Chat: true})
}

func mustCompile(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := Compile(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// msg is a chat message as tests write them.
type msg = map[string]any

func chatBody(t testing.TB, model string, msgs []msg, extra map[string]any) []byte {
	t.Helper()
	req := map[string]any{"model": model, "messages": msgs}
	for k, v := range extra {
		req[k] = v
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// messagesOf decodes the messages of a body.
func messagesOf(t testing.TB, body []byte) []msg {
	t.Helper()
	var r struct {
		Messages []msg `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("the rewritten body is not JSON: %v\n%s", err, body)
	}
	return r.Messages
}

// words makes text of about n tokens (a common word and a space each).
func words(n int, seed int) string {
	vocab := []string{"the", "model", "answer", "request", "token", "gateway", "queue", "latency", "batch", "memory"}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[(i*7+seed)%len(vocab)])
	}
	return b.String()
}

// longChat is a conversation of turns user/assistant turns of about
// perMessage tokens each, after a system prompt; every tenth turn the
// assistant calls two tools in parallel and gets both results.
func longChat(turns, perMessage int) []msg {
	msgs := []msg{{"role": "system", "content": "You are a careful assistant. " + words(40, 1)}}
	for i := range turns {
		msgs = append(msgs, msg{"role": "user", "content": fmt.Sprintf("turn %d: %s", i, words(perMessage, i))})
		if i%10 == 3 {
			a, b := fmt.Sprintf("call_%d_a", i), fmt.Sprintf("call_%d_b", i)
			msgs = append(msgs,
				msg{"role": "assistant", "content": nil, "tool_calls": []any{
					msg{"id": a, "type": "function", "function": msg{"name": "get_weather", "arguments": `{"city":"Paris"}`}},
					msg{"id": b, "type": "function", "function": msg{"name": "get_time", "arguments": `{"tz":"CET"}`}},
				}},
				msg{"role": "tool", "tool_call_id": a, "content": "18C, cloudy"},
				msg{"role": "tool", "tool_call_id": b, "content": "14:02"},
			)
		}
		msgs = append(msgs, msg{"role": "assistant", "content": fmt.Sprintf("reply %d: %s", i, words(perMessage, i+3))})
	}
	return msgs
}

func scan(t testing.TB, body []byte) openai.Envelope {
	t.Helper()
	env, err := openai.ScanRequest(body)
	if err != nil {
		t.Fatalf("ScanRequest: %v", err)
	}
	return env
}

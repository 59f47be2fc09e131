package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/infergate/infergate/openai"
)

// FuzzApply: whatever valid JSON request comes in, the policy never
// panics, refuses only with a 4xx Error, and a rewritten body is valid
// JSON that keeps every member the policy did not mean to change, byte
// for byte, and a kept message exactly as it was (but a shortened content).
func FuzzApply(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there how are you"},{"role":"assistant","content":"fine thanks and you"},{"role":"user","content":"tell me a long story about the sea"}],"max_tokens":900,"stream":true,"x":{"y":[1,2]}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is in this image, in detail"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}],"stream_options":{"a":1},"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"weather?"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"sunny and warm today"},{"role":"user","content":"and tomorrow, in the afternoon?"}]}`,
		`{"model":"m","max_completion_tokens":null,"messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"\u00e9\ud83d\ude00 escaped \" quote and more words here"}]}`,
		`{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"weather in the afternoon?"}]},{"type":"function_call","call_id":"1","name":"w","arguments":"{}"},{"type":"function_call_output","call_id":"1","output":"sunny and warm today"},{"role":"user","content":"and tomorrow, in the evening?"}],"max_output_tokens":900}`,
		`{"model":"m","input":"a long question about the sea and its many moods, told slowly","previous_response_id":"r"}`,
	} {
		f.Add([]byte(s))
	}
	policies := []*Policy{
		mustCompile(f, Config{Limits: Limits{MaxInputTokens: 20, Trim: DropOldest, MaxOutputTokens: 64}, StreamUsage: true}),
		mustCompile(f, Config{Limits: Limits{MaxInputTokens: 12, Trim: TruncateMiddle, DefaultOutputTokens: 10}}),
		mustCompile(f, Config{Limits: Limits{MaxInputTokens: 8, Trim: Reject}}),
	}
	changeable := map[string]bool{"messages": true, "max_tokens": true, "max_completion_tokens": true, "stream_options": true, "input": true, "max_output_tokens": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := openai.ScanRequest(body)
		if err != nil {
			return
		}
		for i := range 2 * len(policies) {
			p, responses := policies[i/2], i%2 == 1
			d, err := p.Apply(Request{Model: env.Model, Body: body, Env: env, Chat: !responses, Responses: responses})
			var pe *Error
			if err != nil {
				if !errors.As(err, &pe) || pe.Status < 400 || pe.Status > 499 {
					t.Fatalf("%v", err)
				}
				continue
			}
			if d.Body == nil {
				continue
			}
			if !json.Valid(d.Body) {
				t.Fatalf("%s\nbecame invalid JSON:\n%s", body, d.Body)
			}
			kept := map[string][]byte{}
			openai.EachMember(d.Body, func(key []byte, fl openai.Field) bool {
				k, _ := openai.Unquote(key)
				kept[k] = fl.Of(d.Body)
				return true
			})
			openai.EachMember(body, func(key []byte, fl openai.Field) bool {
				k, _ := openai.Unquote(key)
				if changeable[k] {
					return true
				}
				if v, ok := kept[k]; !ok || !bytes.Equal(v, fl.Of(body)) {
					// A duplicate key keeps its last value: compare with that.
					if last := lastValue(body, k); !bytes.Equal(v, last) {
						t.Fatalf("member %q changed: %s -> %s", k, fl.Of(body), v)
					}
				}
				return true
			})
			if len(env.Messages.Of(body)) > 0 && !responses {
				checkMessagesKept(t, env.Messages.Of(body), kept["messages"])
			}
			if in := env.Input.Of(body); len(in) > 0 && in[0] == '[' && responses {
				checkMessagesKept(t, in, kept["input"])
			}
		}
	})
}

func lastValue(body []byte, name string) []byte {
	var v []byte
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if k, _ := openai.Unquote(key); k == name {
			v = f.Of(body)
		}
		return true
	})
	return v
}

// checkMessagesKept: every message of after is one of before, in order,
// byte for byte but for at most one shortened content.
func checkMessagesKept(t *testing.T, before, after []byte) {
	var orig [][]byte
	openai.EachElement(before, func(s openai.Span) bool { orig = append(orig, before[s.Start:s.End]); return true })
	i, changed := 0, 0
	openai.EachElement(after, func(s openai.Span) bool {
		m := after[s.Start:s.End]
		for i < len(orig) && !bytes.Equal(orig[i], m) && !sameButContent(orig[i], m) {
			i++
		}
		if i == len(orig) {
			t.Fatalf("message %s is not one of the request's, in order", m)
		}
		if !bytes.Equal(orig[i], m) {
			changed++
		}
		i++
		return true
	})
	if changed > 1 {
		t.Fatalf("%d messages changed; truncate_middle shortens one", changed)
	}
}

func sameButContent(a, b []byte) bool {
	var x, y map[string]json.RawMessage
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil || len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if k != "content" && !bytes.Equal(v, y[k]) {
			return false
		}
	}
	return true
}

package quality

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	j, err := NewJudge(nil)
	if err != nil {
		t.Fatal(err)
	}
	obj := Ask{JSON: true}
	schema := Ask{JSON: true, Schema: []byte(`{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`)}
	for _, tc := range []struct {
		name string
		a    Answer
		want Signals
	}{
		{"plain answer", Answer{Text: []byte("Paris is the capital of France.")}, Signals{}},
		{"refusal, straight apostrophe", Answer{Text: []byte("I'm sorry, but I can't help with that request.")}, Signals{Refusal: true}},
		{"refusal, curly apostrophe", Answer{Text: []byte("I\u2019m sorry, but I can\u2019t help with that.")}, Signals{Refusal: true}},
		{"refusal without an apology", Answer{Text: []byte("I cannot assist with creating malware.")}, Signals{Refusal: true}},
		{"refusal after a greeting", Answer{Text: []byte("Hello! Unfortunately, I'm unable to provide that.")}, Signals{Refusal: true}},
		{"as an AI, declining", Answer{Text: []byte("As an AI, I cannot browse the internet.")}, Signals{Refusal: true}},
		// Apologising or naming oneself an AI is not declining.
		{"sympathy is not a refusal", Answer{Text: []byte("I'm sorry to hear that. Here is how to reset your password: ...")}, Signals{}},
		{"as an AI, answering", Answer{Text: []byte("Sure! As an AI model, here is a summary of the article.")}, Signals{}},
		{"a refusal quoted late is not one", Answer{Text: []byte(strings.Repeat("word ", 100) + "and then I can't help you.")}, Signals{}},
		{"empty", Answer{Text: []byte("  \n")}, Signals{Empty: true}},
		{"tool calls are not empty", Answer{ToolCalls: true, Ask: obj}, Signals{}},
		{"truncated by the model", Answer{Text: []byte("a b c"), Finish: "length"}, Signals{Truncated: true}},
		{"truncated by the gateway's cap", Answer{Text: []byte("a b c"), Finish: "length", ByPolicy: true}, Signals{Truncated: true, LengthByPolicy: true}},
		// llama.cpp's Responses API says completed (Finish "stop") of an
		// answer max_output_tokens cut: its output tokens say so.
		{"responses: completed at max_output_tokens", Answer{Text: []byte("a b c"), Finish: "stop", OutputTokens: 16, Ask: Ask{MaxOutputTokens: 16}}, Signals{Truncated: true}},
		{"responses: completed below max_output_tokens", Answer{Text: []byte("a b c"), Finish: "stop", OutputTokens: 15, Ask: Ask{MaxOutputTokens: 16}}, Signals{}},
		{"responses: the gateway's cap reached", Answer{Text: []byte("a b c"), Finish: "stop", OutputTokens: 8, ByPolicy: true, Ask: Ask{MaxOutputTokens: 8}}, Signals{Truncated: true, LengthByPolicy: true}},
		{"responses: output tokens unknown", Answer{Text: []byte("a b c"), Finish: "stop", Ask: Ask{MaxOutputTokens: 16}}, Signals{}},
		// A chat answer at exactly its max_tokens that says "stop" ended
		// by itself (llama.cpp counts the EOS in completion_tokens): the
		// chat rule is finish_reason's alone (no MaxOutputTokens in Ask).
		{"chat: stop at max_tokens is whole", Answer{Text: []byte("a b c"), Finish: "stop", OutputTokens: 16}, Signals{}},
		{"a gateway cap not reached is no truncation", Answer{Text: []byte("a b c"), Finish: "stop", ByPolicy: true}, Signals{}},
		{"JSON asked, valid", Answer{Text: []byte(` {"a":1} `), Ask: obj}, Signals{}},
		{"JSON asked, invalid", Answer{Text: []byte(`{"a":`), Ask: obj}, Signals{InvalidJSON: true}},
		{"JSON not asked, not JSON", Answer{Text: []byte(`{"a":`)}, Signals{}},
		{"on the schema", Answer{Text: []byte(`{"name":"x"}`), Ask: schema}, Signals{}},
		{"off the schema", Answer{Text: []byte(`{"nom":"x"}`), Ask: schema}, Signals{SchemaInvalid: true}},
		{"invalid JSON is not also off the schema", Answer{Text: []byte(`{"name":`), Ask: schema}, Signals{InvalidJSON: true}},
		{"a schema that does not compile checks nothing", Answer{Text: []byte(`{}`), Ask: Ask{JSON: true, Schema: []byte(`{"type":7}`)}}, Signals{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := j.Judge(tc.a); got != tc.want {
				t.Errorf("Judge(%q, %+v) = %+v, want %+v", tc.a.Text, tc.a, got, tc.want)
			}
		})
	}
}

func TestAskOf(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		json       bool
		schema     string
		max        int
	}{
		{"none", `{"model":"m","messages":[]}`, false, "", 0},
		{"json_object", `{"response_format":{"type":"json_object"}}`, true, "", 0},
		{"json_schema", `{"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`, true, `{"type":"object"}`, 0},
		{"text", `{"response_format":{"type":"text"}}`, false, "", 0},
		{"not JSON", `{"response_format":`, false, "", 0},
		// The Responses API's text.format: the schema beside the type.
		{"responses json_schema", `{"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"},"strict":true}}}`, true, `{"type":"object"}`, 0},
		{"responses json_object", `{"input":"hi","text":{"format":{"type":"json_object"}}}`, true, "", 0},
		{"responses text", `{"text":{"format":{"type":"text"},"verbosity":"low"}}`, false, "", 0},
		{"responses max_output_tokens", `{"input":"hi","max_output_tokens":64,"text":{"format":{"type":"json_object"}}}`, true, "", 64},
		{"max_output_tokens not a count", `{"input":"hi","max_output_tokens":"64"}`, false, "", 0},
		{"max_output_tokens zero", `{"input":"hi","max_output_tokens":0}`, false, "", 0},
		// Chat's caps are not read (finish_reason judges a chat answer).
		{"chat max_tokens", `{"messages":[],"max_tokens":64,"max_completion_tokens":64}`, false, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := AskOf([]byte(tc.body))
			if a.JSON != tc.json || string(a.Schema) != tc.schema || a.MaxOutputTokens != tc.max {
				t.Errorf("AskOf(%s) = %v %s %d, want %v %s %d", tc.body, a.JSON, a.Schema, a.MaxOutputTokens, tc.json, tc.schema, tc.max)
			}
		})
	}
}

func TestBadRefusalPattern(t *testing.T) {
	if _, err := NewJudge([]string{"("}); err == nil {
		t.Error("a pattern that does not compile was taken")
	}
}

func FuzzJudge(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte(`{"type":"object"}`))
	f.Add([]byte("I\u2019m sorry, but"), []byte(`{"$ref":"http://x/y"}`))
	j, _ := NewJudge(nil)
	f.Fuzz(func(t *testing.T, text, schema []byte) {
		j.Judge(Answer{Text: text, Ask: Ask{JSON: true, Schema: schema}})
	})
}

package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// responsesStream is a reasoning model's Responses stream as OpenAI's
// reference writes it (event names, field order, sequence numbers).
var responsesStream = []string{
	`event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"m","output":[],"usage":null}}`,
	`event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`,
	`event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"content":[]}}`,
	`event: response.reasoning_text.delta
data: {"type":"response.reasoning_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"think"}`,
	`event: response.reasoning_text.delta
data: {"type":"response.reasoning_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"ing"}`,
	`event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":5,"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","status":"in_progress","content":[]}}`,
	`event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
	`event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hel"}`,
	`event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"lo \"x\""}`,
	`event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Hello \"x\""}`,
	`event: response.completed
data: {"type":"response.completed","sequence_number":10,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello \"x\""}]}],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":16}}}`,
}

func TestTallyResponsesStream(t *testing.T) {
	t0 := time.Unix(100, 0)
	ta := Tally{Responses: true, TextLimit: 100}
	kinds := make([]Kind, len(responsesStream))
	for i, ev := range responsesStream {
		if name := string(EventName([]byte(ev))); name != string(ResponseEventType(EventData([]byte(ev)))) {
			t.Errorf("event %d: name %q, type %q", i, name, ResponseEventType(EventData([]byte(ev))))
		}
		kinds[i], _ = ta.Add(EventData([]byte(ev)), t0.Add(time.Duration(i)*time.Second))
	}
	want := []Kind{KindOther, KindOther, KindOther, KindContent, KindContent, KindOther, KindOther, KindContent, KindContent, KindOther, KindFinish}
	for i := range want {
		if kinds[i] != want[i] {
			t.Errorf("event %d: kind %d, want %d", i, kinds[i], want[i])
		}
	}
	if ta.ContentEvents != 4 || ta.ReasoningEvents != 2 || string(ta.Text) != `Hello "x"` || ta.Finish != "stop" {
		t.Errorf("tally %+v text %q", ta, ta.Text)
	}
	if !ta.FirstContent.Equal(t0.Add(3*time.Second)) || !ta.FirstOutput.Equal(t0.Add(7*time.Second)) || ta.ReasoningTime() != 4*time.Second {
		t.Errorf("first token %v, first output %v, reasoning %v", ta.FirstContent, ta.FirstOutput, ta.ReasoningTime())
	}
	u := ta.Usage
	if !ta.HasUsage || u.PromptTokens != 12 || u.CompletionTokens != 4 || u.CompletionTokensDetails.ReasoningTokens != 2 || u.PromptTokensDetails.CachedTokens != 4 || ta.OutputTokens() != 4 {
		t.Errorf("usage %+v", u)
	}
	ta.Reset()
	if !ta.Responses || ta.ContentEvents != 0 {
		t.Errorf("Reset: %+v", ta)
	}
}

func TestTallyResponsesEnds(t *testing.T) {
	at := time.Unix(1, 0)
	for _, tc := range []struct {
		data, finish string
		kind         Kind
		errored      bool
	}{
		{`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":1,"output_tokens":9}}}`, "length", KindFinish, false},
		{`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}}`, "content_filter", KindFinish, false},
		{`{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`, "", KindError, true},
		{`{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null}`, "", KindError, true},
		// The type need not come first; a nested one never counts.
		{`{"sequence_number":3,"item":{"type":"response.completed"},"type":"response.output_text.delta","delta":"x"}`, "", KindContent, false},
		{`{"item":{"type":"response.completed"}}`, "", KindOther, false},
		{`{"type":"response.output_text.delta","delta":""}`, "", KindOther, false},
		{`not json`, "", KindOther, false},
	} {
		ta := Tally{Responses: true}
		if k, _ := ta.Add([]byte(tc.data), at); k != tc.kind || ta.Finish != tc.finish || ta.ErrorEvent != tc.errored {
			t.Errorf("%s: kind %d finish %q error %v", tc.data, k, ta.Finish, ta.ErrorEvent)
		}
	}
	ta := Tally{Responses: true}
	ta.Add([]byte(`{"type":"response.function_call_arguments.delta","delta":"{\"a\""}`), at)
	ta.Add([]byte(`{"type":"response.completed","response":{"status":"completed","output":[{"type":"function_call","name":"f","arguments":"{\"a\":1}"}]}}`), at)
	if !ta.ToolCalls || ta.Finish != "tool_calls" || ta.ContentEvents != 1 {
		t.Errorf("function call: %+v", ta)
	}
}

func TestTallyReasoningChat(t *testing.T) {
	t0 := time.Unix(100, 0)
	for _, field := range []string{"reasoning_content", "reasoning"} {
		ta := Tally{TextLimit: 100}
		for i, d := range []string{
			`{"choices":[{"delta":{"role":"assistant","content":""}}]}`,
			`{"choices":[{"delta":{"` + field + `":"hm"}}]}`,
			`{"choices":[{"delta":{"` + field + `":"m","content":null}}]}`,
			`{"choices":[{"delta":{"content":"Yes"}}]}`,
			`{"choices":[{"delta":{"content":"."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}}}`,
		} {
			ta.Add([]byte(d), t0.Add(time.Duration(i)*time.Second))
		}
		if ta.ContentEvents != 4 || ta.ReasoningEvents != 2 || string(ta.Text) != "Yes." || ta.ReasoningTime() != 2*time.Second || ta.Usage.CompletionTokensDetails.ReasoningTokens != 2 {
			t.Errorf("%s: %+v text %q reasoning %v", field, ta, ta.Text, ta.ReasoningTime())
		}
	}
	var body Tally
	body.AddBody([]byte(`{"choices":[{"message":{"role":"assistant","content":"42","reasoning_content":"let me see"},"finish_reason":"stop"}]}`), t0)
	if body.ContentEvents != 2 || body.ReasoningEvents != 1 || body.FirstOutput.IsZero() {
		t.Errorf("reasoning body: %+v", body)
	}
}

func TestTallyResponsesBody(t *testing.T) {
	body := `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Paris.","annotations":[]}]}],"usage":{"input_tokens":5,"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":12}}`
	ta := Tally{Responses: true, TextLimit: 100}
	ta.AddBody([]byte(body), time.Unix(1, 0))
	if string(ta.Text) != "Paris." || ta.Finish != "stop" || ta.ReasoningEvents != 1 || ta.OutputTokens() != 7 || ta.Usage.CompletionTokensDetails.ReasoningTokens != 3 {
		t.Errorf("body: %+v text %q", ta, ta.Text)
	}
	var r Response
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.OutputText() != "Paris." || r.Usage.OutputTokensDetails.ReasoningTokens != 3 {
		t.Errorf("Response: %v %+v", err, r)
	}
}

func TestAppendResponsesSSEError(t *testing.T) {
	ev := AppendResponsesSSEError(nil, "upstream_error", `the backend "b" failed`)
	if string(EventName(ev)) != "error" || !strings.HasSuffix(string(ev), "\n\n") {
		t.Fatalf("event %q", ev)
	}
	ta := Tally{Responses: true}
	if k, _ := ta.Add(EventData(ev), time.Now()); k != KindError {
		t.Errorf("the gateway's own error event reads as kind %d", k)
	}
	var e struct{ Type, Code, Message string }
	if err := json.Unmarshal(EventData(ev), &e); err != nil || e.Type != "error" || e.Code != "upstream_error" || e.Message != `the backend "b" failed` {
		t.Errorf("decoded %+v, %v", e, err)
	}
}

// FuzzResponsesEvent: any event is read without a panic; what counts as
// content is a delta event by its top-level type, as encoding/json reads
// it, with a non-empty delta.
func FuzzResponsesEvent(f *testing.F) {
	for _, ev := range responsesStream {
		f.Add([]byte(ev))
	}
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"message\":\"x\"}"))
	f.Add([]byte(`data: {"delta":"x","type":"response.output_text.delta"}`))
	f.Fuzz(func(t *testing.T, ev []byte) {
		_ = EventName(ev)
		data := EventData(ev)
		ta := Tally{Responses: true, TextLimit: 64}
		k, _ := ta.Add(data, time.Unix(1, 0))
		ta.AddBody(data, time.Unix(2, 0))
		var v struct {
			Type  string `json:"type"`
			Delta any    `json:"delta"`
		}
		// (A duplicated "type" member reads as its first copy here, its
		// last in encoding/json: no comparison then.)
		if k != KindContent || json.Unmarshal(data, &v) != nil || strings.Count(string(data), `"type"`) != 1 {
			return
		}
		if !strings.HasSuffix(v.Type, ".delta") {
			t.Fatalf("%q counted as content; its type is %q", data, v.Type)
		}
	})
}

// A Responses answer's id is read from a body and from a stream's
// response.created event, as its xxhash: what the gateway's session
// table learns where a stored response lives by.
func TestTallyReadsTheResponseID(t *testing.T) {
	ta := Tally{Responses: true}
	for _, ev := range responsesStream {
		ta.Add(EventData([]byte(ev)), time.Unix(1, 0))
	}
	if ta.ResponseID == 0 || ta.ResponseID != xxhash.Sum64String("resp_1") {
		t.Errorf("stream: response id hash %x, want that of resp_1", ta.ResponseID)
	}
	tb := Tally{Responses: true}
	tb.AddBody([]byte(`{"id":"resp_9","object":"response","status":"completed","output":[]}`), time.Unix(1, 0))
	if tb.ResponseID != xxhash.Sum64String("resp_9") {
		t.Errorf("body: response id hash %x, want that of resp_9", tb.ResponseID)
	}
	for _, tc := range []struct{ data, want string }{
		{`{"id":"resp_2","output":[{"id":"msg_1"}]}`, "resp_2"},
		{`{"type":"response.created","response":{"object":"response","id":"resp_3"}}`, "resp_3"},
		{`{"type":"response.created","response":{"id":5}}`, ""},
		{`{"id":""}`, ""},
		{`[1]`, ""},
	} {
		if got := string(ResponseID([]byte(tc.data))); got != tc.want {
			t.Errorf("ResponseID(%s) = %q, want %q", tc.data, got, tc.want)
		}
	}
}

// FuzzResponseID holds ResponseID to encoding/json's reading of a valid
// object's id (or its response's) where the id needs no unescaping.
func FuzzResponseID(f *testing.F) {
	f.Add([]byte(`{"id":"resp_1"}`))
	f.Add([]byte(`{"type":"response.created","response":{"id":"resp_1","output":[]}}`))
	f.Add([]byte(`{"response":{"id":{}},"id":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id := ResponseID(data)
		var v struct {
			ID       any `json:"id"`
			Response struct {
				ID any `json:"id"`
			} `json:"response"`
		}
		// ResponseID gives the string as the JSON holds it: encoding/json
		// would decode escapes and put U+FFFD for each invalid UTF-8 byte.
		if !json.Valid(data) || json.Unmarshal(data, &v) != nil || bytes.ContainsAny(data, "\\") || !utf8.Valid(data) || bytes.Count(data, []byte(`"id"`)) != 1 {
			return
		}
		want, _ := v.ID.(string)
		if want == "" {
			want, _ = v.Response.ID.(string)
		}
		if string(id) != want {
			t.Fatalf("ResponseID(%s) = %q, encoding/json says %q", data, id, want)
		}
	})
}

package openai

import (
	"testing"
	"time"
)

func TestTally(t *testing.T) {
	t0 := time.Unix(100, 0)
	events := []struct {
		data string
		kind Kind
	}{
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, KindOther}, // role-only
		{`{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`, KindContent},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":null}]}`, KindOther}, // empty delta mid-stream: no token
		{`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`, KindContent},
		{`{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}`, KindOther}, // same offset, empty string
		{`{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}`, KindContent},
		{`{"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}`, KindFinish}, // vLLM's last token
		{`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, KindTrailer},
		{`[DONE]`, KindDone},
	}
	ta := Tally{TextLimit: 100}
	for i, e := range events {
		k, _ := ta.Add([]byte(e.data), t0.Add(time.Duration(i)*time.Second))
		if k != e.kind {
			t.Errorf("event %d %s: kind %d, want %d", i, e.data, k, e.kind)
		}
	}
	if ta.ContentEvents != 4 || ta.ReasoningEvents != 1 || string(ta.Text) != "Hello!" || ta.Finish != "stop" || !ta.Done || !ta.HasUsage || ta.Usage.CompletionTokens != 4 {
		t.Errorf("tally %+v, text %q", ta, ta.Text)
	}
	if !ta.FirstContent.Equal(t0.Add(time.Second)) || !ta.LastContent.Equal(t0.Add(6*time.Second)) {
		t.Errorf("first %v last %v", ta.FirstContent, ta.LastContent)
	}
	if got := ta.TPOT(); got != 5*time.Second/3 {
		t.Errorf("TPOT %v, want (6s-1s)/(4-1)", got)
	}

	var tools Tally
	tools.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}`), t0)
	if tools.ContentEvents != 1 || !tools.ToolCalls {
		t.Errorf("tool call chunk: %+v", tools)
	}
	var errs Tally
	if k, _ := errs.Add([]byte(`{"error":{"message":"boom"}}`), t0); k != KindError || !errs.ErrorEvent {
		t.Errorf("error chunk: %d %+v", k, errs)
	}
	var body Tally
	body.AddBody([]byte(`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x"}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`), t0)
	if body.ContentEvents != 1 || !body.ToolCalls || body.Finish != "tool_calls" || body.OutputTokens() != 2 {
		t.Errorf("plain body: %+v", body)
	}
}

// FuzzTally: any event data is accounted without a panic, and the
// offset shortcut never finds content HasContent would not.
func FuzzTally(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":"a"}}]}`), []byte(`{"choices":[{"delta":{"content":"b"}}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"a"}}]}`), []byte(`{"choices":[{"delta":{"content":""}}]}`))
	f.Add([]byte(`{"x":"content\":\"b"}`), []byte(`[DONE]`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var ta Tally
		ta.TextLimit = 1 << 10
		ta.Add(a, time.Unix(1, 0))
		n := ta.ContentEvents
		ta.Add(b, time.Unix(2, 0))
		if ta.ContentEvents > n && !ta.Finished() && !HasContent(b) && validJSON(b) {
			t.Fatalf("%q counted as content after %q; HasContent says not", b, a)
		}
	})
}

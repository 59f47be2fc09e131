package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestScanRequest(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		model  string
		stream bool
		err    error
	}{
		{"chat", `{"model":"llama","stream":true,"messages":[{"role":"user","content":"{\"model\":\"x\"}"}]}`, "llama", true, nil},
		{"model after nested decoys", `{"messages":[{"model":"no"}],"x":{"model":"no"},"model":"yes"}`, "yes", false, nil},
		{"escaped key and value", `{"mod\u0065l":"a\"b","stream":false}`, `a"b`, false, nil},
		{"whitespace everywhere", " {\n \"model\" : \"m\" ,\t\"stream\" : null } ", "m", false, nil},
		{"last duplicate wins", `{"model":"a","model":"b"}`, "b", false, nil},
		{"missing model", `{"messages":[]}`, "", false, ErrMissingModel},
		{"empty model", `{"model":""}`, "", false, ErrMissingModel},
		{"model not string", `{"model":["a"]}`, "", false, ErrModelNotString},
		{"stream not bool", `{"model":"a","stream":1}`, "", false, ErrStreamNotBool},
		{"array", `[1]`, "", false, ErrNotObject},
		{"truncated", `{"model":"a"`, "", false, ErrInvalidJSON},
		{"trailing garbage", `{"model":"a"} x`, "", false, ErrInvalidJSON},
		{"empty", ``, "", false, ErrInvalidJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := ScanRequest([]byte(tc.body))
			if !errors.Is(err, tc.err) {
				t.Fatalf("ScanRequest(%s) error %v, want %v", tc.body, err, tc.err)
			}
			if err == nil && (env.Model != tc.model || env.Stream != tc.stream) {
				t.Errorf("ScanRequest(%s) = %q stream=%v, want %q stream=%v", tc.body, env.Model, env.Stream, tc.model, tc.stream)
			}
		})
	}
}

func TestInvalidJSONNamesTheByte(t *testing.T) {
	_, err := ScanRequest([]byte(`{"model":"m",}`))
	if err == nil || !strings.Contains(err.Error(), "at byte 13") {
		t.Errorf("error %v, want it to point at byte 13 (the stray brace)", err)
	}
}

func TestRewriteModel(t *testing.T) {
	body := []byte(`{"messages":[],"model" : "short","stream":true}`)
	env, _ := ScanRequest(body)
	out := RewriteModel(body, env, `org/"long"-model`)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil || v["model"] != `org/"long"-model` || v["stream"] != true {
		t.Errorf("rewritten %s", out)
	}
}

// FuzzScanRequest checks the scanner against encoding/json: the same
// verdict on validity, and the same model and stream.
func FuzzScanRequest(f *testing.F) {
	for _, s := range []string{`{"model":"a","stream":true}`, `{"x":[{"model":1}],"model":"b"}`, `{"model":"\u00e9\n"}`, `[]`, `{`, `{"model":"a","model":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := ScanRequest(body)
		var ref map[string]json.RawMessage
		refErr := json.Unmarshal(body, &ref)
		if json.Valid(body) != !errors.Is(err, ErrInvalidJSON) {
			t.Fatalf("validity disagrees on %q: %v", body, err)
		}
		if err != nil {
			return
		}
		if refErr != nil {
			t.Fatalf("scanner accepted %q that is no JSON object: %v", body, refErr)
		}
		var model string
		if json.Unmarshal(ref["model"], &model) != nil || model != env.Model {
			t.Fatalf("model %q, encoding/json says %s", env.Model, ref["model"])
		}
		if !bytes.Equal(body[env.ModelStart:env.ModelEnd], bytes.TrimSpace(ref["model"])) {
			t.Fatalf("model span %q, want %s", body[env.ModelStart:env.ModelEnd], ref["model"])
		}
		if (string(ref["stream"]) == "true") != env.Stream {
			t.Fatalf("stream %v, encoding/json sees %s", env.Stream, ref["stream"])
		}
	})
}

func readAll(t *testing.T, r io.Reader, bufSize int) ([]string, error) {
	er := NewEventReader(r, make([]byte, bufSize), 1<<16)
	var out []string
	for {
		ev, err := er.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(ev))
	}
}

func TestEventReader(t *testing.T) {
	stream := "data: a\n\n: comment\n\ndata: b\r\n\r\nevent: x\ndata: " + strings.Repeat("c", 300) + "\n\ndata: [DONE]\n\n"
	want := []string{"data: a\n\n", ": comment\n\n", "data: b\r\n\r\n", "event: x\ndata: " + strings.Repeat("c", 300) + "\n\n", "data: [DONE]\n\n"}
	// One byte at a time and in a tiny buffer: boundaries straddle reads
	// and the buffer must grow.
	for _, r := range []io.Reader{strings.NewReader(stream), iotest.OneByteReader(strings.NewReader(stream))} {
		got, err := readAll(t, r, 8)
		if err != io.EOF || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("events %q err %v, want %q and EOF", got, err, want)
		}
	}
	if _, err := readAll(t, strings.NewReader("data: a\n\ndata: cut"), 16); err != ErrTruncatedEvent {
		t.Errorf("truncated stream: err %v, want ErrTruncatedEvent", err)
	}
	if _, err := readAll(t, strings.NewReader("data: "+strings.Repeat("x", 1<<17)), 16); err != ErrEventTooLarge {
		t.Errorf("huge event: err %v, want ErrEventTooLarge", err)
	}
	boom := errors.New("boom")
	got, err := readAll(t, io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom)), 64)
	if err != boom || len(got) != 1 {
		t.Errorf("events %q err %v, want the event then boom", got, err)
	}
}

func TestEventClassifiers(t *testing.T) {
	tests := []struct {
		data                        string
		content, finish, errorChunk bool
	}{
		{`{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, false, false, false},
		{`{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`, true, false, false},
		{`{"choices":[{"text":"hi","finish_reason": "length"}]}`, true, true, false},
		{`{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, true, false, false},
		{`{"choices":[{"delta":{"tool_calls":[{"id":"1"}]}}]}`, true, false, false},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, false, false, false},
		{` {"error":{"message":"oom"}}`, false, false, true},
	}
	for _, tc := range tests {
		d := []byte(tc.data)
		if HasContent(d) != tc.content || HasFinishReason(d) != tc.finish || IsErrorChunk(d) != tc.errorChunk {
			t.Errorf("%s: content=%v finish=%v error=%v, want %v %v %v", tc.data, HasContent(d), HasFinishReason(d), IsErrorChunk(d), tc.content, tc.finish, tc.errorChunk)
		}
	}
	if !IsDone([]byte("data: [DONE]\r\n\r\n")) || !IsDone([]byte("data:[DONE]\n\n")) || IsDone([]byte("data: {}\n\n")) {
		t.Error("IsDone misjudges")
	}
}

func FuzzEventReader(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n"), uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		n := int(chunk%32) + 1
		er := NewEventReader(iotest.HalfReader(bytes.NewReader(stream)), make([]byte, n), 1<<20)
		var joined []byte
		for {
			ev, err := er.Next()
			if err != nil {
				break
			}
			if boundary(ev) != len(ev) {
				t.Fatalf("event %q does not end at its first boundary", ev)
			}
			joined = append(joined, ev...)
		}
		// Events are the stream's bytes, in order, unchanged.
		if !bytes.HasPrefix(stream, joined) {
			t.Fatalf("events %q are not a prefix of %q", joined, stream)
		}
	})
}

func TestAppendContent(t *testing.T) {
	tests := []struct {
		name, data, text, finish string
	}{
		{"chat delta", `{"choices":[{"delta":{"content":"hi there"},"finish_reason":null}]}`, "hi there", ""},
		{"role only", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, "", ""},
		{"escapes", `{"choices":[{"delta":{"content":"a\"b\\n\u00e9"}}]}`, "a\"b\\n\u00e9", ""},
		{"completion", `{"choices":[{"text":" x","finish_reason":"length"}]}`, " x", "length"},
		{"reasoning is not the answer", `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, "", ""},
		{"decoy inside a string", `{"choices":[{"delta":{"content":"say \"content\":\"no\""}}]}`, `say "content":"no"`, ""},
		{"usage only", `{"choices":[],"usage":{"completion_tokens":3}}`, "", ""},
		{"finish stop", `{"choices":[{"delta":{},"finish_reason": "stop"}]}`, "", "stop"},
		{"bytes not UTF-8", "{\"choices\":[{\"delta\":{\"content\":\"a\xffb\xe2\x82\"}}]}", "a\uFFFDb\uFFFD\uFFFD", ""},
		{"UTF-8 kept", `{"choices":[{"delta":{"content":"€ 日本"}}]}`, "€ 日本", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(AppendContent(nil, []byte(tc.data))); got != tc.text {
				t.Errorf("AppendContent(%s) = %q, want %q", tc.data, got, tc.text)
			}
			if got := string(FinishReason([]byte(tc.data))); got != tc.finish {
				t.Errorf("FinishReason(%s) = %q, want %q", tc.data, got, tc.finish)
			}
		})
	}
}

func FuzzAppendContent(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":"a\"b"},"finish_reason":"stop"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// It must never panic, and on a plain chunk it agrees with
		// encoding/json.
		got := AppendContent(nil, data)
		_ = FinishReason(data)
		var c Chunk
		if json.Unmarshal(data, &c) != nil || len(c.Choices) != 1 || bytes.Count(data, []byte(`"content"`))+bytes.Count(data, []byte(`"text"`)) != 1 ||
			bytes.Contains(data, []byte(`reasoning_content`)) || bytes.Contains(data, []byte(`\`)) {
			return
		}
		if want := c.Choices[0].Delta.Content + c.Choices[0].Text; string(got) != want && want != "" {
			t.Fatalf("AppendContent(%s) = %q, encoding/json says %q", data, got, want)
		}
	})
}

func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		data string
		out  int
		ok   bool
	}{
		{`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`, 3, true},
		{`{"choices":[{"delta":{"content":"\"usage\":{"}}],"usage":null}`, 0, false},
		{`{"usage" : {"completion_tokens": 7, "x": {"y": [1]}}}`, 7, true},
		{`{"usage":{"completion_tokens":`, 0, false},
		{`{"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46,"prompt_tokens_details":{"cached_tokens":8}}}`, 34, true},
	} {
		u, ok := UsageOf([]byte(tc.data))
		if ok != tc.ok || u.CompletionTokens != tc.out {
			t.Errorf("UsageOf(%s) = %+v %v, want %d %v", tc.data, u, ok, tc.out, tc.ok)
		}
	}
}

func FuzzUsageOf(f *testing.F) {
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, ok := UsageOf(data)
		var ref struct {
			Usage *Usage `json:"usage"`
		}
		// On a plain chunk (one usage key, valid JSON, no escapes, the
		// keys as servers write them) the scanner agrees with
		// encoding/json, which also matches keys in another case
		// ("Completion_tokens"); no server sends those.
		if !ok || json.Unmarshal(data, &ref) != nil || ref.Usage == nil || bytes.Count(data, []byte("tokens")) != 3 || bytes.Contains(data, []byte(`\`)) ||
			!bytes.Contains(data, keyCompletionTokens) {
			return
		}
		if u.CompletionTokens != ref.Usage.CompletionTokens && ref.Usage.CompletionTokens >= 0 {
			t.Fatalf("UsageOf(%s) = %+v, encoding/json says %+v", data, u, *ref.Usage)
		}
	})
}

func TestMaxOutput(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"model":"m","max_tokens":256}`, 256},
		{`{"model":"m","max_tokens": 10, "max_completion_tokens" : 99}`, 99},
		{`{"model":"m","max_completion_tokens":null,"max_tokens":7}`, 7},
		{`{"model":"m","messages":[{"content":"\"max_tokens\":5"}]}`, 0},
		{`{"tools":[{"function":{"parameters":{"max_tokens":5}}}],"model":"m"}`, 0}, // top level only
		{`{"model":"m","max_tokens":null}`, 0},
		{`{"model":"m","max_tokens":"12"}`, 0},
	} {
		env, err := ScanRequest([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := env.MaxOutput([]byte(tc.body)); got != tc.want {
			t.Errorf("MaxOutput(%s) = %d, want %d", tc.body, got, tc.want)
		}
	}
}

func TestServerTimingOf(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		name string
		data string
		want ServerTiming
		ok   bool
	}{
		{"vLLM usage chunk", `{"choices":[],"usage":{"prompt_tokens":3},"metrics":{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3,"mean_itl_ms":9.1}}`,
			ServerTiming{Source: "vllm", Queue: ms(12.3), Prefill: ms(85.2), Decode: ms(1240.5), Inference: -1}, true},
		// A server that leaves a field out: it is absent, not zero.
		{"vLLM, queue only", `{"metrics":{"queue_time_ms":0}}`, ServerTiming{Source: "vllm", Queue: 0, Prefill: -1, Decode: -1, Inference: -1}, true},
		{"llama.cpp timings", `{"choices":[{"finish_reason":"stop"}],"timings":{"prompt_n":12,"prompt_ms":40.5,"predicted_n":20,"predicted_ms":300}}`,
			ServerTiming{Source: "llama.cpp", Queue: -1, Prefill: ms(40.5), Decode: ms(300), Inference: -1}, true},
		{"no timing", `{"choices":[],"usage":{"prompt_tokens":3}}`, NoServerTiming, false},
		// The word inside content is no key.
		{"key in content", `{"choices":[{"delta":{"content":"\"metrics\":{\"queue_time_ms\":5}"}}]}`, NoServerTiming, false},
		{"metrics of another shape", `{"metrics":{"foo":1}}`, NoServerTiming, false},
		{"negative", `{"metrics":{"queue_time_ms":-4,"time_to_first_token_ms":3}}`, ServerTiming{Source: "vllm", Queue: -1, Prefill: ms(3), Decode: -1, Inference: -1}, true},
		{"truncated", `{"metrics":{"queue_time_ms":4`, NoServerTiming, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ServerTimingOf([]byte(tc.data))
			if got != tc.want || ok != tc.ok {
				t.Errorf("ServerTimingOf(%s) = %+v, %v; want %+v, %v", tc.data, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestServerTimingOfHeaders(t *testing.T) {
	h := map[string]string{"X-Queue-Time": "12", "X-Inference-Time": "250"}
	peek := func(k string) []byte { return []byte(h[k]) }
	got, ok := ServerTimingOfHeaders(peek)
	want := ServerTiming{Source: "tgi", Queue: 12 * time.Millisecond, Prefill: -1, Decode: -1, Inference: 250 * time.Millisecond}
	if !ok || got != want {
		t.Errorf("got %+v %v, want %+v", got, ok, want)
	}
	h = map[string]string{"X-Queue-Time": "soon"}
	if _, ok := ServerTimingOfHeaders(peek); ok {
		t.Error("a non-number header was read")
	}
}

func FuzzServerTimingOf(f *testing.F) {
	f.Add([]byte(`{"metrics":{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3}}`))
	f.Add([]byte(`{"timings":{"prompt_ms":40.5,"predicted_ms":300}}`))
	f.Add([]byte(`{"metrics":{"queue_time_ms":1e400}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, ok := ServerTimingOf(data)
		if !ok && st != NoServerTiming {
			t.Errorf("nothing read, yet %+v", st)
		}
		for _, d := range []time.Duration{st.Queue, st.Prefill, st.Decode, st.Inference} {
			if d < -1 {
				t.Errorf("duration %v out of range in %+v", d, st)
			}
		}
	})
}

func TestSetMember(t *testing.T) {
	for _, tc := range []struct{ body, name, value, want string }{
		{`{"model":"a","temperature":0.2}`, "temperature", "0.9", `{"model":"a","temperature":0.9}`},
		{`{"model":"a"}`, "max_tokens", "16", `{"model":"a","max_tokens":16}`},
		{`{}`, "model", `"b"`, `{"model":"b"}`},
		{`{ "model" : "a" , "x":[1,{"y":2}] }`, "model", `"b"`, `{ "model" : "b" , "x":[1,{"y":2}] }`},
	} {
		if got := string(SetMember([]byte(tc.body), tc.name, []byte(tc.value))); got != tc.want {
			t.Errorf("SetMember(%s, %s, %s) = %s, want %s", tc.body, tc.name, tc.value, got, tc.want)
		}
	}
}

// FuzzHasControl holds the word-at-a-time check to a plain loop.
func FuzzHasControl(f *testing.F) {
	for _, s := range []string{"", "abc", "abcdefgh\x1f", "\x00", "\x7f\x80\xff\x20\x20\x20\x20\x20\x20", "{\"a\":\"\n\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := false
		for _, c := range b {
			want = want || c < 0x20
		}
		if got := hasControl(b); got != want {
			t.Fatalf("hasControl(%q) = %v, want %v", b, got, want)
		}
	})
}

// Nesting: fastjson's validator has no depth bound, encoding/json refuses
// past 10000; the verdict is encoding/json's at every depth (the fuzzer
// cannot reach these).
func TestValidJSONNesting(t *testing.T) {
	for _, depth := range []int{1, 299, 301, 9999, 10000, 10001, 20000} {
		b := []byte(`{"model":"m","x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Errorf("depth %d: validJSON %v, json.Valid %v", depth, got, want)
		}
		_, err := ScanRequest(b)
		if (err == nil) != json.Valid(b) {
			t.Errorf("depth %d: ScanRequest error %v, json.Valid %v", depth, err, json.Valid(b))
		}
	}
	// Brackets inside strings only send the body to encoding/json.
	b := []byte(`{"model":"m","x":"` + strings.Repeat("[", 20000) + `"}`)
	if !validJSON(b) {
		t.Error("20000 brackets in a string refused")
	}
}

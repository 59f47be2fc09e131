package tracing

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

// The hand encoder says what encoding/json would: both decode to the
// same value.
func sameAsMarshal(t *testing.T, e Entry) {
	t.Helper()
	mine := e.AppendJSON(nil)
	theirs, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	if err := json.Unmarshal(mine, &a); err != nil {
		t.Fatalf("invalid JSON %s: %v", mine, err)
	}
	if err := json.Unmarshal(theirs, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("hand encoding\n%s\nencoding/json\n%s", mine, theirs)
	}
}

func TestEntryAppendJSON(t *testing.T) {
	q, p, cached := 1.5, 0.0, 96
	full := Entry{Time: time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC), ID: "r1", Path: "/v1/chat/completions", Tenant: "t",
		Model: "m", Backend: "http://b:1", Route: "prefix_warm", CachedTokens: &cached, Stream: true, Status: 200, Outcome: "ok", InputTokens: 3, OutputTokens: 5, Events: 7, Attempts: 1,
		TTFT: 12.345, FinishReason: "stop", Error: "x", Body: json.RawMessage("{\n  \"model\": \"m\"\n}"), Class: "default", ClassRequested: "priority", Refusal: "shed",
		Timing: &openai.Timing{TTFT: 1, Queue: 0.001, Gateway: 2, Total: 10, Relay: 0.5, RelayMax: 0.1, Backend: &openai.BackendTiming{Source: "vllm", Queue: &q, Prefill: &p}}}
	tests := []struct {
		name string
		e    Entry
	}{
		{"every field", full},
		{"empty", Entry{}},
		{"escapes", Entry{ID: "a\"b\\c\n\t\x01é€", Error: "bad \xff utf-8 \u2028"}},
		{"timing without backend", Entry{Timing: &openai.Timing{TTFT: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { sameAsMarshal(t, tc.e) })
	}
	// The body lands on one line.
	if line := full.AppendJSON(nil); json.Valid(line) && containsNewline(line) {
		t.Errorf("a line with a newline: %s", line)
	}
}

func containsNewline(b []byte) bool {
	for _, c := range b {
		if c == '\n' {
			return true
		}
	}
	return false
}

func FuzzEntryAppendJSON(f *testing.F) {
	f.Add("r1", "m", "boom", 12.5)
	f.Add("\x00\"\\", "\xff\xfe", "\u2028", -0.0)
	f.Fuzz(func(t *testing.T, id, model, errText string, ttft float64) {
		sameAsMarshal(t, Entry{ID: id, Model: model, Error: errText, TTFT: ttft, Timing: &openai.Timing{Total: ttft}})
	})
}

func BenchmarkEntryAppendJSON(b *testing.B) {
	e := Entry{Time: time.Now(), ID: "0123456789abcdef0123456789abcdef", Path: "/v1/chat/completions", Model: "m", Backend: "http://10.0.0.1:8000",
		Stream: true, Status: 200, Outcome: "ok", InputTokens: 20, OutputTokens: 50, Events: 52, Attempts: 1, TTFT: 12.3, FinishReason: "length",
		Timing: NewTiming(Attribution{Queue: time.Microsecond, Total: 20 * time.Millisecond}, 12*time.Millisecond)}
	var buf []byte
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = e.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = json.Marshal(e)
		}
	})
}

package affinity

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

func sessionOf(t testing.TB, body string, opt SessionOptions) Session {
	t.Helper()
	env, err := openai.ScanRequest([]byte(body))
	if err != nil {
		t.Fatalf("scan %.80s: %v", body, err)
	}
	return SessionOf([]byte(body), &env, opt)
}

// Each source is read, the strongest wins, and a key of the wrong type
// or an empty one is no key: the next source counts.
func TestSessionOfReadsTheStrongestKey(t *testing.T) {
	t.Parallel()
	hdr := SessionOptions{Headers: [][]byte{nil, []byte("h-1")}}
	for _, tc := range []struct {
		name string
		body string
		opt  SessionOptions
		want SessionSource
		same string // a body that must give the same Key ("" to skip)
	}{
		{"none", `{"model":"m"}`, SessionOptions{}, SessionNone, ""},
		{"prompt_cache_key", `{"model":"m","prompt_cache_key":"conv-1"}`, hdr, SessionPromptCacheKey, `{"prompt_cache_key":"conv-1","model":"other","user":"u"}`},
		{"prompt_cache_key beats previous_response_id", `{"model":"m","previous_response_id":"resp_1","prompt_cache_key":"c"}`, hdr, SessionPromptCacheKey, `{"model":"m","prompt_cache_key":"c"}`},
		{"previous_response_id", `{"model":"m","previous_response_id":"resp_1","conversation":"conv"}`, hdr, SessionPreviousResponse, ""},
		{"conversation string", `{"model":"m","conversation":"conv_9"}`, hdr, SessionConversation, `{"model":"m","conversation":{"id":"conv_9"}}`},
		{"conversation object", `{"model":"m","conversation":{"x":1,"id":"conv_9"}}`, hdr, SessionConversation, `{"model":"m","conversation":"conv_9"}`},
		{"header", `{"model":"m","user":"u"}`, hdr, SessionHeader, ""},
		{"user off by default", `{"model":"m","user":"u"}`, SessionOptions{}, SessionNone, ""},
		{"user allowed", `{"model":"m","user":"u"}`, SessionOptions{User: true}, SessionUser, ""},
		// Hostile or odd values: no key from them, no failure.
		{"number", `{"model":"m","prompt_cache_key":5}`, SessionOptions{}, SessionNone, ""},
		{"object", `{"model":"m","prompt_cache_key":{}}`, SessionOptions{}, SessionNone, ""},
		{"array", `{"model":"m","prompt_cache_key":["a"]}`, SessionOptions{}, SessionNone, ""},
		{"null previous", `{"model":"m","previous_response_id":null}`, SessionOptions{}, SessionNone, ""},
		{"empty", `{"model":"m","prompt_cache_key":""}`, hdr, SessionHeader, ""},
		{"conversation without id", `{"model":"m","conversation":{"id":5}}`, SessionOptions{}, SessionNone, ""},
		{"wrong type falls through", `{"model":"m","prompt_cache_key":true,"conversation":"c"}`, SessionOptions{}, SessionConversation, `{"model":"m","conversation":"c"}`},
		{"escapes and odd bytes", `{"model":"m","prompt_cache_key":"\u0000\ud800\"\\ é"}`, SessionOptions{}, SessionPromptCacheKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sessionOf(t, tc.body, tc.opt)
			if s.Source != tc.want || (s.Key != 0) != (tc.want != SessionNone) {
				t.Fatalf("%s: source %d key %x, want source %d", tc.body, s.Source, s.Key, tc.want)
			}
			if tc.same != "" {
				if o := sessionOf(t, tc.same, tc.opt); o.Key != s.Key {
					t.Fatalf("%s and %s name different sessions", tc.body, tc.same)
				}
			}
		})
	}
	// The same string from two sources is two sessions.
	a := sessionOf(t, `{"model":"m","prompt_cache_key":"x"}`, SessionOptions{})
	b := sessionOf(t, `{"model":"m","user":"x"}`, SessionOptions{User: true})
	if a.Key == b.Key {
		t.Fatal("a prompt_cache_key and a user of the same text share a session")
	}
	// A continuation's response hash is what the answer's id hashes to.
	c := sessionOf(t, `{"model":"m","previous_response_id":"resp_abc","prompt_cache_key":"k"}`, SessionOptions{})
	if c.Response == 0 || c.Response != ResponseHash([]byte("resp_abc")) {
		t.Fatalf("previous_response_id hash %x, ResponseHash %x", c.Response, ResponseHash([]byte("resp_abc")))
	}
}

// A megabyte of key costs a bounded time (alloc_test.go: and no
// allocation).
func TestSessionOfIsCheapOnHostileKeys(t *testing.T) {
	body := []byte(`{"model":"m","conversation":{"a":[1,2,{"b":"c"}],"id":"conv"},"prompt_cache_key":5,"user":"u"}`)
	env, err := openai.ScanRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	huge := []byte(`{"model":"m","prompt_cache_key":"` + strings.Repeat("\xff\\\"", 1<<20/3) + `"}`)
	if env, err = openai.ScanRequest(huge); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s := SessionOf(huge, &env, SessionOptions{})
	if d := time.Since(start); s.Source != SessionPromptCacheKey || d > 50*time.Millisecond {
		t.Fatalf("a 1 MB key: source %d in %v", s.Source, d)
	}
}

// A session is remembered with its backend, moved by a later Learn, and
// the least recently used of a full bucket is the one replaced.
func TestSessionsRememberAndMove(t *testing.T) {
	t.Parallel()
	tb := NewSessions(64)
	if _, ok := tb.Lookup(42); ok {
		t.Fatal("an empty table knows a session")
	}
	tb.Learn(42, 7)
	if b, ok := tb.Lookup(42); !ok || b != 7 {
		t.Fatalf("lookup after learn: %d %v", b, ok)
	}
	tb.Learn(42, 9)
	if b, _ := tb.Lookup(42); b != 9 {
		t.Fatalf("a moved session reads backend %d, want 9", b)
	}
	// Five sessions of one bucket (the same low bits): the one not
	// asked for since is the one forgotten.
	step := tb.mask + 1
	for i := uint64(1); i <= 4; i++ {
		tb.Learn(i*step, i)
	}
	tb.Lookup(1 * step) // used: stays
	tb.Learn(5*step, 5)
	if _, ok := tb.Lookup(1 * step); !ok {
		t.Fatal("the session just asked for was evicted")
	}
	if _, ok := tb.Lookup(2 * step); ok {
		t.Fatal("the least recently used session is still there")
	}
	tb.Forget(5 * step)
	if _, ok := tb.Lookup(5 * step); ok {
		t.Fatal("a forgotten session is still there")
	}
}

// The table's memory is fixed: a million distinct keys leave the heap
// where ten did, and Bytes states it (22 bytes a session).
func TestSessionsMemoryIsBounded(t *testing.T) {
	if SessionEntryBytes != 22 {
		t.Errorf("SessionEntryBytes %d, want 22 (the docs say so)", SessionEntryBytes)
	}
	tb := NewSessions(100000)
	if tb.Entries() < 100000 || tb.Bytes() != tb.Entries()*SessionEntryBytes || tb.Bytes() > 3<<20 {
		t.Fatalf("100,000 sessions: %d entries, %d bytes", tb.Entries(), tb.Bytes())
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for i := range uint64(10) {
		tb.Learn(Mix(i), i)
	}
	before := heap()
	for i := range uint64(1_000_000) {
		tb.Learn(Mix(i+1000), i%16)
	}
	after := heap()
	if after > before+1<<20 {
		t.Fatalf("a million sessions grew the heap from %d to %d bytes", before, after)
	}
	live := 0
	for i := range uint64(1_000_000) {
		if _, ok := tb.Lookup(Mix(i + 1000)); ok {
			live++
		}
	}
	if live > tb.Entries() || live < tb.Entries()*9/10 {
		t.Fatalf("%d of a million sessions remembered by a table of %d", live, tb.Entries())
	}
}

func BenchmarkSessionOf(b *testing.B) {
	body := []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"prompt_cache_key":"conversation-0123456789"}`, strings.Repeat("x", 4000)))
	env, _ := openai.ScanRequest(body)
	b.ReportAllocs()
	for b.Loop() {
		SessionOf(body, &env, SessionOptions{})
	}
}

func FuzzSessionOf(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt_cache_key":"k"}`), []byte("h"), true)
	f.Add([]byte(`{"model":"m","conversation":{"id":"c"},"previous_response_id":"r"}`), []byte(""), false)
	f.Add([]byte(`{"model":"m","conversation":{"id":{}},"user":5}`), []byte("\xff"), true)
	f.Fuzz(func(t *testing.T, body, hdr []byte, user bool) {
		env, err := openai.ScanRequest(body)
		if err != nil {
			return
		}
		s := SessionOf(body, &env, SessionOptions{Headers: [][]byte{hdr}, User: user})
		if (s.Key == 0) != (s.Source == SessionNone) {
			t.Fatalf("key %x from source %d", s.Key, s.Source)
		}
		if s2 := SessionOf(body, &env, SessionOptions{Headers: [][]byte{hdr}, User: user}); s2 != s {
			t.Fatal("the same request named two sessions")
		}
	})
}

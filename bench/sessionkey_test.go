package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/sim/simtest"
)

func TestParseSessionKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     sessionKeyMode
		bad      bool
	}{
		{name: "empty is none", in: ""},
		{name: "none", in: "none"},
		{name: "body", in: "prompt_cache_key", want: sessionKeyMode{body: true}},
		{name: "header", in: "header:x-session-id", want: sessionKeyMode{header: "x-session-id"}},
		{name: "header keeps its case", in: "header:X-Conversation-ID", want: sessionKeyMode{header: "X-Conversation-ID"}},
		{name: "header without a name", in: "header:", bad: true},
		// A space or a colon would make another header (or none).
		{name: "header with a space", in: "header:x session", bad: true},
		{name: "header with a colon", in: "header:x:y", bad: true},
		{name: "header with a newline", in: "header:x\r\nEvil: 1", bad: true},
		{name: "header too long", in: "header:" + strings.Repeat("x", maxSessionHeader+1), bad: true},
		{name: "header at the bound", in: "header:" + strings.Repeat("x", maxSessionHeader), want: sessionKeyMode{header: strings.Repeat("x", maxSessionHeader)}},
		{name: "unknown mode", in: "user", bad: true},
		{name: "case matters", in: "Prompt_Cache_Key", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSessionKey(tc.in)
			if tc.bad {
				if !errors.Is(err, errSessionKey) {
					t.Errorf("parseSessionKey(%q) = %+v, %v; want an error", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseSessionKey(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzSessionKey: whatever the flag says, the parser answers a mode or
// an error, and a header it accepts is one fasthttp writes as one header.
func FuzzSessionKey(f *testing.F) {
	for _, s := range []string{"", "none", "prompt_cache_key", "header:x-session-id", "header:", "header:a b", "header:\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseSessionKey(s)
		if err != nil {
			return
		}
		if m.header != "" && (len(m.header) > maxSessionHeader || strings.ContainsAny(m.header, " :\r\n\t\x00") || m.body) {
			t.Fatalf("parseSessionKey(%q) accepted header %q", s, m.header)
		}
	})
}

func TestSessionKeyValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key, mode, want string
	}{
		{name: "bad mode names the field", key: "cookie", mode: "sessions", want: "workload.session_key (--session-key)"},
		{name: "not a session run", key: "prompt_cache_key", mode: "closed", want: "only sessions"},
		{name: "none outside sessions is fine", key: "none", mode: "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := baseConfig("http://127.0.0.1:1")
			c.Workload.SessionKey, c.Load.Mode = tc.key, tc.mode
			c.Defaults()
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("session key %q, mode %s: %v; want %q", tc.key, tc.mode, err, tc.want)
			}
		})
	}
}

// seen is what a front in a test saw of each request: its session key
// (in the body or a header) and its message count (the turn).
type seen struct {
	bodyKey, headerKey string
	messages           int
	tools              int
	system             string
}

// keyFront is a reverse proxy to a simulator that notes each request.
func keyFront(t *testing.T, header string) (string, func() []seen) {
	t.Helper()
	s := simtest.Start(t, simtest.Fixed(time.Millisecond, 200*time.Microsecond))
	target, _ := url.Parse(s.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rp.ServeHTTP(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Key      string `json:"prompt_cache_key"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("a request the front cannot read: %v: %s", err, b)
		}
		sn := seen{bodyKey: req.Key, messages: len(req.Messages), tools: len(req.Tools)}
		if header != "" {
			sn.headerKey = r.Header.Get(header)
		}
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			sn.system = req.Messages[0].Content
		}
		mu.Lock()
		got = append(got, sn)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

// Sessions name themselves as --session-key says: every turn of a
// session the same key, each session its own, a second run fresh keys;
// none by default. The record carries the mode and no key.
func TestSessionKeySent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode, header string
	}{
		{name: "none", mode: ""},
		{name: "prompt_cache_key", mode: "prompt_cache_key"},
		{name: "header", mode: "header:X-Session-Id", header: "X-Session-Id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			front, requests := keyFront(t, tc.header)
			keysOf := func() map[string]bool {
				c := baseConfig(front)
				c.Tokenizer = sharedTokenizer()
				c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns, c.Workload.SessionKey = "20", "5", 3, tc.mode
				c.Load = LoadSpec{Mode: "sessions", Concurrency: 4}
				before := len(requests())
				rec, err := Run(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Stages[0].OK != 12 {
					t.Fatalf("%d of 12 turns ok: %v", rec.Stages[0].OK, rec.Stages[0].ErrorSamples)
				}
				raw, _ := json.Marshal(rec)
				if got := rec.Conditions.Workload.SessionKey; got != tc.mode {
					t.Errorf("the record's session_key is %q, want %q", got, tc.mode)
				}
				// Every turn with its key, in order: a session's turn k
				// sends 2k-1 messages, so each key's requests must count
				// 1, 3, 5 ...: one session's turns, from its first.
				turns := map[string][]int{}
				for _, r := range requests()[before:] {
					k := r.bodyKey + r.headerKey
					switch {
					case tc.mode == "" && k != "":
						t.Errorf("no --session-key, but a request carried key %q", k)
					case tc.mode != "" && (!strings.HasPrefix(k, "bench-") || len(k) != 22):
						t.Errorf("a request's key %q (body %q, header %q)", k, r.bodyKey, r.headerKey)
					case tc.mode == "prompt_cache_key" && r.headerKey != "", tc.header != "" && r.bodyKey != "":
						t.Errorf("the key went to both places: %+v", r)
					}
					if k != "" && bytes.Contains(raw, []byte(k)) {
						t.Errorf("the record holds the key %q", k)
					}
					turns[k] = append(turns[k], r.messages)
				}
				if tc.mode == "" {
					return nil
				}
				// At least the 4 users' first sessions (a user done early
				// starts another while the stage's 12 requests last).
				if len(turns) < 4 {
					t.Errorf("%d keys, want one per session, at least 4: %v", len(turns), turns)
				}
				set := map[string]bool{}
				for k, ms := range turns {
					for i, m := range ms {
						if m != 2*i+1 {
							t.Errorf("key %s on requests of %v messages: not one session's turns in order", k, ms)
							break
						}
					}
					set[k] = true
				}
				return set
			}
			first, second := keysOf(), keysOf()
			for k := range first {
				if second[k] {
					t.Errorf("key %s in both runs: keys must be fresh each run", k)
				}
			}
		})
	}
}

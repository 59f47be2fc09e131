package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/yamlconf"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
)

// sessionBody is a chat request of conversation key's turn: a prompt of
// its own (so the prefix index alone would not keep the turns together),
// naming its conversation by prompt_cache_key.
func sessionBody(key string, turn int) string {
	return fmt.Sprintf(`{"model":"m","prompt_cache_key":%q,"messages":[{"role":"user","content":"turn %d: %s"}]}`,
		key, turn, strings.Repeat(fmt.Sprintf("a question of its own, number %d. ", turn), 8))
}

// home returns the backend that got every request since before (the
// chats each had), failing when they were split.
func home(t *testing.T, bs []*vllmBackend, before []int64, n int) int {
	t.Helper()
	at := -1
	var got []int64
	for i, b := range bs {
		d := b.chats.Load() - before[i]
		got = append(got, d)
		if d == int64(n) {
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("%d turns of one session were split: %v", n, got)
	}
	return at
}

func chatsOf(bs []*vllmBackend) []int64 {
	out := make([]int64, len(bs))
	for i, b := range bs {
		out[i] = b.chats.Load()
	}
	return out
}

func sendTurns(t *testing.T, gw *testGateway, body func(turn int) string, from, n int, hdr ...string) {
	t.Helper()
	for q := from; q < from+n; q++ {
		if code, _, resp := post(t, gw.URL, "/v1/chat/completions", body(q), hdr...); code != 200 {
			t.Fatalf("turn %d: status %d: %s", q, code, resp)
		}
	}
}

// A session stays on its backend turn after turn while that backend is
// fine; when its queue passes the spill guard the session moves, and
// stays on the new backend after the old one is idle again.
func TestSessionSticksUntilTheGuardTripsThenStays(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, nil)
	turn := func(q int) string { return sessionBody("conv-1", q) }

	before := chatsOf(bs)
	sendTurns(t, gw, turn, 0, 15)
	first := home(t, bs, before, 15)
	st := backendStates(gw)[bs[first].URL]
	if st.Routes[reasonSessionSticky.String()] != 14 {
		t.Fatalf("the home backend's routes %v: want 14 session_sticky after the first turn", st.Routes)
	}

	bs[first].waiting.Store(5) // past prefix.spill_waiting, the others at 0
	waitFor(t, 2*time.Second, "the queue to show", func() bool {
		w := backendStates(gw)[bs[first].URL].Load.Waiting
		return w != nil && *w == 5
	})
	before = chatsOf(bs)
	sendTurns(t, gw, turn, 15, 1)
	second := home(t, bs, before, 1)
	if second == first {
		t.Fatal("the session stayed on a backend whose queue passed the guard")
	}
	if n := backendStates(gw)[bs[second].URL].Routes[reasonSessionMoved.String()]; n != 1 {
		t.Fatalf("the new backend counts %d session_moved, want 1", n)
	}

	bs[first].waiting.Store(0)
	waitFor(t, 2*time.Second, "the queue to drain", func() bool {
		w := backendStates(gw)[bs[first].URL].Load.Waiting
		return w != nil && *w == 0
	})
	before = chatsOf(bs)
	sendTurns(t, gw, turn, 16, 10)
	if got := home(t, bs, before, 10); got != second {
		t.Fatalf("after the move the session went back to backend %d, not %d where it moved", got, second)
	}
	if !strings.Contains(gw.logs.String(), "route=session_moved") || !strings.Contains(gw.logs.String(), "route=session_sticky") {
		t.Fatal("the log lines do not say session_sticky and session_moved")
	}
}

// Each source of a session key holds a conversation together: the
// default header, a header the operator names, the Responses API's
// conversation, and user only where allowed.
func TestSessionKeysFromHeadersConversationAndUser(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, func(pc *PoolConfig) {
		pc.Prefix.SessionHeaders = []string{"x-session-id", "X-Agent-Conversation"}
		pc.Prefix.SessionUser = true
	})
	plain := func(extra string) func(int) string {
		return func(q int) string {
			return fmt.Sprintf(`{"model":"m"%s,"messages":[{"role":"user","content":"turn %d: %s"}]}`, extra, q, strings.Repeat("different words each time ", q%5+4))
		}
	}
	for _, tc := range []struct {
		name string
		body func(int) string
		hdr  []string
	}{
		{"x-session-id", plain(""), []string{"X-Session-Id", "s-1"}},
		{"a header the operator named", plain(""), []string{"X-Agent-Conversation", "agent-7"}},
		{"conversation object", plain(`,"conversation":{"id":"conv_1"}`), nil},
		{"user", plain(`,"user":"alice"`), nil},
	} {
		for i := range 5 { // five sessions of each kind, each held together
			before := chatsOf(bs)
			body := tc.body
			hdr := tc.hdr
			if hdr != nil {
				hdr = []string{hdr[0], fmt.Sprintf("%s-%d", hdr[1], i)}
			} else {
				body = func(q int) string { return strings.Replace(tc.body(q), `"}`, fmt.Sprintf(`-%d"}`, i), 1) }
			}
			sendTurns(t, gw, body, 0, 6, hdr...)
			home(t, bs, before, 6)
		}
	}
}

// A backend out of selection — its health check failing, or its breaker
// open — is never chosen for a session it served, and the session stays
// where it moved when that backend is back.
func TestSessionNeverGoesToARemovedBackend(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, func(pc *PoolConfig) {
		pc.Health = HealthConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1}
	})
	turn := func(q int) string { return sessionBody("conv-h", q) }
	before := chatsOf(bs)
	sendTurns(t, gw, turn, 0, 5)
	first := home(t, bs, before, 5)
	other := 1 - first
	bs[first].healthStatus.Store(503)
	waitFor(t, 2*time.Second, "the session's backend to leave selection", func() bool { return !backendStates(gw)[bs[first].URL].Up })
	before = chatsOf(bs)
	sendTurns(t, gw, turn, 5, 20)
	if home(t, bs, before, 20) != other {
		t.Fatal("a session went to its backend while that backend's health check failed")
	}
	bs[first].healthStatus.Store(0)
	waitFor(t, 2*time.Second, "the backend to come back", func() bool { return backendStates(gw)[bs[first].URL].Up })
	before = chatsOf(bs)
	sendTurns(t, gw, turn, 25, 5)
	if home(t, bs, before, 5) != other {
		t.Fatal("the session went back to its old backend instead of staying where it moved")
	}
}

// With the session's backend's breaker open, the breaker refuses its
// permit and the request goes to another backend, which the session then
// keeps.
func TestSessionNeverGoesToABackendWhoseBreakerIsOpen(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, func(pc *PoolConfig) {
		pc.Breaker = BreakerConfig{FailureRatio: 0.5, MinRequests: 1, Interval: time.Minute, OpenTimeout: time.Minute, HalfOpenRequests: 1}
	})
	turn := func(q int) string { return sessionBody("conv-b", q) }
	before := chatsOf(bs)
	sendTurns(t, gw, turn, 0, 3)
	first := home(t, bs, before, 3)
	b := gw.state.Load().pools["p"].backends[first]
	for range 3 { // failures reported through permits open the breaker
		if done, err := b.cb.Allow(); err == nil {
			done(errAttemptFailed)
		}
	}
	if _, err := b.cb.Allow(); err == nil {
		t.Fatal("the breaker did not open")
	}
	before = chatsOf(bs)
	sendTurns(t, gw, turn, 3, 10)
	if home(t, bs, before, 10) == first {
		t.Fatal("a session went to its backend while its breaker was open")
	}
}

// A session key is a client's secret as far as the gateway is concerned:
// it never appears in the log, the request log, a metric label or
// /admin/stats, wherever it came from.
func TestSessionKeyIsNeverLoggedOrRecorded(t *testing.T) {
	t.Parallel()
	const bodyKey, hdrKey, userKey = "Body-Secret-Session-4711", "Header-Secret-Session-0815", "User-Secret-Alice-42"
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	var urls []string
	for _, b := range bs {
		urls = append(urls, b.URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Prefix.SessionUser = true
	cfg.Pools["p"] = pc
	logPath := filepath.Join(t.TempDir(), "requests.jsonl")
	cfg.RequestLog = tracing.LogConfig{Path: logPath}
	gw := startGateway(t, cfg)
	for q := range 4 {
		post(t, gw.URL, "/v1/chat/completions", sessionBody(bodyKey, q))
		post(t, gw.URL, "/v1/chat/completions", plainBody, "X-Session-Id", hdrKey)
		post(t, gw.URL, "/v1/chat/completions", `{"model":"m","user":"`+userKey+`","messages":[{"role":"user","content":"hi"}]}`)
		post(t, gw.URL, "/v1/chat/completions", `{"model":"m","prompt_cache_key":"`+bodyKey+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	}
	_, _, metrics := do(t, "GET", gw.AdminURL+"/metrics", "")
	_, _, stats := adminDo(t, gw, "GET", "/admin/stats", "", "")
	if !strings.Contains(metrics, "session_sticky") || !strings.Contains(stats, "session_sticky") {
		t.Fatalf("neither the metrics nor the stats count session_sticky: the test reads the wrong pages\n%.2000s", stats)
	}
	waitFor(t, 2*time.Second, "the request log", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "\n") >= 16
	})
	reqlog, _ := os.ReadFile(logPath)
	for name, text := range map[string]string{"the log": gw.logs.String(), "the request log": string(reqlog), "/metrics": metrics, "/admin/stats": stats} {
		for _, k := range []string{bodyKey, hdrKey, userKey} {
			if strings.Contains(text, k) {
				t.Errorf("%s holds the session key %s", name, k)
			}
		}
	}
}

// Hostile keys cost a bounded time and never fail a request: a megabyte
// of key in the body or a header, keys of the wrong JSON type, empty
// keys and bytes that are not UTF-8.
func TestHostileSessionKeysAreAnswered(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	var urls []string
	for _, b := range bs {
		urls = append(urls, b.URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Prefix.SessionUser = true
	cfg.Pools["p"] = pc
	cfg.Server.MaxHeaderBytes = 2 << 20 // so a megabyte of header reaches the session code
	cfg.Server.MaxBodyBytes = 4 << 20
	gw := startGateway(t, cfg)
	big := strings.Repeat("k\\\"\xff", 1<<20/4)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name string
		body string
		hdr  []string
	}{
		{"1 MB prompt_cache_key", `{"model":"m","prompt_cache_key":"` + big + `",` + msgs + `}`, nil},
		{"1 MB header", `{"model":"m",` + msgs + `}`, []string{"X-Session-Id", strings.Repeat("h", 1<<20)}},
		{"number", `{"model":"m","prompt_cache_key":5,` + msgs + `}`, nil},
		{"object", `{"model":"m","prompt_cache_key":{},"conversation":{"id":[]},` + msgs + `}`, nil},
		{"empty", `{"model":"m","prompt_cache_key":"","user":"",` + msgs + `}`, []string{"X-Session-Id", ""}},
		{"odd bytes", `{"model":"m","prompt_cache_key":"\u0000\ud800` + "\xfe" + `",` + msgs + `}`, []string{"X-Session-Id", "\xfe\xff"}},
		{"previous_response_id of the wrong type", `{"model":"m","previous_response_id":{"a":1},"user":7,` + msgs + `}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, _, resp := post(t, gw.URL, "/v1/chat/completions", tc.body, tc.hdr...)
			if code != 200 {
				t.Fatalf("status %d: %.300s", code, resp)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// Sessions are on by default in selection prefix, with the stated
// defaults; an empty session_headers reads none; sessions -1 turns them
// off; a bad value is named.
func TestSessionConfig(t *testing.T) {
	t.Parallel()
	read := func(t *testing.T, yml string) (PoolConfig, error) {
		t.Helper()
		var c Config
		if err := yamlconf.Decode([]byte("pools:\n  p:\n    selection: prefix\n    backends: [{url: http://127.0.0.1:1}]\n"+yml), &c); err != nil {
			t.Fatal(err)
		}
		c.Models = []ModelConfig{{Name: "m", Pool: "p"}}
		c.Defaults()
		return c.Pools["p"], c.Validate()
	}
	pc, err := read(t, "")
	x := pc.Prefix
	if err != nil || x.Sessions != 100000 || len(x.SessionHeaders) != 1 || x.SessionHeaders[0] != "x-session-id" || x.SessionUser || x.ColdLoadFactor != 0.25 || x.ColdLoadSlack != 2 {
		t.Fatalf("defaults: %+v, %v", x, err)
	}
	if newPrefixSelector("p", pc).Sessions().Entries() < 100000 {
		t.Fatal("the default table holds fewer than 100,000 sessions")
	}
	if pc, _ = read(t, "    prefix: {session_headers: []}\n"); len(pc.Prefix.SessionHeaders) != 0 {
		t.Fatalf("session_headers: [] reads %v", pc.Prefix.SessionHeaders)
	}
	pc, _ = read(t, "    prefix: {sessions: -1}\n")
	off := newPrefixSelector("p", pc)
	if off.Sessions() != nil {
		t.Fatal("sessions: -1 still made a table")
	}
	for _, tc := range []struct{ yml, want string }{
		{"    prefix: {sessions: 10}\n", "pools.p.prefix.sessions"},
		{"    prefix: {session_headers: [\"x session\"]}\n", "pools.p.prefix.session_headers[0]"},
		{"    prefix: {cold_load_factor: -1}\n", "cold_load_factor"},
	} {
		if _, err := read(t, tc.yml); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.yml, err, tc.want)
		}
	}
}

// storingBackend is a Responses server that stores what it answers, as
// vLLM does in its own memory: a request continuing a response it did
// not write (previous_response_id) is answered 404.
func storingBackend(t *testing.T, name string) *testBackend {
	var mu sync.Mutex
	stored := map[string]bool{}
	n := 0
	return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != openai.ResponsesPath {
			w.WriteHeader(404)
			return
		}
		var req openai.ResponsesRequest
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p := req.PreviousResponseID; p != nil && !stored[*p] {
			w.WriteHeader(404)
			fmt.Fprintf(w, `{"error":{"message":"Response with id '%s' not found.","type":"NotFoundError"}}`, *p)
			return
		}
		n++
		id := fmt.Sprintf("resp_%s_%d", name, n)
		stored[id] = true
		resp := fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]}],"usage":{"input_tokens":5,"output_tokens":1,"total_tokens":6}}`, id)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, resp)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":%q,\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"m\",\"output\":[]}}\n\n", id)
		fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"ok\"}\n\n")
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":%s}\n\n", resp)
	})
}

// A Responses conversation that continues its stored responses
// (previous_response_id) reaches the backend that stored each one, turn
// after turn, streamed or not: the gateway learns where each answer's id
// lives without keeping the id.
func TestContinuedResponsesGoWhereTheyAreStored(t *testing.T) {
	t.Parallel()
	var urls []string
	for i := range 4 {
		urls = append(urls, storingBackend(t, fmt.Sprint(i)).URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	cfg.Pools["p"] = pc
	gw := startGateway(t, cfg)
	for conv := range 6 {
		prev := ""
		for turn := range 6 {
			stream := (conv+turn)%2 == 1
			body := fmt.Sprintf(`{"model":"m","input":"conversation %d turn %d","stream":%v`, conv, turn, stream)
			if prev != "" {
				body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
			}
			code, _, resp := post(t, gw.URL, openai.ResponsesPath, body+"}")
			if code != 200 {
				t.Fatalf("conversation %d turn %d: status %d: %s", conv, turn, code, resp)
			}
			if stream {
				evs := events(resp)
				if len(evs) == 0 {
					t.Fatalf("no events: %s", resp)
				}
				resp = evs[0]
			}
			id := openai.ResponseID([]byte(resp))
			if id == nil {
				t.Fatalf("no id in %s", resp)
			}
			prev = string(id)
		}
	}
	if strings.Contains(gw.logs.String(), "resp_") {
		t.Fatal("a response id reached the log")
	}
}

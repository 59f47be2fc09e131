package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/sim/simtest"
)

func mirrorConfig(primary, candidate string) Config {
	cfg := testConfig(primary)
	cfg.Pools["cand"] = PoolConfig{Backends: []BackendConfig{{URL: candidate}}}
	cfg.Mirror.Rules = []mirror.Rule{{Name: "try", Pool: "cand"}}
	return cfg
}

func pairStats(t *testing.T, gw *testGateway, want int) adminapi.Pairs {
	t.Helper()
	var s adminapi.Pairs
	waitFor(t, 10*time.Second, "the pairs", func() bool {
		resp, err := http.Get(gw.AdminURL + "/admin/pairs")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		s = adminapi.Pairs{}
		return json.NewDecoder(resp.Body).Decode(&s) == nil && len(s.Pairs) >= want
	})
	return s
}

// TestMirrorRecordsPairs: both sims answer; each pair holds both answers,
// timed, and the file has the same lines as the admin API.
func TestMirrorRecordsPairs(t *testing.T) {
	t.Parallel()
	primary := simtest.Start(t, simtest.Fixed(2*time.Millisecond, time.Millisecond))
	candidate := simtest.Start(t, simtest.Fixed(20*time.Millisecond, 3*time.Millisecond))
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	path := filepath.Join(t.TempDir(), "pairs.jsonl")
	cfg.Mirror.Record.Path = path
	gw := startGateway(t, cfg)
	for i := range 6 {
		body := `{"model":"m","max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
		if i%2 == 0 {
			body = `{"model":"m","stream":true,"max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
		}
		if status, _, b := post(t, gw.URL, "/v1/chat/completions", body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	s := pairStats(t, gw, 6)
	var aTTFT, cTTFT, aE2E, cE2E []float64
	for _, p := range s.Pairs {
		a, c := p.Primary, p.Candidate
		if !a.OK() || !c.OK() || a.OutputTokens != 8 || c.OutputTokens != 8 || a.Output == "" || c.Output == "" || a.OutputSHA256 == "" {
			t.Errorf("pair %+v", p)
		}
		// The candidate is set 10× slower to its first token and 3× per
		// token; a late first token compresses the sim's later gaps, so
		// the per-token time is held only to be there. Its 20 ms wait
		// is a floor whatever the load.
		if p.Stream {
			if c.TTFTms < 15 || c.TPOTms <= 0 {
				t.Errorf("stream pair timings: candidate ttft %.1f tpot %.1f", c.TTFTms, c.TPOTms)
			}
			aTTFT, cTTFT, aE2E, cE2E = append(aTTFT, a.TTFTms), append(cTTFT, c.TTFTms), append(aE2E, a.E2Ems), append(cE2E, c.E2Ems)
		}
		if p.Prompt != "hello" {
			t.Errorf("prompt %q, want the last user message", p.Prompt)
		}
		if p.Similarity < 0 || p.Similarity > 1 || p.LengthRatio <= 0 {
			t.Errorf("similarity %v ratio %v", p.Similarity, p.LengthRatio)
		}
	}
	// Each side's timings are its own: the candidate is the slower of the
	// two, held on the pairs' medians so one request stalled on a loaded
	// machine does not turn it round.
	if median(aTTFT) >= median(cTTFT) || median(aE2E) >= median(cE2E) {
		t.Errorf("stream pairs: primary ttft %v e2e %v, candidate ttft %v e2e %v: want the candidate slower", aTTFT, aE2E, cTTFT, cE2E)
	}
	ctxShutdown(t, gw)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var p mirror.Pair
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil || p.Rule != "try" {
			t.Errorf("line %q: %v", sc.Text(), err)
		}
		lines++
	}
	if lines != 6 {
		t.Errorf("%d lines in the pairs file, want 6", lines)
	}
}

// TestMirrorNeverTouchesThePrimary: a candidate that never answers
// leaves the primary's answers and timing as they were; its copies past
// the cap are dropped and counted; the overrides reach the candidate and
// not the primary.
func TestMirrorNeverTouchesThePrimary(t *testing.T) {
	primary := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`))
	})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	candidate := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select { // hangs until the test ends
		case <-release:
		case <-r.Context().Done():
		}
	})
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Mirror.Rules[0].MaxInFlight = 2
	cfg.Mirror.Rules[0].Overrides = mirror.Overrides{Model: "cand-model", Fields: map[string]any{"temperature": 0.0, "max_tokens": 7}}
	gw := startGateway(t, cfg)
	var slowest time.Duration
	for range 10 {
		start := time.Now()
		status, _, body := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","temperature":0.8,"messages":[{"role":"user","content":"hi"}]}`)
		if d := time.Since(start); d > slowest {
			slowest = d
		}
		if status != 200 || !strings.Contains(body, `"hi"`) {
			t.Fatalf("%d %s", status, body)
		}
	}
	if slowest > 500*time.Millisecond {
		t.Errorf("a primary took %v beside a candidate that never answers", slowest)
	}
	_, pb := primary.last()
	if !strings.Contains(pb, `"temperature":0.8`) || strings.Contains(pb, "cand-model") || strings.Contains(pb, "max_tokens") {
		t.Errorf("the primary got %s", pb)
	}
	waitFor(t, 5*time.Second, "two copies at the candidate", func() bool { return candidate.requests.Load() == 2 })
	_, cb := candidate.last()
	if !strings.Contains(cb, `"model":"cand-model"`) || !strings.Contains(cb, `"temperature":0`) || !strings.Contains(cb, `"max_tokens":7`) {
		t.Errorf("the candidate got %s", cb)
	}
	s := gw.pairs.Stats()
	if s.Dropped["try cap_full"] != 8 {
		t.Errorf("dropped %v, want 8 copies past the cap of 2", s.Dropped)
	}
	resp, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	io.Copy(&sb, resp.Body)
	if !strings.Contains(sb.String(), `infergate_mirror_dropped_total{reason="cap_full",rule="try"} 8`) ||
		!strings.Contains(sb.String(), "infergate_mirror_in_flight 2") {
		t.Errorf("metrics lack the mirror's drops and copies in flight:\n%s", grepLines(sb.String(), "mirror"))
	}
}

func ctxShutdown(t *testing.T, gw *testGateway) {
	t.Helper()
	ctx, cancel := contextTimeout(2 * time.Second)
	defer cancel()
	gw.Shutdown(ctx)
}

// TestMirrorChecksTheSchema: with a json_schema response format, an
// answer that is JSON but off the schema is marked; a schema that points
// outside itself is not followed (and not used).
func TestMirrorChecksTheSchema(t *testing.T) {
	t.Parallel()
	answer := func(content string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			b, _ := json.Marshal(map[string]any{"id": "x", "object": "chat.completion",
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}}})
			w.Write(b)
		}
	}
	primary := newTestBackend(t, answer(`{"city":"Paris","temp":18}`))
	candidate := newTestBackend(t, answer(`{"city":"Paris","temp":"warm"}`))
	gw := startGateway(t, mirrorConfig(primary.URL, candidate.URL))
	schema := `{"type":"object","properties":{"city":{"type":"string"},"temp":{"type":"number"}},"required":["city","temp"]}`
	body := `{"model":"m","messages":[{"role":"user","content":"weather"}],"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":` + schema + `}}}`
	if status, _, b := post(t, gw.URL, "/v1/chat/completions", body); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	evil := `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"e","schema":{"$ref":"file:///etc/passwd"}}}}`
	if status, _, b := post(t, gw.URL, "/v1/chat/completions", evil); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	s := pairStats(t, gw, 2)
	// Pairs are recorded as their answers end, not in request order.
	p, e := s.Pairs[0], s.Pairs[1]
	if p.Prompt != "weather" {
		p, e = e, p
	}
	if !p.JSONAsked || !p.SchemaGiven || p.Primary.SchemaInvalid || !p.Candidate.SchemaInvalid || p.Candidate.InvalidJSON {
		t.Errorf("schema pair %+v", p)
	}
	if e.SchemaGiven || e.Primary.SchemaInvalid {
		t.Errorf("a schema with an outside $ref was used: %+v", e)
	}
}

// TestMirrorAA: with aa, the primary's request also goes once more,
// unchanged, to the primary's pool, and the pair holds that answer.
func TestMirrorAA(t *testing.T) {
	t.Parallel()
	primary := simtest.Start(t, simtest.Fixed(2*time.Millisecond, time.Millisecond))
	candidate := simtest.Start(t, simtest.Fixed(2*time.Millisecond, time.Millisecond))
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	cfg.Mirror.Rules[0].AA = true
	cfg.Mirror.Rules[0].Overrides.Fields = map[string]any{"max_tokens": 3}
	gw := startGateway(t, cfg)
	for range 4 {
		if status, _, b := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	for _, p := range pairStats(t, gw, 4).Pairs {
		if p.Noise == nil || !p.Noise.OK() || p.Noise.Backend != primary.URL || p.Noise.OutputTokens != 8 || p.Candidate.OutputTokens != 3 {
			t.Errorf("pair %+v, A/A %+v", p, p.Noise)
		}
	}
}

// TestSplit: a canary serves its share from the candidate pool, sticky
// by a header, and records each request as one arm.
func TestSplit(t *testing.T) {
	t.Parallel()
	answer := func(who string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + who + `"},"finish_reason":"stop"}]}`))
		}
	}
	primary := newTestBackend(t, answer("from primary"))
	candidate := newTestBackend(t, answer("from candidate"))
	cfg := testConfig(primary.URL)
	cfg.Pools["cand"] = PoolConfig{Backends: []BackendConfig{{URL: candidate.URL}}}
	cfg.Mirror.Split = &mirror.Split{Pool: "cand", Weight: 0.5, Sticky: "header:X-User"}
	gw := startGateway(t, cfg)
	seen := map[string]string{}
	for i := range 40 {
		user := fmt.Sprintf("user-%d", i%10)
		_, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody, "X-User", user)
		who := "primary"
		if strings.Contains(body, "from candidate") {
			who = "candidate"
		}
		if prev, ok := seen[user]; ok && prev != who {
			t.Fatalf("%s was served by %s, then by %s", user, prev, who)
		}
		seen[user] = who
	}
	n := candidate.requests.Load()
	if n == 0 || n == 40 {
		t.Fatalf("the candidate served %d of 40 requests, want a share", n)
	}
	s := pairStats(t, gw, 40)
	cands := 0
	for _, p := range s.Pairs {
		switch p.Split {
		case "candidate":
			cands++
			if !p.Candidate.OK() || p.Primary.Status != 0 {
				t.Errorf("candidate record %+v", p)
			}
		case "primary":
			if !p.Primary.OK() || p.Candidate.Status != 0 {
				t.Errorf("primary record %+v", p)
			}
		default:
			t.Errorf("record without a split arm: %+v", p)
		}
	}
	if int64(cands) != n {
		t.Errorf("%d candidate records, %d candidate requests", cands, n)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMirrorCopyEndsWithTheClient: when the primary's client goes away,
// its copy is cancelled as the primary is (no backend generates for
// nobody), the rule's slot comes back and the pair is still recorded.
func TestMirrorCopyEndsWithTheClient(t *testing.T) {
	t.Parallel()
	primary := simtest.Start(t, simtest.Fixed(5*time.Millisecond, 20*time.Millisecond))
	copyEnded := make(chan struct{}, 1)
	candidate := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select { // answers only when the gateway gives up on it
		case <-r.Context().Done():
			copyEnded <- struct{}{}
		case <-time.After(20 * time.Second):
		}
	})
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	gw := startGateway(t, cfg)
	c, br := rawStream(t, gw.Addr, `{"model":"m","stream":true,"max_tokens":500,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`)
	if _, err := br.ReadString('\n'); err != nil { // the status line: the stream runs
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the copy at the candidate", func() bool { return candidate.requests.Load() == 1 })
	c.Close() // the client goes away mid-stream
	select {
	case <-copyEnded:
	case <-time.After(3 * time.Second):
		t.Fatal("the copy went on after the primary's client left")
	}
	waitFor(t, 3*time.Second, "the rule's slot back", func() bool { return gw.MirrorsInFlight() == 0 })
	p := pairStats(t, gw, 1).Pairs[0]
	if p.Primary.Status != 499 || p.Candidate.Error == "" {
		t.Errorf("pair %+v", p)
	}
}

// TestMirrorCopyOfAnUnsentPrimary: a copy starts once its primary's
// request is written to a backend; a primary that never is (its backend
// refuses the connection) still has its copy made, as the request ends,
// and the pair recorded with the primary's failure beside it.
func TestMirrorCopyOfAnUnsentPrimary(t *testing.T) {
	t.Parallel()
	candidate := simtest.Start(t, simtest.Fixed(time.Millisecond, time.Millisecond))
	cfg := mirrorConfig(deadURL(t), candidate.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	gw := startGateway(t, cfg)
	status, _, b := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status < 500 {
		t.Fatalf("the primary's backend refuses connections, yet %d %s", status, b)
	}
	p := pairStats(t, gw, 1).Pairs[0]
	if p.Primary.Status != status || !p.Candidate.OK() || p.Candidate.OutputTokens != 4 {
		t.Errorf("pair %+v: want the primary's %d beside the candidate's whole answer", p, status)
	}
	waitFor(t, 3*time.Second, "the rule's slot back", func() bool { return gw.MirrorsInFlight() == 0 })
}

// median is the middle of xs (the upper one of an even count), 0 when
// empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

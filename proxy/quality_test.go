package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/quality"
)

// answerCase is one answer the backend gives, and what the request asks.
type answerCase struct {
	text, finish string
	format       string // "", json_object or json_schema
	stream       bool
}

const personSchema = `{"type":"object","required":["name","age"],"properties":{"name":{"type":"string"},"age":{"type":"integer"}}}`

// answerCases are 200 answers: refusals phrased both ways (and answers
// that only look like refusals), JSON valid, invalid and off the schema,
// empty, truncated; each streamed and plain.
func answerCases() []answerCase {
	texts := []struct{ text, finish, format string }{
		{"Paris is the capital of France.", "stop", ""},
		{"I'm sorry, but I can't help with that request.", "stop", ""},
		{"I\u2019m sorry, but I can\u2019t help with that.", "stop", ""},
		{"I cannot assist with creating malware.", "stop", ""},
		{"As an AI, I cannot browse the web.", "stop", ""},
		{"Unfortunately, I'm unable to provide that.", "stop", ""},
		{"I'm sorry to hear that. Here is how to reset it: open settings.", "stop", ""},
		{"Sure! As an AI model, here is a summary: it rains.", "stop", ""},
		{"I apologize, but that is outside what I can do.", "stop", ""},
		{"Here is the list you asked for: one, two, three.", "length", ""},
		{"", "stop", ""},
		{"   ", "stop", ""},
		{`{"answer": 42}`, "stop", "json_object"},
		{`{"answer": 4`, "length", "json_object"},
		{`not json at all`, "stop", "json_object"},
		{`{"name": "Ada", "age": 36}`, "stop", "json_schema"},
		{`{"name": "Ada"}`, "stop", "json_schema"},
		{`{"name": "Ada", "age": "old"}`, "stop", "json_schema"},
		{`{"name": "Ada", "age":`, "length", "json_schema"},
		{"I'm sorry, but I won't comply with that.", "stop", "json_object"},
	}
	var out []answerCase
	for len(out) < 200 {
		for _, tx := range texts {
			for _, stream := range []bool{true, false} {
				if len(out) < 200 {
					out = append(out, answerCase{tx.text, tx.finish, tx.format, stream})
				}
			}
		}
	}
	return out
}

var caseNo = regexp.MustCompile(`case-(\d+)`)

// answeringBackend answers case N of cases, streamed when asked.
func answeringBackend(t *testing.T, cases []answerCase) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream   bool `json:"stream"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, fmt.Sprintf("bad request: %v %d", err, len(req.Messages)), 400)
			return
		}
		m := caseNo.FindStringSubmatch(req.Messages[0].Content)
		n, _ := strconv.Atoi(m[1])
		c := cases[n]
		q, _ := json.Marshal(c.text)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":%q}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`, q, c.finish)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		// The text in pieces, as a server tokenizes it.
		for s := c.text; len(s) > 0; {
			k := min(len(s), 4)
			for k < len(s) && !utf8Start(s[k]) {
				k++
			}
			piece, _ := json.Marshal(s[:k])
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":null}]}\n\n", piece)
			s = s[k:]
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%q}]}\n\n", c.finish)
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\ndata: [DONE]\n\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// caseWorkload sends case i as request i.
type caseWorkload struct{ cases []answerCase }

func (w caseWorkload) Len() int { return len(w.cases) }
func (w caseWorkload) Request(i int) bench.Request {
	c := w.cases[i%len(w.cases)]
	body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"case-%d"}]`, c.stream, i%len(w.cases))
	switch c.format {
	case "json_object":
		body += `,"response_format":{"type":"json_object"}`
	case "json_schema":
		body += `,"response_format":{"type":"json_schema","json_schema":{"name":"person","schema":` + personSchema + `}}`
	}
	body += "}"
	return bench.Request{Body: []byte(body), At: -1, Ask: quality.AskOf([]byte(body))}
}

// TestBenchAndMirrorJudgeAlike: the same 200 answers get the same
// quality signals from bench (as the client saw them through the
// gateway) and from the mirror (both arms of every pair: the primary and
// the candidate, which is the same backend).
func TestBenchAndMirrorJudgeAlike(t *testing.T) {
	t.Parallel()
	cases := answerCases()
	be := answeringBackend(t, cases)
	cfg := mirrorConfig(be, be)
	cfg.Mirror.Rules[0].MaxInFlight = 256
	gw := startGateway(t, cfg)

	client, err := bench.NewClient(gw.URL+"/v1/chat/completions", bench.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	judge, err := quality.NewJudge(nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fromBench := map[int]quality.Signals{}
	rn := &bench.Runner{Client: client, Workload: caseWorkload{cases}, Quality: judge, Stream: true, Sink: func(r *bench.Result) {
		if !r.OK() {
			t.Errorf("request %d failed: %s", r.Index, r.Err)
			return
		}
		mu.Lock()
		fromBench[r.Index] = r.Signals
		mu.Unlock()
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := rn.Run(ctx, 0, bench.LoadSpec{Mode: "closed", Concurrency: 8, Requests: len(cases), Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	pairs := pairStats(t, gw, len(cases)).Pairs
	byCase := map[int]mirror.Pair{}
	for _, p := range pairs {
		if m := caseNo.FindStringSubmatch(p.Prompt); m != nil {
			n, _ := strconv.Atoi(m[1])
			byCase[n] = p
		}
	}
	if len(fromBench) != len(cases) || len(byCase) != len(cases) {
		t.Fatalf("%d answers judged by bench, %d pairs; want %d of each", len(fromBench), len(byCase), len(cases))
	}
	seen := map[quality.Signals]int{}
	for i, c := range cases {
		b, p := fromBench[i], byCase[i]
		seen[b]++
		// bench reads finish "length" as truncation unless a gateway's cap
		// did it; the signals compared are those both sides judge.
		for arm, m := range map[string]quality.Signals{"primary": p.Primary.Signals, "candidate": p.Candidate.Signals} {
			if m != b {
				t.Errorf("case %d (%q, %s, stream %v): bench %+v, mirror's %s %+v", i, c.text, c.format, c.stream, b, arm, m)
			}
		}
		if c.format == "json_schema" != p.SchemaGiven {
			t.Errorf("case %d: schema given %v", i, p.SchemaGiven)
		}
	}
	// The table covers every signal, so agreement is not agreement on
	// nothing.
	var any quality.Signals
	for s := range seen {
		any.InvalidJSON = any.InvalidJSON || s.InvalidJSON
		any.SchemaInvalid = any.SchemaInvalid || s.SchemaInvalid
		any.Refusal = any.Refusal || s.Refusal
		any.Empty = any.Empty || s.Empty
		any.Truncated = any.Truncated || s.Truncated
	}
	if !any.InvalidJSON || !any.SchemaInvalid || !any.Refusal || !any.Empty || !any.Truncated {
		t.Errorf("the answers did not show every signal: %+v (%d kinds)", any, len(seen))
	}
}

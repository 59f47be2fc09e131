package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/sim/simtest"
)

const responsesStreamBody = `{"model":"m","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}],"max_output_tokens":20,"ignore_eos":true}`

// TestResponsesThroughTheGateway: a reasoning model's Responses stream
// is relayed event for event (names, data and order as the backend sent
// them), the gateway's timing rides on response.completed with the
// thinking's 10 × 5 ms as reasoning_ms and the first output token as
// ttfo_ms, and the request log has the finish, the TTFO and the
// reasoning tokens.
func TestResponsesThroughTheGateway(t *testing.T) {
	scfg := simtest.Fixed(20*time.Millisecond, 5*time.Millisecond)
	scfg.Output.ReasoningTokens = 10
	s := simtest.Start(t, scfg)
	cfg := testConfig(s.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	gw := startGateway(t, cfg)

	direct := strings.Replace(responsesStreamBody, `"m"`, `"sim-model"`, 1)
	_, _, want := post(t, s.URL, "/v1/responses", direct)
	status, h, body := post(t, gw.URL, "/v1/responses", responsesStreamBody, "X-Infergate-Timing", "1")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v %s", status, h, body)
	}
	names := func(b string) []string {
		er := openai.NewEventReader(strings.NewReader(b), nil, 1<<20)
		var out []string
		for {
			ev, err := er.Next()
			if err != nil {
				return out
			}
			out = append(out, string(openai.EventName(ev))+" "+string(openai.ResponseEventType(openai.EventData(ev))))
		}
	}
	got, exp := names(body), names(want)
	if strings.Join(got, ",") != strings.Join(exp, ",") || len(got) < 30 {
		t.Fatalf("events through the gateway:\n%v\ndirect:\n%v", got, exp)
	}
	evs := events(body)
	var done struct {
		Type     string          `json:"type"`
		Response openai.Response `json:"response"`
		Timing   *openai.Timing  `json:"infergate_timing"`
	}
	if err := json.Unmarshal([]byte(evs[len(evs)-1]), &done); err != nil || done.Type != "response.incomplete" || done.Timing == nil {
		t.Fatalf("last event %s: %v", evs[len(evs)-1], err)
	}
	tm := done.Timing
	if tm.Reasoning < 45 || tm.Reasoning > 65 || tm.TTFO-tm.TTFT < 45 || tm.TTFO-tm.TTFT > 65 {
		t.Errorf("timing: reasoning %.1f ms, ttft %.1f, ttfo %.1f: want the sim's 50 ms of thinking between them", tm.Reasoning, tm.TTFT, tm.TTFO)
	}
	if done.Response.Usage.OutputTokensDetails.ReasoningTokens != 10 {
		t.Errorf("usage %+v", done.Response.Usage)
	}
	waitFor(t, 2*time.Second, "the request's log line", func() bool { return strings.Contains(gw.logs.String(), "reasoning_tokens=10") })
	logs := gw.logs.String()
	for _, want := range []string{"path=/v1/responses", "ttfo_ms=", "reasoning_ms="} {
		if !strings.Contains(logs, want) {
			t.Errorf("log has no %s:\n%s", want, logs)
		}
	}

	// Whole: routed by model, the answer as the backend sent it.
	status, _, body = post(t, gw.URL, "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":8}`)
	var r openai.Response
	if err := json.Unmarshal([]byte(body), &r); status != 200 || err != nil || r.Object != "response" || r.OutputText() == "" {
		t.Errorf("whole: %d %s", status, body)
	}
	// Its thinking (7 of its 8 tokens) is counted in its log line too.
	waitFor(t, 2*time.Second, "the whole request's log line", func() bool { return strings.Contains(gw.logs.String(), "reasoning_tokens=7") })
	// Strict: a body without a model, or a GET, is the gateway's 4xx.
	if status, _, body := post(t, gw.URL, "/v1/responses", `{"input":"hi"}`); status != 400 || !strings.Contains(body, "model") {
		t.Errorf("no model: %d %s", status, body)
	}
	if resp, err := http.Get(gw.URL + "/v1/responses"); err != nil || resp.StatusCode != 405 {
		t.Errorf("GET: %v %v", resp, err)
	}
}

// TestResponsesPolicy: max_output_tokens is clamped, the input counted,
// and a request continuing a stored response is marked as counted
// without its history.
func TestResponsesPolicy(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":3,"output_tokens":1}}`))
	cfg := testConfig(b.URL)
	cfg.Policy = policy.Config{Limits: policy.Limits{MaxOutputTokens: 64, MaxInputTokens: 1000}}
	gw := startGateway(t, cfg)
	status, h, body := post(t, gw.URL, "/v1/responses", `{"model":"m","instructions":"Be brief.","input":"hello there","max_output_tokens":5000,"previous_response_id":"resp_0"}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	_, sent := b.last()
	if !strings.Contains(sent, `"max_output_tokens":64`) || strings.Contains(sent, "stream_options") || strings.Contains(sent, "max_tokens") {
		t.Errorf("the backend got %s", sent)
	}
	if h.Get("X-Infergate-Max-Tokens-Clamped") != "64" || h.Get("X-Infergate-Input-History") != "unknown" || h.Get("X-Infergate-Input-Tokens") == "" {
		t.Errorf("headers %v", h)
	}
	// Without a policy to apply, a continued response is marked all the same.
	bare := startGateway(t, testConfig(b.URL))
	for body, want := range map[string]string{
		`{"model":"m","input":"and then?","previous_response_id":"resp_0"}`: "unknown",
		`{"model":"m","input":"hi","previous_response_id":null}`:            "",
	} {
		if _, h, _ := post(t, bare.URL, "/v1/responses", body); h.Get("X-Infergate-Input-History") != want {
			t.Errorf("%s: X-Infergate-Input-History %q, want %q", body, h.Get("X-Infergate-Input-History"), want)
		}
	}
}

// TestResponsesErrorEvent: a backend that dies mid-stream leaves the
// client a Responses error event, the form its SDK reads.
func TestResponsesErrorEvent(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hel\"}\n\n"))
		w.(http.Flusher).Flush()
		resetConn(w)
	})
	gw := startGateway(t, testConfig(b.URL))
	_, _, body := post(t, gw.URL, "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`)
	evs := events(body)
	last := evs[len(evs)-1]
	var e struct{ Type, Code, Message string }
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Type != "error" || e.Message == "" || !strings.Contains(body, "event: error\n") {
		t.Errorf("stream ended with %s (%v)", last, err)
	}
}

// TestResponsesMirrored: a mirrored Responses request makes a pair whose
// arms both read the Responses stream: text, tokens, the first output
// token after the thinking, the reasoning tokens.
func TestResponsesMirrored(t *testing.T) {
	scfg := simtest.Fixed(2*time.Millisecond, 2*time.Millisecond)
	scfg.Output.ReasoningTokens = 5
	primary, candidate := simtest.Start(t, scfg), simtest.Start(t, scfg)
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	gw := startGateway(t, cfg)
	for _, body := range []string{responsesStreamBody, `{"model":"m","input":"hello","max_output_tokens":12,"ignore_eos":true}`} {
		if status, _, b := post(t, gw.URL, "/v1/responses", body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	for _, p := range pairStats(t, gw, 2).Pairs {
		for _, a := range []struct {
			name string
			arm  interface{ OK() bool }
		}{{"primary", &p.Primary}, {"candidate", &p.Candidate}} {
			if !a.arm.OK() {
				t.Errorf("%s arm failed: %+v", a.name, p)
			}
		}
		c, pr := p.Candidate, p.Primary
		if c.Output == "" || pr.Output == "" || c.ReasoningTokens != 5 || pr.ReasoningTokens != 5 || p.Similarity <= 0 {
			t.Errorf("pair %s: primary %+v candidate %+v similarity %v", p.Path, pr, c, p.Similarity)
		}
		if p.Stream && (c.TTFOms <= c.TTFTms || pr.TTFOms <= pr.TTFTms) {
			t.Errorf("stream pair: ttft %.1f/%.1f ttfo %.1f/%.1f", pr.TTFTms, c.TTFTms, pr.TTFOms, c.TTFOms)
		}
	}
}

// TestResponsesHostile: what a Responses request or stream can do wrong
// ends that request cleanly, in the Responses API's own form, and frees
// its slot: a duplicated input (refused: parsers disagree on which copy
// counts), an event larger than the relay holds, and a stream cut off
// before response.completed; a client that leaves mid-stream has the
// backend's request end.
func TestResponsesHostile(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 2<<20)
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"))
		w.(http.Flusher).Flush()
		switch r.Header.Get("X-Case") {
		case "huge":
			w.Write([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + huge + "\"}\n\n"))
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		// "cut": the stream just ends, no response.completed.
	})
	cfg := testConfig(b.URL)
	cfg.Policy = policy.Config{Limits: policy.Limits{MaxOutputTokens: 64}}
	cfg.Shaping.Global.MaxRequests = 1 // a leaked slot would refuse the next request
	gw := startGateway(t, cfg)
	stream := `{"model":"m","stream":true,"input":"hi"}`

	status, _, body := post(t, gw.URL, "/v1/responses", `{"model":"m","input":"a","input":"b"}`)
	if status != 400 || !strings.Contains(body, "input") {
		t.Errorf("duplicated input: %d %s", status, body)
	}
	for _, c := range []string{"huge", "cut"} {
		_, _, body := post(t, gw.URL, "/v1/responses", stream, "X-Case", c)
		evs := events(body)
		var e struct{ Type, Code, Message string }
		if err := json.Unmarshal([]byte(evs[len(evs)-1]), &e); err != nil || e.Type != "error" || e.Code == "" || strings.Contains(body, huge[:1<<10]) {
			t.Errorf("%s: the stream ended with %.200s (%v)", c, evs[len(evs)-1], err)
		}
	}
	// The client leaves mid-stream: the backend's request ends, and the
	// gateway's one slot is free again.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/v1/responses", strings.NewReader(stream))
	req.Header.Set("X-Case", "slow")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 64))
	cancel()
	resp.Body.Close()
	waitFor(t, 2*time.Second, "the slot freed", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	if status, _, body := post(t, gw.URL, "/v1/responses", stream, "X-Case", "cut"); status != 200 {
		t.Errorf("after the client left: %d %s", status, body)
	}
	if !strings.Contains(gw.logs.String(), "no response.completed") {
		t.Errorf("the cut stream's log does not say what was missing:\n%s", gw.logs.String())
	}
}

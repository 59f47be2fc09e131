package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startSim runs a simulator on a kernel-picked port and returns its URL.
func startSim(t testing.TB, cfg Config) (string, *Server) {
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), s
}

func fixedConfig(ttft, itl time.Duration) Config {
	c := DefaultConfig()
	c.Mode, c.TTFT, c.ITL = ModeFixed, ttft, itl
	return c
}

// event is one SSE event as a client saw it.
type event struct {
	at   time.Time
	data string
}

// streamRequest posts body and reads the SSE events with their arrival times.
func streamRequest(t testing.TB, url, path, body string, hdr map[string]string) (*http.Response, []event, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []event
	er := openai.NewEventReader(resp.Body, nil, 1<<20)
	for {
		ev, err := er.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return resp, evs, err
		}
		evs = append(evs, event{at: time.Now(), data: string(openai.EventData(ev))})
	}
}

func chatBody(extra string) string {
	return `{"model":"sim-model","messages":[{"role":"user","content":"Say something about caches."}],"stream":true` + extra + `}`
}

func TestStreamFormat(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, 0))
	resp, evs, err := streamRequest(t, url, "/v1/chat/completions",
		chatBody(`,"max_tokens":7,"ignore_eos":true,"stream_options":{"include_usage":true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	// role chunk, 7 content chunks, finish chunk, usage chunk, [DONE]
	if len(evs) != 11 {
		t.Fatalf("got %d events, want 11: %v", len(evs), evs)
	}
	var first openai.Chunk
	if err := json.Unmarshal([]byte(evs[0].data), &first); err != nil || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %q: want the assistant role (err %v)", evs[0].data, err)
	}
	var text strings.Builder
	for _, e := range evs[1:8] {
		var c openai.Chunk
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatalf("chunk %q: %v", e.data, err)
		}
		if c.Object != "chat.completion.chunk" || c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == "" {
			t.Errorf("content chunk %q malformed", e.data)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	var fin openai.Chunk
	json.Unmarshal([]byte(evs[8].data), &fin)
	if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" {
		t.Errorf("finish chunk %q: want finish_reason length", evs[8].data)
	}
	var usage openai.Chunk
	json.Unmarshal([]byte(evs[9].data), &usage)
	if usage.Usage == nil || len(usage.Choices) != 0 || usage.Usage.CompletionTokens != 7 {
		t.Errorf("usage chunk %q: want empty choices and 7 completion tokens", evs[9].data)
	}
	if evs[10].data != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", evs[10].data)
	}
	// The reported count is what a real BPE tokenizer counts in the text.
	tok, _ := tokens.New()
	if n := tok.Count(text.String()); n != 7 {
		t.Errorf("text %q has %d cl100k tokens, usage says 7", text.String(), n)
	}
	if want := tok.Count("Say something about caches.") + 4 + 3; usage.Usage.PromptTokens != want {
		t.Errorf("prompt_tokens = %d, want %d", usage.Usage.PromptTokens, want)
	}
}

func TestCompletionsStreamAndWhole(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, 0))
	_, evs, err := streamRequest(t, url, "/v1/completions", `{"model":"sim-model","prompt":"Once","stream":true,"max_tokens":3,"ignore_eos":true}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 5 || evs[4].data != "[DONE]" {
		t.Fatalf("events %v: want 3 text chunks, finish, [DONE]", evs)
	}
	var c openai.Chunk
	json.Unmarshal([]byte(evs[0].data), &c)
	if c.Object != "text_completion" || c.Choices[0].Text == "" {
		t.Errorf("completion chunk %q", evs[0].data)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"sim-model","prompt":"Once","max_tokens":5,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var whole openai.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil {
		t.Fatal(err)
	}
	if whole.Usage == nil || whole.Usage.CompletionTokens != 5 || *whole.Choices[0].FinishReason != "length" {
		t.Errorf("non-streaming response %+v: want usage with 5 tokens and finish length", whole)
	}
}

func chatWhole(t *testing.T, url, body string) (int, openai.ChatResponse, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r openai.ChatResponse
	json.Unmarshal(raw, &r)
	return resp.StatusCode, r, string(raw)
}

func TestOutputControls(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, 0))
	msg := `"model":"sim-model","messages":[{"role":"user","content":"hello there"}]`
	tests := []struct {
		name       string
		body       string
		wantTokens int    // -1: any
		wantFinish string // "" : any
	}{
		{"max_tokens forces length with ignore_eos", `{` + msg + `,"max_tokens":33,"ignore_eos":true}`, 33, "length"},
		{"max_completion_tokens wins over max_tokens", `{` + msg + `,"max_tokens":50,"max_completion_tokens":9,"ignore_eos":true}`, 9, "length"},
		{"min_tokens lengthens a natural answer", `{` + msg + `,"min_tokens":400,"max_tokens":500,"temperature":0}`, 400, "stop"},
		{"max_tokens cuts a natural answer", `{` + msg + `,"max_tokens":2,"temperature":0}`, 2, "length"},
		// "The" is the first token of every text answer.
		{"stop string ends the answer before it", `{` + msg + `,"stop":" the","max_tokens":300,"temperature":0,"seed":3}`, -1, "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, r, raw := chatWhole(t, url, tc.body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, raw)
			}
			if tc.wantTokens >= 0 && r.Usage.CompletionTokens != tc.wantTokens {
				t.Errorf("completion_tokens = %d, want %d", r.Usage.CompletionTokens, tc.wantTokens)
			}
			if tc.wantFinish != "" && *r.Choices[0].FinishReason != tc.wantFinish {
				t.Errorf("finish_reason = %s, want %s", *r.Choices[0].FinishReason, tc.wantFinish)
			}
			if strings.Contains(tc.body, `"stop"`) && strings.Contains(r.Choices[0].Message.Content, " the") {
				t.Errorf("content %q contains the stop string", r.Choices[0].Message.Content)
			}
		})
	}
}

func TestDeterminismAndJSONMode(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, 0))
	body := `{"model":"sim-model","messages":[{"role":"user","content":"same prompt"}],"temperature":0}`
	_, a, _ := chatWhole(t, url, body)
	_, b, _ := chatWhole(t, url, body)
	if a.Choices[0].Message.Content != b.Choices[0].Message.Content {
		t.Errorf("temperature 0 gave two answers:\n%q\n%q", a.Choices[0].Message.Content, b.Choices[0].Message.Content)
	}
	hot := `{"model":"sim-model","messages":[{"role":"user","content":"same prompt"}],"temperature":1}`
	_, c, _ := chatWhole(t, url, hot)
	_, d, _ := chatWhole(t, url, hot)
	if c.Choices[0].Message.Content == d.Choices[0].Message.Content {
		t.Errorf("temperature 1 gave the same answer twice: %q", c.Choices[0].Message.Content)
	}
	for i := range 20 {
		_, r, raw := chatWhole(t, url, fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":"json %d"}],"response_format":{"type":"json_object"}}`, i))
		var v map[string]any
		if err := json.Unmarshal([]byte(r.Choices[0].Message.Content), &v); err != nil {
			t.Fatalf("json_object answer is not JSON: %q (%s)", r.Choices[0].Message.Content, raw)
		}
	}
}

func TestCandidateVariantHasQualityTradeoff(t *testing.T) {
	cfg := fixedConfig(0, 0)
	cfg.ApplyVariant("int4")
	cfg.Quality.MalformedJSONRate = 0.5
	url, _ := startSim(t, cfg)
	bad := 0
	for i := range 60 {
		_, r, _ := chatWhole(t, url, fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":"q %d"}],"response_format":{"type":"json_object"},"max_tokens":500}`, i))
		var v map[string]any
		if json.Unmarshal([]byte(r.Choices[0].Message.Content), &v) != nil {
			bad++
		}
	}
	// 60 draws at p=0.5 (less refusals and truncations, which are also
	// invalid): outside [10, 50] has probability far below 1e-6.
	if bad < 10 || bad > 50 {
		t.Errorf("%d of 60 answers invalid, want about half", bad)
	}
}

func TestBadRequests(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, 0))
	msg := `"model":"sim-model","messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name, body string
		status     int
	}{
		{"negative max_tokens", `{` + msg + `,"max_tokens":-1}`, 400},
		{"n above one", `{` + msg + `,"n":2}`, 400},
		{"over the context window", `{` + msg + `,"max_tokens":100000}`, 400},
		{"malformed JSON", `{"model":`, 400},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404},
		{"unsupported field is ignored", `{` + msg + `,"frequency_penalty":0.5,"logit_bias":{}}`, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, raw := chatWhole(t, url, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, raw)
			}
			if code != 200 {
				var e struct {
					Error struct {
						Message string `json:"message"`
						Type    string `json:"type"`
						Code    int    `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Error.Message == "" || e.Error.Code != code {
					t.Errorf("error body %s is not vLLM-style", raw)
				}
			}
		})
	}
}

func TestFixedModeTiming(t *testing.T) {
	url, _ := startSim(t, fixedConfig(40*time.Millisecond, 10*time.Millisecond))
	start := time.Now()
	_, evs, err := streamRequest(t, url, "/v1/chat/completions", chatBody(`,"max_tokens":10,"ignore_eos":true`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ttft := evs[1].at.Sub(start)
	if ttft < 40*time.Millisecond || ttft > 60*time.Millisecond {
		t.Errorf("TTFT %v, want 40ms (+ scheduling noise)", ttft)
	}
	gap := evs[10].at.Sub(evs[1].at) / 9
	if gap < 9*time.Millisecond || gap > 12*time.Millisecond {
		t.Errorf("mean ITL %v, want 10ms", gap)
	}
}

// With RoleFirst, the role chunk leaves as the stream starts, the first
// token still after TTFT: what a public gateway board's mock backend
// sends, so a proxy's headers and first chunk are out of the way before
// the first token. Without it, the role chunk leaves with the first token.
func TestRoleFirst(t *testing.T) {
	t.Parallel()
	const ttft = 60 * time.Millisecond
	for _, first := range []bool{true, false} {
		cfg := fixedConfig(ttft, 5*time.Millisecond)
		cfg.RoleFirst = first
		url, _ := startSim(t, cfg)
		start := time.Now()
		_, evs, err := streamRequest(t, url, "/v1/chat/completions", chatBody(`,"max_tokens":3,"ignore_eos":true`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 6 || !strings.Contains(evs[0].data, `"role":"assistant"`) {
			t.Fatalf("role first %v: events %v, want role, 3 tokens, finish, [DONE]", first, evs)
		}
		role, tok := evs[0].at.Sub(start), evs[1].at.Sub(start)
		if tok < ttft {
			t.Errorf("role first %v: first token after %v, before the TTFT of %v", first, tok, ttft)
		}
		if early := role < ttft/2; early != first {
			t.Errorf("role first %v: role chunk after %v, first token after %v", first, role, tok)
		}
	}
}

func TestFaults(t *testing.T) {
	url, _ := startSim(t, fixedConfig(0, time.Millisecond))
	body := chatBody(`,"max_tokens":20,"ignore_eos":true`)
	t.Run("error with retry-after", func(t *testing.T) {
		resp, _, _ := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: "error=429;retry_after=2s"})
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
			t.Errorf("status %d Retry-After %q, want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})
	t.Run("reset after k tokens", func(t *testing.T) {
		_, evs, err := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: "reset_after=5"})
		if err == nil {
			t.Errorf("stream ended cleanly after a reset")
		}
		if len(evs) != 6 { // role + 5 tokens
			t.Errorf("got %d events before the reset, want 6", len(evs))
		}
	})
	t.Run("stall after k tokens", func(t *testing.T) {
		_, evs, _ := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: "stall_after=3;stall_for=150ms"})
		// The client stamps arrivals; a late read of the event before the
		// stall shortens the gap it sees by that lateness.
		gap := evs[4].at.Sub(evs[3].at)
		if gap < 140*time.Millisecond {
			t.Errorf("gap after token 3 is %v, want the 150ms stall (less 10ms of client lateness)", gap)
		}
	})
	t.Run("header delay", func(t *testing.T) {
		start := time.Now()
		resp, _, _ := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: "header_delay=100ms"})
		if d := time.Since(start); resp.StatusCode != 200 || d < 100*time.Millisecond {
			t.Errorf("status %d after %v, want 200 after at least 100ms", resp.StatusCode, d)
		}
	})
	t.Run("net delay on every write", func(t *testing.T) {
		start := time.Now()
		_, evs, _ := streamRequest(t, url, "/v1/chat/completions", chatBody(`,"max_tokens":5,"ignore_eos":true`), map[string]string{FaultHeader: "net_delay=20ms;net_jitter=5ms"})
		// 7 writes (role, 5 tokens, the tail) at 15-25ms each
		if d := evs[len(evs)-1].at.Sub(start); d < 7*15*time.Millisecond {
			t.Errorf("stream took %v, want at least 105ms of network delay", d)
		}
	})
	t.Run("bad fault header", func(t *testing.T) {
		resp, _, _ := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: "explode=1"})
		if resp.StatusCode != 400 {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
	// Faults the sim cannot honour are refused, and refusing them leaves
	// the server up (negative jitter once panicked in rand.Int64N).
	for _, h := range []string{"net_delay=-2ns;net_jitter=-3ns", "stall_after=1;stall_for=-1s", "header_delay=-5ms",
		"error_rate=1.5", "error_rate=NaN", "net_delay=100000h"} {
		t.Run("refused "+h, func(t *testing.T) {
			resp, _, _ := streamRequest(t, url, "/v1/chat/completions", body, map[string]string{FaultHeader: h})
			if resp.StatusCode != 400 {
				t.Errorf("%s: status %d, want 400", h, resp.StatusCode)
			}
			if resp, _, err := streamRequest(t, url, "/v1/chat/completions", body, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("after %s the sim does not answer: %v", h, err)
			}
		})
	}
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.Metric {
			switch {
			case m.Gauge != nil:
				out[name] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Histogram != nil:
				out[name+"_count"] = float64(m.Histogram.GetSampleCount())
			}
			for _, l := range m.Label {
				if l.GetName() == "model_name" && l.GetValue() != "sim-model" {
					t.Errorf("%s has model_name %q", name, l.GetValue())
				}
			}
		}
	}
	return out
}

func TestMetricsMoveWithLoad(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.MaxNumSeqs = 2
	url, _ := startSim(t, cfg)
	before := scrape(t, url)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
		"vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
		"vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count", "DCGM_FI_DEV_GPU_UTIL"} {
		if _, ok := before[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	done := make(chan struct{})
	for range 6 {
		go func() {
			defer func() { done <- struct{}{} }()
			streamRequest(t, url, "/v1/chat/completions", chatBody(`,"max_tokens":40,"ignore_eos":true`), nil)
		}()
	}
	time.Sleep(150 * time.Millisecond)
	mid := scrape(t, url)
	if mid["vllm:num_requests_running"] != 2 || mid["vllm:num_requests_waiting"] != 4 {
		t.Errorf("under load running=%v waiting=%v, want 2 and 4", mid["vllm:num_requests_running"], mid["vllm:num_requests_waiting"])
	}
	if mid["vllm:kv_cache_usage_perc"] <= 0 || mid["DCGM_FI_DEV_GPU_UTIL"] <= 0 {
		t.Errorf("under load kv usage %v util %v, want both above 0", mid["vllm:kv_cache_usage_perc"], mid["DCGM_FI_DEV_GPU_UTIL"])
	}
	for range 6 {
		<-done
	}
	after := scrape(t, url)
	if got := after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]; got != 240 {
		t.Errorf("generation tokens rose by %v, want 240", got)
	}
	if got := after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"]; got != 6 {
		t.Errorf("e2e count rose by %v, want 6", got)
	}
	if after["vllm:num_requests_running"] != 0 {
		t.Errorf("running = %v after all requests ended", after["vllm:num_requests_running"])
	}
}

// Asked for (TimingHeader), the stream's last event carries the time the
// simulator itself took to its first token: 30 ms here, not the whole
// answer's 30 + 2 × 40 ms. The bound between them is wide, so that a
// late wake-up on a busy machine (a few ms) is not taken for the wrong
// figure; the simulator's precision is held by the sim-fidelity figures.
func TestTimingHeaderReportsOwnTTFT(t *testing.T) {
	url, _ := startSim(t, fixedConfig(30*time.Millisecond, 40*time.Millisecond))
	body := `{"model":"sim-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for _, asked := range []bool{false, true} {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
		if asked {
			req.Header.Set(TimingHeader, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		i := strings.Index(string(b), `"sim_timing":{"ttft_us":`)
		if !asked {
			if i >= 0 {
				t.Errorf("sim_timing sent unasked: %s", b)
			}
			continue
		}
		var us int
		if i < 0 {
			t.Fatalf("no sim_timing in %s", b)
		}
		fmt.Sscanf(string(b[i+len(`"sim_timing":{"ttft_us":`):]), "%d", &us)
		if us < 30000 || us >= 70000 {
			t.Errorf("sim_timing ttft %dµs, want 30 ms and more by no more than a late wake-up (the whole answer takes 110 ms)", us)
		}
	}
}

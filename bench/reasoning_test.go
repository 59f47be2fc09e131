package bench

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/sim/simtest"
)

// TestReasoningTTFO: against a sim posing as a reasoning model (10
// tokens of thinking at 5 ms each), bench reports the time to the first
// output token beside TTFT, 50 ms after it, and the reasoning tokens
// apart, on the chat API (both delta names) and the Responses API,
// streamed. Not parallel: it bounds milliseconds.
func TestReasoningTTFO(t *testing.T) {
	for _, tc := range []struct{ api, field string }{{"chat", "reasoning_content"}, {"chat", "reasoning"}, {"responses", "reasoning_content"}} {
		t.Run(tc.api+"/"+tc.field, func(t *testing.T) {
			cfg := simtest.Fixed(20*time.Millisecond, 5*time.Millisecond)
			cfg.Output.ReasoningTokens, cfg.Output.ReasoningField = 10, tc.field
			url := simtest.Start(t, cfg).URL
			c := baseConfig(url)
			c.Workload.Endpoint = tc.api
			c.Load.Requests, c.Load.WarmupRequests = 12, 0
			rec, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			s := rec.Stages[0]
			if s.OK != 12 {
				t.Fatalf("%d of 12 ok: %v %v", s.OK, s.Errors, s.ErrorSamples)
			}
			m := s.Metrics
			if m["ttfo"] == nil || m["reasoning"] == nil || m["reasoning_tokens"] == nil {
				t.Fatalf("no ttfo/reasoning figures: %v", m)
			}
			// The thinking is 10 of the stream's 19 token gaps, 5 ms each
			// at the least. A machine busy with other tests stretches
			// every gap alike (reasoning p50 78.6 ms against a fixed
			// 60 ms bound, the serial test beside collect's sweeps), so
			// the upper bound is 10 gaps of the run's own TPOT.
			tpot := m["tpot"].P50
			if r := m["reasoning"].P50; r < 45 || r < 9*tpot || r > 11*tpot {
				t.Errorf("reasoning p50 %.1f ms, TPOT p50 %.2f ms: want the sim's 10 tokens, at least 10 × 5 ms and 9-11 × TPOT", r, tpot)
			}
			if d := m["ttfo"].P50 - m["ttft"].P50; d < 45 || d < 8*tpot || d > 12*tpot {
				t.Errorf("ttfo p50 %.1f − ttft p50 %.1f, TPOT p50 %.2f ms: want about 10 TPOTs, at least 50 ms", m["ttfo"].P50, m["ttft"].P50, tpot)
			}
			if m["reasoning_tokens"].P50 != 10 || m["output_tokens"].P50 != 20 {
				t.Errorf("reasoning tokens %.0f of %.0f output, want 10 of 20", m["reasoning_tokens"].P50, m["output_tokens"].P50)
			}
		})
	}
}

// The Responses API read whole, and --json on it: they judge no time
// (10.8 of the 16.5 s TestReasoningTTFO took on a loaded run when they
// were part of it), so they run beside other tests.
func TestResponsesWholeAndJSON(t *testing.T) {
	t.Parallel()
	url := simtest.Start(t, simtest.Fixed(0, time.Millisecond)).URL
	c := baseConfig(url)
	c.Workload.Endpoint, c.Workload.Stream = "responses", false
	c.Load.Requests, c.Load.WarmupRequests = 5, 0
	rec, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if s := rec.Stages[0]; s.OK != 5 || s.Metrics["output_tokens"].P50 != 20 || s.Metrics["ttfo"] != nil {
		t.Errorf("whole responses: %d ok, %v, %v", s.OK, s.Errors, s.ErrorSamples)
	}
	// --json on the Responses API asks through text.format and judges the
	// answers: the sim answers JSON when asked.
	c.Workload.JSON, c.Workload.Stream, c.Workload.ForceOutputLength, c.Workload.OutputTokens = true, true, false, "200"
	rec, err = Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if q := rec.Stages[0].Quality; rec.Stages[0].OK != 5 || q.JSONAsked != 5 || q.InvalidJSON != 0 {
		t.Errorf("responses --json: %d ok, quality %+v", rec.Stages[0].OK, q)
	}
}

func TestClientKnowsTheResponsesEndpoint(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]bool{
		"http://127.0.0.1:1/v1/responses": true, "http://127.0.0.1:1/v1/responses/?x=1": true,
		"http://127.0.0.1:1/v1/chat/completions?responses": false, "http://127.0.0.1:1/v1/completions": false,
	} {
		c, err := NewClient(url, ClientOptions{})
		if err != nil || c.responses != want {
			t.Errorf("%s: responses %v (%v), want %v", url, c != nil && c.responses, err, want)
		}
		if c != nil {
			c.Close()
		}
	}
}

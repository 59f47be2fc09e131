package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// llamaResponses is a Responses API as llama.cpp's server answers it
// (tools/server/server-task.cpp): status "completed" whatever stopped the
// answer, usage's output_tokens the tokens decoded, no sequence_number on
// the stream's events. Every other answer is cut at max_output_tokens;
// with clamp set, it says it is a gateway that clamped the limit to that
// many tokens (X-Infergate-Max-Tokens-Clamped) and cuts there.
func llamaResponses(t *testing.T, clamp int) (url string, cut *atomic.Int64) {
	cut = new(atomic.Int64)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream          bool `json:"stream"`
			MaxOutputTokens int  `json:"max_output_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &req) != nil || req.MaxOutputTokens < 4 {
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":{"code":400,"message":"bad request","type":"invalid_request_error"}}`)
			return
		}
		limit := req.MaxOutputTokens
		if clamp > 0 {
			limit = clamp
			w.Header().Set("X-Infergate-Max-Tokens-Clamped", fmt.Sprint(clamp))
		}
		out := limit - 3 // ended by itself
		if n.Add(1)%2 == 0 {
			out = limit
			cut.Add(1)
		}
		text := strings.Repeat("x ", out)
		final := fmt.Sprintf(`{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"message","status":"completed","id":"msg_1","role":"assistant","content":[{"type":"output_text","annotations":[],"text":%q}]}],"usage":{"input_tokens":9,"output_tokens":%d,"total_tokens":%d}}`, text, out, out+9)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, final)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n")
		for range out {
			fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"x \"}\n\n")
		}
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":%s}\n\n", final)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, cut
}

// TestResponsesCutButCompleted: a Responses answer that llama.cpp calls
// completed but whose output tokens reached max_output_tokens counts as
// cut at the output limit, streamed or not; one that ended below it does
// not; at a gateway's clamp it counts as the gateway's.
func TestResponsesCutButCompleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stream bool
		clamp  int
	}{
		{"plain", false, 0},
		{"stream", true, 0},
		{"at a gateway's clamp", true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, cut := llamaResponses(t, tc.clamp)
			c := baseConfig(url)
			c.Workload.Endpoint, c.Workload.Stream, c.Workload.ForceOutputLength, c.Workload.OutputTokens = "responses", tc.stream, false, "16"
			c.Load = LoadSpec{Mode: "closed", Concurrency: 1, Requests: 8}
			rec, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			s := rec.Stages[0]
			q := s.Quality
			if s.OK != 8 || cut.Load() != 4 {
				t.Fatalf("%d ok of 8, %d cut: %v", s.OK, cut.Load(), s.ErrorSamples)
			}
			want, byPolicy := 4, 0
			if tc.clamp > 0 {
				want, byPolicy = 0, 4
			}
			if q.FinishLength != want || q.LengthByPolicy != byPolicy {
				t.Errorf("cut at the limit %d, by the gateway %d; want %d and %d", q.FinishLength, q.LengthByPolicy, want, byPolicy)
			}
		})
	}
}

// TestResponsesOverrideNotInteger: an override of max_output_tokens that
// is no integer (100.0, null, a string) leaves the request's own limit to
// judge truncation by; an integer one is the limit.
func TestResponsesOverrideNotInteger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		override string
		want     int
	}{
		{"100.0", 16}, {"null", 16}, {`"100"`, 16}, {"1e2", 16}, {"100", 100}, {" 32 ", 32},
	} {
		c := &Client{responses: true, overrides: map[string]json.RawMessage{"max_output_tokens": json.RawMessage(tc.override)}}
		r := &Result{}
		r.Ask.MaxOutputTokens = 16
		c.outputCap(r, nil)
		if r.Ask.MaxOutputTokens != tc.want {
			t.Errorf("override %s: judged by %d, want %d", tc.override, r.Ask.MaxOutputTokens, tc.want)
		}
	}
}

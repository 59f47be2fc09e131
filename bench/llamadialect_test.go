package bench

import (
	"context"
	"testing"

	"github.com/infergate/infergate/internal/llamatest"
)

// TestLlamaResponsesCutCounted: llama.cpp says completed of a Responses
// answer max_output_tokens cut (its model here never samples the end of
// sequence, so every answer is cut); bench counts each cut at the output
// limit, streamed or not.
func TestLlamaResponsesCutCounted(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 2})
	for _, stream := range []bool{false, true} {
		c := baseConfig(srv.URL)
		c.Workload.Endpoint, c.Workload.Model, c.Workload.Stream = "responses", "m", stream
		c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.ForceOutputLength = "32", "8", false
		c.Load = LoadSpec{Mode: "closed", Concurrency: 2, Requests: 4}
		rec, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		s := rec.Stages[0]
		if s.OK != 4 || s.Quality.FinishLength != 4 || s.Quality.LengthByPolicy != 0 {
			t.Errorf("stream %v: %d ok, %d cut at the limit, want 4 and 4 (%v)", stream, s.OK, s.Quality.FinishLength, s.ErrorSamples)
		}
	}
}

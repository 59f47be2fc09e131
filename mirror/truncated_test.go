package mirror

import (
	"log/slog"
	"testing"

	"github.com/infergate/infergate/openai"
)

// TestRecorderResponsesCutButCompleted: the judge counts a Responses
// answer whose output tokens reached max_output_tokens as truncated,
// though llama.cpp says completed (Finish "stop"); the cap of a copy is
// its own body's when the rule sets one; a cut at a limit the gateway's
// policy set is the policy's on the copy too, unless the rule set its own.
func TestRecorderResponsesCutButCompleted(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","input":"hi","max_output_tokens":16}`)
	for _, tc := range []struct {
		name                 string
		rule                 Rule
		primaryOut, candOut  int
		clamped              bool
		primaryCut, candCut  bool
		primaryByPol, candBy bool
	}{
		{"both cut", Rule{Name: "r", MaxInFlight: 1}, 16, 16, false, true, true, false, false},
		{"the candidate ended below the cap", Rule{Name: "r", MaxInFlight: 1}, 16, 12, false, true, false, false, false},
		// The copy asks 32: its 16 is not a cut.
		{"the rule raises the copy's cap", Rule{Name: "r", MaxInFlight: 1, Overrides: Overrides{Fields: map[string]any{"max_output_tokens": 32}}}, 16, 16, false, true, false, false, false},
		{"the policy's clamp, carried by the copy", Rule{Name: "r", MaxInFlight: 1}, 16, 16, true, true, true, true, true},
		{"the policy's clamp, the rule's own cap", Rule{Name: "r", MaxInFlight: 1, Overrides: Overrides{Fields: map[string]any{"max_output_tokens": 16}}}, 16, 16, true, true, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewRecorder(Record{Recent: 10}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			f := r.Start(Live(tc.rule), Meta{ID: "x", Model: "m", Path: openai.ResponsesPath})
			f.Body = body
			arm := func(a *Answer, out int, byPolicy bool) {
				a.Status, a.Finish, a.OutputTokens, a.ByPolicy, a.Text = 200, "stop", out, byPolicy, []byte("some text")
			}
			arm(&f.Primary, tc.primaryOut, tc.clamped)
			arm(&f.Candidate, tc.candOut, false)
			f.Done()
			f.Done()
			ps := r.Stats().Pairs
			if len(ps) != 1 {
				t.Fatalf("%d pairs", len(ps))
			}
			p, c := ps[0].Primary, ps[0].Candidate
			if p.Truncated != tc.primaryCut || c.Truncated != tc.candCut || p.LengthByPolicy != tc.primaryByPol || c.LengthByPolicy != tc.candBy {
				t.Errorf("primary truncated %v by policy %v, candidate %v %v; want %v %v, %v %v",
					p.Truncated, p.LengthByPolicy, c.Truncated, c.LengthByPolicy, tc.primaryCut, tc.primaryByPol, tc.candCut, tc.candBy)
			}
		})
	}
}

package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/tokens"
)

// replayEntry is one line of a request log that --replay reads: the
// gateway's request log (one JSON object per request). Only time is
// required; body is the original request when the log kept it, else a
// prompt of input_tokens is made and output_tokens becomes max_tokens.
type replayEntry struct {
	Time time.Time `json:"time"`
	// Path, when present, must be a completion endpoint; other requests
	// of the log (GET /v1/models, say) are skipped.
	Path         string          `json:"path,omitempty"`
	Model        string          `json:"model,omitempty"`
	InputTokens  int             `json:"input_tokens,omitempty"`
	OutputTokens int             `json:"output_tokens,omitempty"`
	Body         json.RawMessage `json:"body,omitempty"`
}

// loadReplay reads a request log; each entry is sent at its original
// offset from the first, divided by Speedup.
func loadReplay(s *WorkloadSpec, out lengths, tok *tokens.Tokenizer) (Workload, error) {
	raw, sum, err := hashFile(s.Replay)
	if err != nil {
		return nil, err
	}
	s.ReplaySHA256 = sum
	if s.Speedup <= 0 {
		s.Speedup = 1
	}
	items, err := lines(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: replay %s: %w", s.Replay, err)
	}
	w := &fixedSet{replay: true}
	syn := &synthetic{spec: s, words: tok.Words()}
	rng := rand.New(rand.NewPCG(s.Seed, 2))
	// A request log is written as requests end, so its times (when each
	// arrived) are not in order: sort them, keeping the file's order for
	// equal times.
	type entry struct {
		n int
		e replayEntry
	}
	var es []entry
	for n, it := range items {
		var e replayEntry
		if err := json.Unmarshal(it, &e); err != nil || e.Time.IsZero() {
			return nil, fmt.Errorf("bench: replay %s entry %d: want an object with a time", s.Replay, n+1)
		}
		if e.Path != "" && !strings.HasSuffix(e.Path, "/completions") && !strings.HasSuffix(e.Path, "/responses") {
			continue
		}
		es = append(es, entry{n, e})
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.e.Time.Compare(b.e.Time) })
	for _, x := range es {
		n, e := x.n, x.e
		at := time.Duration(float64(e.Time.Sub(es[0].e.Time)) / s.Speedup)
		var r Request
		if len(e.Body) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(e.Body, &obj); err != nil {
				return nil, fmt.Errorf("bench: replay %s entry %d: body is not an object", s.Replay, n+1)
			}
			if r, _, err = s.openAIRequest(obj, out, rng); err != nil {
				return nil, fmt.Errorf("bench: replay %s entry %d: %w", s.Replay, n+1, err)
			}
		} else {
			in := max(e.InputTokens, 1)
			maxTokens := e.OutputTokens
			if !out.zero() {
				maxTokens = out.Sample(rng)
			}
			name := s.Model
			if name == "" {
				name = e.Model
			}
			model, _ := json.Marshal(name)
			r = Request{InputTokens: in, MaxTokens: maxTokens}
			r.Body = s.appendBody(nil, model, syn.prompt(rand.New(rand.NewPCG(s.Seed, uint64(n))), in), maxTokens)
		}
		r.At = at
		w.reqs = append(w.reqs, r)
	}
	if len(w.reqs) == 0 {
		return nil, fmt.Errorf("bench: replay %s is empty", s.Replay)
	}
	return w, nil
}

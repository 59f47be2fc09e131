package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/sim/simtest"
)

// TestSessions: 4 users, 3 turns each: every turn sends the conversation
// so far (the model's own answers in it), so the prompt grows turn by
// turn by the last turn's question and answer; with prefix caching the
// later turns find most of their context cached; figures by turn.
func TestSessions(t *testing.T) {
	cfg := simtest.Fixed(10*time.Millisecond, time.Millisecond)
	s := simtest.Start(t, cfg)
	c := baseConfig(s.URL)
	c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns = "40", "30", 3
	c.Load = LoadSpec{Mode: "sessions", Concurrency: 4, ThinkTime: 20 * time.Millisecond}
	var csv strings.Builder
	c.CSV = &csv
	start := time.Now()
	rec, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Stages[0]
	if st.Requests != 12 || st.OK != 12 || len(st.Turns) != 3 {
		t.Fatalf("%d requests, %d ok, turns %+v (%v)", st.Requests, st.OK, st.Turns, st.Errors)
	}
	for i, tu := range st.Turns {
		if tu.Turn != i+1 || tu.N != 4 || tu.TTFTP50 < 9 {
			t.Errorf("turn %+v", tu)
		}
		if i > 0 {
			// The context grows by the last question (40), the last
			// answer (30) and the messages' framing.
			grow := tu.PromptTokensP50 - st.Turns[i-1].PromptTokensP50
			if grow < 70 || grow > 90 {
				t.Errorf("turn %d's prompt %.0f tokens, %.0f more than turn %d's; want about 70 more", tu.Turn, tu.PromptTokensP50, grow, i)
			}
		}
	}
	// Three turns each, two think times between: no session is quicker.
	if d := time.Since(start); d < 2*20*time.Millisecond+3*40*time.Millisecond {
		t.Errorf("the run took %v: the think time was not kept", d)
	}
	var buf strings.Builder
	rec.WriteText(&buf)
	if !strings.Contains(buf.String(), "by turn") {
		t.Errorf("report has no per-turn table:\n%s", buf.String())
	}
	var page strings.Builder
	if err := rec.WriteHTML(&page); err != nil || !strings.Contains(page.String(), "Stage 0 by turn") || !strings.Contains(page.String(), "sessions, 4 users in session at once") {
		t.Errorf("the HTML page has no per-turn table (%v)", err)
	}
}

// TestShareGPTSessions: a ShareGPT dataset's conversations are replayed
// as sessions: each human turn in order, the last turn carrying every
// earlier one.
func TestShareGPTSessions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sharegpt.json")
	convs := []map[string]any{
		{"id": "a", "conversations": []map[string]string{{"from": "human", "value": "What is a KV cache?"}, {"from": "gpt", "value": "A store of attention keys and values."},
			{"from": "human", "value": "Why does it fill up?"}, {"from": "gpt", "value": "Long contexts."}, {"from": "human", "value": "And then?"}, {"from": "gpt", "value": "Preemption."}}},
		{"id": "b", "conversations": []map[string]string{{"from": "human", "value": "Hello."}, {"from": "gpt", "value": "Hi there, how can I help?"}}},
	}
	b, _ := json.Marshal(convs)
	os.WriteFile(path, b, 0o600)
	s := simtest.Start(t, simtest.Fixed(time.Millisecond, 200*time.Microsecond))
	c := baseConfig(s.URL)
	c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Dataset = "", "", path
	c.Load = LoadSpec{Mode: "sessions", Concurrency: 1}
	rec, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Stages[0]
	if st.OK != 4 || len(st.Turns) != 3 || st.Turns[0].N != 2 || st.Turns[2].N != 1 || st.Turns[2].PromptTokensP50 <= st.Turns[0].PromptTokensP50 {
		t.Errorf("%d ok, turns %+v", st.OK, st.Turns)
	}
}

// --ramp-up spreads a session run's first sessions: 4 users over 400 ms
// start 100 ms apart, so their first turns span 300 ms. And a stage of N
// requests holds N/T whole sessions: the first user, done before the
// last has sent its last turn, opens no fifth session (which would take
// that turn's place).
func TestSessionsRampUp(t *testing.T) {
	s := simtest.Start(t, simtest.Fixed(250*time.Millisecond, 100*time.Microsecond))
	c := baseConfig(s.URL)
	c.Tokenizer = sharedTokenizer()
	c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns = "10", "4", 2
	c.Load = LoadSpec{Mode: "sessions", Concurrency: 4, RampUp: 400 * time.Millisecond}
	var mu sync.Mutex
	var first []time.Time
	c.OnResult = func(r *Result) {
		if r.Turn == 1 {
			mu.Lock()
			first = append(first, r.Intended)
			mu.Unlock()
		}
	}
	if _, err := Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(first, func(a, b time.Time) int { return a.Compare(b) })
	if len(first) != 4 {
		t.Fatalf("%d first turns, want 4: one session per user", len(first))
	}
	if span := first[3].Sub(first[0]); span < 280*time.Millisecond || span > 600*time.Millisecond {
		t.Errorf("the first turns span %v, want about 300 ms", span)
	}
}

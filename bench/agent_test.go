package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// An agent's sessions: --prefix-groups gives each session its group's
// system prompt on every turn, --tools the same tool list on every
// request, and the history grows turn by turn.
func TestAgentSessionShape(t *testing.T) {
	t.Parallel()
	front, requests := keyFront(t, "")
	c := baseConfig(front)
	c.Tokenizer = sharedTokenizer()
	c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns = "20", "5", 3
	c.Workload.PrefixGroups, c.Workload.PrefixTokens, c.Workload.Tools = 1, 300, 4
	c.Load = LoadSpec{Mode: "sessions", Concurrency: 3}
	rec, err := Run(context.Background(), c)
	if err != nil || rec.Stages[0].OK != 9 {
		t.Fatalf("%v %+v", err, rec.Stages[0].ErrorSamples)
	}
	rs := requests()
	system := rs[0].system
	if n := len(strings.Fields(system)); n < 250 {
		t.Errorf("the system prompt has %d words, want about 300 one-token words", n)
	}
	for _, r := range rs {
		// The system message, then 2k-1 of the conversation.
		if r.system != system || r.tools != 4 || r.messages%2 != 0 {
			t.Errorf("a request with %d messages, %d tools, system prompt %.40q: want the one shared prompt, 4 tools", r.messages, r.tools, r.system)
		}
	}
	if w := rec.Conditions.Workload; w.Tools != 4 || w.PrefixGroups != 1 {
		t.Errorf("the record's workload %+v", w)
	}
}

// The figures by turn against the simulator's prefix cache (the default
// preset: vLLM's automatic prefix caching, 131,072 tokens, far more than
// this run needs): each session has a system prompt of its own, so turn
// 1 finds nothing cached, and every later turn finds its whole history
// but the last question and answer; so the follow-up turns' cached share
// is high and their TTFT lower than turn 1's. The pooled "2+" figures
// are the follow-up turns' own, recomputed here from every result.
func TestTurnFiguresAgainstPrefixCache(t *testing.T) {
	t.Parallel()
	cfg := sim.DefaultConfig()
	s := simtest.Start(t, cfg)
	c := baseConfig(s.URL)
	c.Tokenizer = sharedTokenizer()
	c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns = "40", "10", 4
	c.Workload.PrefixGroups, c.Workload.PrefixTokens = 4, 800
	c.Load = LoadSpec{Mode: "sessions", Concurrency: 4}
	var mu sync.Mutex
	var prompt, cached, n int
	c.OnResult = func(r *Result) {
		if r.Turn < 2 || !r.OK() {
			return
		}
		mu.Lock()
		prompt, cached, n = prompt+r.PromptTokens, cached+min(r.CachedTokens, r.PromptTokens), n+1
		mu.Unlock()
	}
	rec, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Stages[0]
	if st.OK != 16 || len(st.Turns) != 4 || st.FollowUps == nil {
		t.Fatalf("%d ok, turns %+v, follow-ups %+v (%v)", st.OK, st.Turns, st.FollowUps, st.ErrorSamples)
	}
	first, follow := st.Turns[0], *st.FollowUps
	if first.CachedShare == nil || *first.CachedShare > 0.05 {
		t.Errorf("turn 1 cached share %v: its system prompt is its own, nothing should be cached", ptr(first.CachedShare))
	}
	if follow.CachedShare == nil || *follow.CachedShare < 0.85 {
		t.Errorf("follow-up turns' cached share %v: want ≥ 0.85 (all but the last exchange)", ptr(follow.CachedShare))
	}
	if want := float64(cached) / float64(prompt); follow.N != n || math.Abs(ptr(follow.CachedShare)-want) > 1e-9 {
		t.Errorf("follow-ups: n %d, cached share %v; the results say n %d, %v", follow.N, ptr(follow.CachedShare), n, want)
	}
	sumN := 0
	for _, tu := range st.Turns[1:] {
		sumN += tu.N
	}
	if follow.Turn != 0 || follow.N != sumN {
		t.Errorf("follow-ups turn %d n %d, want 0 and %d (turns 2-4's)", follow.Turn, follow.N, sumN)
	}
	// 850 uncached tokens at 10,000 tokens/s against some 60: turn 1
	// waits for its prefill, the follow-ups hardly.
	if first.TTFTP50 < 2*follow.TTFTP50 || follow.TTFTP90 == nil {
		t.Errorf("TTFT p50 turn 1 %.1f ms, follow-ups %.1f ms: want turn 1's at least twice", first.TTFTP50, follow.TTFTP50)
	}
	var text, page strings.Builder
	rec.WriteText(&text)
	if !strings.Contains(text.String(), "\n2+ ") {
		t.Errorf("the text report has no 2+ row:\n%s", text.String())
	}
	if err := rec.WriteHTML(&page); err != nil || !strings.Contains(page.String(), "<td>2&#43;</td>") || !strings.Contains(page.String(), "turns 2 and later pooled") {
		t.Errorf("the page has no 2+ row (%v)", err)
	}
}

// The same sessions on a simulator whose cache holds about one session's
// context at a time, as the memory-bound preset's (8,192 tokens): the
// follow-up turns find their history evicted by the other sessions' turns,
// and the pooled figure says so.
func TestTurnFiguresWhenTheCacheIsSmall(t *testing.T) {
	t.Parallel()
	// The two runs go at once, each on its own simulator: what is judged
	// is the share of the prompt the cache held, not a time.
	preset, _ := sim.Preset("memory-bound")
	kvs := []int{sim.DefaultConfig().Engine.KVCacheTokens, preset.Engine.KVCacheTokens}
	cfgs := make([]Config, len(kvs))
	for i, kv := range kvs {
		cfg := sim.DefaultConfig()
		cfg.Engine.KVCacheTokens = kv
		c := baseConfig(simtest.Start(t, cfg).URL)
		c.Tokenizer = sharedTokenizer()
		c.Workload.InputTokens, c.Workload.OutputTokens, c.Workload.Turns = "40", "10", 4
		c.Workload.PrefixGroups, c.Workload.PrefixTokens = 8, 1500
		c.Load = LoadSpec{Mode: "sessions", Concurrency: 8}
		cfgs[i] = c
	}
	recs, errs := make([]*Record, len(cfgs)), make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { recs[i], errs[i] = Run(context.Background(), cfgs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, rec := range recs {
		if st := rec.Stages[0]; st.OK != 32 || st.FollowUps == nil || st.FollowUps.CachedShare == nil {
			t.Fatalf("kv %d: %d ok, follow-ups %+v (%v)", kvs[i], st.OK, st.FollowUps, st.ErrorSamples)
		}
		t.Logf("kv %d: follow-ups cached %.3f, TTFT p50 %.1f ms", kvs[i], *rec.Stages[0].FollowUps.CachedShare, rec.Stages[0].FollowUps.TTFTP50)
	}
	big, small := recs[0].Stages[0].FollowUps, recs[1].Stages[0].FollowUps
	if *big.CachedShare < 0.85 || *small.CachedShare > *big.CachedShare-0.2 {
		t.Errorf("follow-ups cached %.3f with room for every session, %.3f in %d tokens: want the small cache's at least 0.2 lower",
			*big.CachedShare, *small.CachedShare, preset.Engine.KVCacheTokens)
	}
}

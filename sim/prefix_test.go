package sim

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// words returns n one-token words starting at the vocabulary's word from.
func words(t *testing.T, from, n int) string {
	t.Helper()
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	w := tok.Words()
	var sb strings.Builder
	for i := range n {
		sb.WriteString(w[(from+i)%len(w)])
	}
	return sb.String()
}

func prefixBody(system, question string) string {
	b, _ := json.Marshal(map[string]any{"model": "sim-model", "max_tokens": 4, "messages": []map[string]string{
		{"role": "system", "content": system}, {"role": "user", "content": question}}})
	return string(b)
}

// A prompt that shares its first tokens with an earlier one finds them
// cached, in whole blocks, and the counters say so in tokens.
func TestPrefixCacheHitsCountWhatWasSent(t *testing.T) {
	url, _ := startSim(t, DefaultConfig())
	system := words(t, 0, 100)
	_, first, raw := chatWhole(t, url, prefixBody(system, words(t, 500, 20)))
	if first.Usage == nil || first.Usage.PromptTokens != 3+4+100+4+20 {
		t.Fatalf("first answer's usage: %s", raw)
	}
	if !strings.Contains(raw, `"prompt_tokens_details":{"cached_tokens":0}`) {
		t.Fatalf("the first prompt found something cached, or the field is missing: %s", raw)
	}
	_, second, raw := chatWhole(t, url, prefixBody(system, words(t, 900, 30)))
	// Shared: the system message's framing and text, and the user
	// message's framing: 108 tokens, 6 whole blocks of 16.
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != 96 {
		t.Fatalf("cached_tokens %d, want 96: %s", got, raw)
	}
	m := scrape(t, url)
	queries := float64(first.Usage.PromptTokens + second.Usage.PromptTokens)
	if m["vllm:prefix_cache_queries_total"] != queries || m["vllm:prefix_cache_hits_total"] != 96 {
		t.Fatalf("queries %v hits %v, want %v and 96", m["vllm:prefix_cache_queries_total"], m["vllm:prefix_cache_hits_total"], queries)
	}
}

// The cached part is not prefilled again: a long shared prefix makes the
// second request's first token come far sooner.
func TestPrefixCacheSkipsPrefill(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.PrefillTokensPerS = 20000
	url, _ := startSim(t, cfg)
	system := words(t, 0, 4000) // 200 ms of prefill
	ttft := func(q string) time.Duration {
		start := time.Now()
		_, evs, err := streamRequest(t, url, "/v1/chat/completions", strings.Replace(prefixBody(system, q), `"max_tokens":4`, `"max_tokens":4,"stream":true`, 1), nil)
		if err != nil || len(evs) == 0 {
			t.Fatalf("stream: %v", err)
		}
		return evs[0].at.Sub(start)
	}
	cold := ttft(words(t, 100, 20))
	warm := ttft(words(t, 300, 20))
	if cold < 150*time.Millisecond || warm > cold/3 {
		t.Fatalf("cold TTFT %v, warm %v: want the warm one under a third of the cold", cold, warm)
	}
}

// Off, nothing is cached and the usage does not claim otherwise.
func TestPrefixCachingOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.PrefixCaching = false
	url, _ := startSim(t, cfg)
	system := words(t, 0, 100)
	chatWhole(t, url, prefixBody(system, "a"))
	_, _, raw := chatWhole(t, url, prefixBody(system, "b"))
	if strings.Contains(raw, "cached_tokens") {
		t.Fatalf("prefix caching off, yet: %s", raw)
	}
	if m := scrape(t, url); m["vllm:prefix_cache_hits_total"] != 0 {
		t.Fatalf("hits %v with caching off", m["vllm:prefix_cache_hits_total"])
	}
}

// Cached blocks live inside the KV budget: a sequence that needs their
// memory evicts them rather than waiting or preempting anyone, and the
// usage gauge counts unused cached blocks as free, as vLLM's does.
func TestPrefixCacheYieldsToRunningSequences(t *testing.T) {
	cfg := EngineConfig{MaxNumSeqs: 8, KVCacheTokens: 64 * 16, BlockSize: 16, PrefillTokensPerS: 1e6,
		DecodeBaseMs: 1, SaturationBatch: 8, PrefixCaching: true}
	m := newMetrics("sim-model", cfg)
	e := newEngine(cfg, 1, m)
	e.start()
	defer e.close()
	run := func(prompt, target int, salt uint64) *seq {
		s := newSeq(prompt, target)
		for i := range prompt / 16 {
			s.hashes = append(s.hashes, salt<<32|uint64(i))
		}
		if !e.add(s) {
			t.Fatal("engine stopped")
		}
		src := &engineSource{s: s}
		for n, ok := 0, true; ok && n < target; {
			n, ok = src.wait(n)
		}
		return s
	}
	run(40*16, 2, 1) // leaves 40 cached blocks
	time.Sleep(20 * time.Millisecond)
	if got := testutil.ToFloat64(m.kvUsage); got != 0 {
		t.Fatalf("KV usage %v with only unused cached blocks, want 0", got)
	}
	// 60 blocks, with 24 free: 36 cached ones must go.
	done := make(chan *seq)
	go func() { done <- run(59*16, 8, 2) }()
	select {
	case s := <-done:
		if s.cached.Load() != 0 {
			t.Fatalf("a different prompt found %d tokens cached", s.cached.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a sequence that fits the cache only after eviction never ran")
	}
	if p := testutil.ToFloat64(m.preemptions); p != 0 {
		t.Fatalf("%v preemptions: cached blocks should have been evicted instead", p)
	}
	// The evicted blocks were the first prompt's last ones: its start is
	// still cached.
	s := run(40*16, 2, 1)
	if got := s.cached.Load(); got <= 0 || got >= 40*16 {
		t.Fatalf("the first prompt again found %d tokens cached, want part of it", got)
	}
}

// A chat request's tools array is part of its prompt, at its start, as
// a chat template renders it: its tokens count in usage, and two
// requests with the same tools and different questions share them in
// the cache; other tools share at most the JSON's opening.
func TestPrefixCacheHoldsTools(t *testing.T) {
	url, _ := startSim(t, DefaultConfig())
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	tools := func(desc string) json.RawMessage {
		b, _ := json.Marshal([]map[string]any{{"type": "function", "function": map[string]any{"name": "look_up", "description": desc,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]string{"type": "string"}}}}}})
		return b
	}
	body := func(tl json.RawMessage, question string) string {
		b, _ := json.Marshal(map[string]any{"model": "sim-model", "max_tokens": 4, "tools": tl,
			"messages": []map[string]string{{"role": "user", "content": question}}})
		return string(b)
	}
	a, b := tools(words(t, 0, 200)), tools(words(t, 300, 200))
	_, first, raw := chatWhole(t, url, body(a, words(t, 600, 20)))
	if want := 3 + 4 + tok.Count(string(a)) + 4 + 20; first.Usage == nil || first.Usage.PromptTokens != want {
		t.Fatalf("usage %s: want %d prompt tokens (the tools' JSON counted)", raw, want)
	}
	_, second, raw := chatWhole(t, url, body(a, words(t, 900, 20)))
	if got, least := second.Usage.PromptTokensDetails.CachedTokens, tok.Count(string(a))-16; got < least {
		t.Errorf("the same tools, another question: %d tokens cached, want at least %d: %s", got, least, raw)
	}
	_, third, raw := chatWhole(t, url, body(b, words(t, 600, 20)))
	// At most the JSON's opening block, before the descriptions differ.
	if got := third.Usage.PromptTokensDetails.CachedTokens; got > 16 {
		t.Errorf("other tools: %d tokens cached, want at most one block (the tools come first): %s", got, raw)
	}
}

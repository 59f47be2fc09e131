package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// Agent-like conversations (a shared system prompt, a history that grows
// turn by turn, each naming itself by prompt_cache_key) through two
// gateway replicas that never talk, taking turns as a round-robin front
// would, in front of four simulated engines with prefix caching: the
// follow-up turns find their history cached on the backend, as the
// engines themselves report it (usage.prompt_tokens_details), and the
// conversations spread over the fleet.
func TestSessionsKeepConversationsCachedAcrossReplicas(t *testing.T) {
	t.Parallel()
	var urls []string
	for range 4 {
		cfg := sim.DefaultConfig()
		cfg.Model = "m"
		cfg.Engine.KVCacheTokens = 16384
		urls = append(urls, simtest.Start(t, cfg).URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	cfg.Pools["p"] = pc
	replicas := []*testGateway{startGateway(t, cfg), startGateway(t, cfg)}
	system := strings.Repeat("You are the coding agent of this repository; call the tools below to read and change files. ", 24)
	var prompt, cached int
	n := 0
	for conv := range 16 {
		msgs := []map[string]string{{"role": "system", "content": system}}
		for turn := range 6 {
			msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("conversation %d, turn %d: %s", conv, turn, strings.Repeat("more context. ", 20))})
			body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 4, "prompt_cache_key": fmt.Sprintf("agent-session-%d", conv)})
			gw := replicas[n%2]
			n++
			code, _, resp := post(t, gw.URL, "/v1/chat/completions", string(body))
			if code != 200 {
				t.Fatalf("conversation %d turn %d: status %d: %s", conv, turn, code, resp)
			}
			var r openai.ChatResponse
			if err := json.Unmarshal([]byte(resp), &r); err != nil || r.Usage == nil || len(r.Choices) == 0 {
				t.Fatalf("answer %s: %v", resp, err)
			}
			if turn > 0 {
				prompt += r.Usage.PromptTokens
				c, _ := r.Usage.Cached()
				cached += c
			}
			msgs = append(msgs, map[string]string{"role": "assistant", "content": r.Choices[0].Message.Content})
		}
	}
	share := float64(cached) / float64(prompt)
	t.Logf("follow-up turns through two replicas: %d of %d prompt tokens cached (%.3f)", cached, prompt, share)
	if share < 0.85 {
		t.Fatalf("follow-up turns found %.3f of their prompt cached, want at least 0.85", share)
	}
	// The conversations share their system prompt, yet spread over the
	// fleet (the index alone sends them all to the prompt's home), and
	// the replicas, which never talked, sent each turn of a conversation
	// to the same backend: the same count to each.
	used := 0
	a, b := backendStates(replicas[0]), backendStates(replicas[1])
	for _, u := range urls {
		na, nb := sum(a[u].Routes), sum(b[u].Routes)
		if na != nb {
			t.Errorf("backend %s: %d requests from one replica, %d from the other (routes %v and %v)", u, na, nb, a[u].Routes, b[u].Routes)
		}
		if na > 0 {
			used++
		}
	}
	if used < 3 {
		t.Errorf("16 conversations went to %d backends of 4", used)
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

package kvevents_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity/kvevents"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// engine starts a simulator whose prefix cache holds kvTokens tokens in
// blocks of 16 and publishes its KV events (with a replay socket) on
// kernel-picked ports.
func engine(t *testing.T, kvTokens int) *simtest.Server {
	t.Helper()
	var cfg sim.Config
	cfg.Defaults()
	cfg.Engine.KVCacheTokens = kvTokens
	cfg.Engine.BlockSize = 16
	cfg.Engine.PrefixCaching = true
	cfg.Engine.PrefillTokensPerS = 1e7
	cfg.Engine.DecodeBaseMs = 0.1
	cfg.KVEvents = sim.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0"}
	s := simtest.Start(t, cfg)
	if s.Sim.KVEventsAddr() == "" || s.Sim.KVReplayAddr() == "" {
		t.Fatal("the simulator exposes no KV-event addresses")
	}
	return s
}

// text is a prompt of n distinct words that start with tag.
func text(tag string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

func post(t *testing.T, url string, body any, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// complete sends prompt to s and waits for its one-token answer.
func complete(t *testing.T, s *simtest.Server, prompt string) {
	t.Helper()
	post(t, s.URL+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1}, nil)
}

// blocks is the prompt as the index names it, tokenised by s's /tokenize
// as the gateway does.
func blocks(t *testing.T, s *simtest.Server, prompt string) kvevents.Prompt {
	t.Helper()
	var tok struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	post(t, s.URL+"/tokenize", map[string]any{"model": "sim-model", "prompt": prompt}, &tok)
	if len(tok.Tokens) != tok.Count {
		t.Fatalf("/tokenize: %d ids for %d tokens", len(tok.Tokens), tok.Count)
	}
	return kvevents.NewPrompt(tok.Tokens, 16)
}

// eventually polls cond every 10 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not within 5s: %s", what)
}

func subscribe(t *testing.T, idx *kvevents.Index, name string, s *simtest.Server, replay bool) *kvevents.Subscriber {
	t.Helper()
	sub := kvevents.NewSubscriber(idx, kvevents.Config{BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, slog.New(slog.DiscardHandler))
	t.Cleanup(sub.Close)
	src := kvevents.Source{Backend: name, Endpoint: s.Sim.KVEventsAddr()}
	if replay {
		src.Replay = s.Sim.KVReplayAddr()
	}
	if err := sub.Add(src); err != nil {
		t.Fatal(err)
	}
	return sub
}

// warm sends throwaway prompts until the subscriber hears s (a ZMQ
// subscriber misses what is published before its subscription lands).
func warm(t *testing.T, sub *kvevents.Subscriber, name string, s *simtest.Server) {
	t.Helper()
	for i := range 200 {
		complete(t, s, text(fmt.Sprintf("warm%d-", i), 40))
		if st, _ := sub.Stats(name); st.Batches > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no KV event reached the subscriber")
}

// best is the backend the exact index sends p to: the longest run of
// held blocks; -1 when no backend holds any.
func best(idx *kvevents.Index, names []string, p *kvevents.Prompt) (int, []int) {
	b, m := -1, 0
	runs := make([]int, len(names))
	for i, n := range names {
		runs[i], _ = idx.Match(n, p)
		if runs[i] > m {
			b, m = i, runs[i]
		}
	}
	return b, runs
}

// After a backend evicts a prompt's blocks, the index no longer counts
// them: the next request for that prefix goes to the backend that still
// holds it, although both served it.
func TestEvictedBlocksAreNotCounted(t *testing.T) {
	t.Parallel()
	small, big := engine(t, 512), engine(t, 8192) // 32 blocks against 512
	idx := kvevents.NewIndex(0)
	names := []string{"small", "big"}
	subs := []*kvevents.Subscriber{subscribe(t, idx, "small", small, true), subscribe(t, idx, "big", big, true)}
	for i, s := range []*simtest.Server{small, big} {
		warm(t, subs[i], names[i], s)
	}
	prompt := text("sys", 60)
	p := blocks(t, small, prompt)
	if q := blocks(t, big, prompt); fmt.Sprint(q.Hashes) != fmt.Sprint(p.Hashes) {
		t.Fatal("two simulators tokenise one prompt differently")
	}
	if len(p.Hashes) < 4 || len(p.Hashes) > 24 {
		t.Fatalf("prompt of %d blocks; the test wants 4..24", len(p.Hashes))
	}
	complete(t, small, prompt)
	complete(t, big, prompt)
	eventually(t, "both backends indexed as holding the whole prompt", func() bool {
		_, runs := best(idx, names, &p)
		return runs[0] == len(p.Hashes) && runs[1] == len(p.Hashes)
	})
	// Other prompts fill the small cache: the shared prompt's blocks,
	// idle, are evicted first.
	for i := range 3 {
		complete(t, small, text(fmt.Sprintf("other%d-", i), 100))
	}
	eventually(t, "the small backend's eviction indexed", func() bool {
		n, _ := idx.Match("small", &p)
		return n < len(p.Hashes)
	})
	b, runs := best(idx, names, &p)
	if b != 1 {
		t.Fatalf("the prompt would go to %v (blocks held %v), want big: small evicted it", b, runs)
	}
	// The index agrees with the engine: a request sent to small now
	// finds only what the index says it holds.
	var out struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	post(t, small.URL+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1}, &out)
	if got := out.Usage.Details.Cached; got > runs[0]*16 {
		t.Fatalf("small answered %d cached tokens; the index said %d blocks", got, runs[0])
	}
}

package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/affinity/kvevents"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// kvSim starts a simulator serving model m whose prefix cache holds
// kvTokens tokens in blocks of 16 and publishes its KV events.
func kvSim(t *testing.T, kvTokens int) *simtest.Server {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Model = "m"
	cfg.Engine.KVCacheTokens = kvTokens
	cfg.Engine.BlockSize = 16
	cfg.Engine.PrefixCaching = true
	cfg.KVEvents = sim.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0"}
	return simtest.Start(t, cfg)
}

func exactConfig(sims ...*simtest.Server) Config {
	var urls []string
	for _, s := range sims {
		urls = append(urls, s.URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Prefix.Exact.Enabled = true
	for i, s := range sims {
		pc.Backends[i].KVEvents = s.Sim.KVEventsAddr()
		pc.Backends[i].KVReplay = s.Sim.KVReplayAddr()
	}
	cfg.Pools["p"] = pc
	return cfg
}

func exactOf(gw *testGateway) *exactIndex {
	for _, p := range gw.state.Load().pools {
		if p.prefix != nil && p.prefix.exact != nil {
			return p.prefix.exact
		}
	}
	return nil
}

func words(tag string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

func completion(t *testing.T, url, prompt string) openai.Usage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1})
	code, _, resp := post(t, url, "/v1/completions", string(body))
	if code != 200 {
		t.Fatalf("POST %s: %d %s", url, code, resp)
	}
	var r struct {
		Usage openai.Usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(resp), &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage
}

func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not within 5s: %s", what)
}

// Exact mode against the simulator's KV events: both backends computed
// the same prompts (sent to them directly, so the gateway's own index
// knows nothing of them), then one evicts them; through the gateway each
// prompt goes to the backend whose engine still holds it, and finds it
// cached there.
func TestExactModeSendsNothingToAnEvictedBackend(t *testing.T) {
	t.Parallel()
	small, big := kvSim(t, 1024), kvSim(t, 16384) // 64 blocks against 1,024
	gw := startGateway(t, exactConfig(small, big))
	ex := exactOf(gw)
	if ex == nil {
		t.Fatal("exact mode is not on")
	}
	synced := func(s *simtest.Server) bool {
		p := kvevents.Prompt{BlockSize: 16}
		_, ok := ex.idx.Match(s.URL, &p)
		return ok
	}
	for i := 0; !(synced(small) && synced(big)); i++ {
		if i == 200 {
			t.Fatal("the gateway never heard both engines' events")
		}
		completion(t, small.URL, words(fmt.Sprintf("w%d-", i), 30))
		completion(t, big.URL, words(fmt.Sprintf("w%d-", i), 30))
		time.Sleep(10 * time.Millisecond)
	}
	prompts := []string{words("alpha", 50), words("beta", 50), words("gamma", 50), words("delta", 50)}
	for _, p := range prompts {
		completion(t, small.URL, p)
		completion(t, big.URL, p)
	}
	// small's cache fills with other prompts: the four, idle, go first.
	for i := range 4 {
		completion(t, small.URL, words(fmt.Sprintf("evict%d-", i), 60))
	}
	pool := gw.state.Load().pools["p"]
	within(t, "small's evictions heard", func() bool {
		for _, p := range prompts {
			var k affinity.Key
			body, _ := json.Marshal(map[string]any{"model": "m", "prompt": p})
			ex.tokenize(pool, body, &k)
			if k.Exact == nil {
				return false
			}
			pr := kvevents.Prompt{BlockSize: 16, Hashes: k.Exact.Hashes}
			if n, ok := ex.idx.Match(small.URL, &pr); !ok || n == len(pr.Hashes) {
				return false
			}
		}
		return true
	})
	before := backendStates(gw)[big.URL].Routes["prefix_warm"]
	for _, p := range prompts {
		u := completion(t, gw.URL, p)
		c, _ := u.Cached()
		if c < u.PromptTokens-16 {
			t.Errorf("prompt %.10q… found %d of %d tokens cached: not sent where its blocks are", p, c, u.PromptTokens)
		}
	}
	if got := backendStates(gw)[big.URL].Routes["prefix_warm"] - before; got != int64(len(prompts)) {
		t.Fatalf("%d of %d prompts went warm to the backend that holds them (routes %v / %v)", got, len(prompts),
			backendStates(gw)[big.URL].Routes, backendStates(gw)[small.URL].Routes)
	}
	if st := backendStates(gw)[small.URL].Prefix; st == nil || st.Exact == nil || !st.Exact.Synced || st.Exact.Batches == 0 {
		t.Fatalf("/admin/stats shows small's event stream as %+v", st)
	}
	if ex.matched.Load() < int64(len(prompts)) {
		t.Fatalf("exact index matched %d requests, want %d", ex.matched.Load(), len(prompts))
	}
}

// A backend whose publisher never answers keeps its pool on the
// approximate index: requests are served, counted as fallbacks.
func TestExactModeFallsBackWithoutEvents(t *testing.T) {
	t.Parallel()
	a, b := kvSim(t, 8192), kvSim(t, 8192)
	cfg := exactConfig(a, b)
	pc := cfg.Pools["p"]
	pc.Backends[1].KVEvents, pc.Backends[1].KVReplay = "tcp://127.0.0.1:1", ""
	cfg.Pools["p"] = pc
	gw := startGateway(t, cfg)
	ex := exactOf(gw)
	for i := range 20 {
		completion(t, gw.URL, words(fmt.Sprintf("f%d-", i), 40))
	}
	if ex.matched.Load() != 0 || ex.unsynced.Load()+ex.noTokens.Load() < 20 {
		t.Fatalf("matched %d, unsynced %d, no tokens %d: want every request routed approximately",
			ex.matched.Load(), ex.unsynced.Load(), ex.noTokens.Load())
	}
}

func TestExactConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*PoolConfig)
		want string
	}{
		{"kv_events without exact", func(p *PoolConfig) { p.Prefix.Exact.Enabled = false }, "prefix.exact.enabled is false"},
		{"exact without prefix", func(p *PoolConfig) { p.Selection = LoadPolicy }, "needs selection prefix"},
		{"no backend followed", func(p *PoolConfig) { p.Backends[0].KVEvents, p.Backends[0].KVReplay = "", "" }, "no backend has kv_events"},
		{"not tcp", func(p *PoolConfig) { p.Backends[0].KVEvents = "ipc:///tmp/x" }, "kv_events"},
		{"wildcard host", func(p *PoolConfig) { p.Backends[0].KVEvents = "tcp://*:5557" }, "kv_events"},
		{"replay alone", func(p *PoolConfig) { p.Backends[0].KVEvents = "" }, "kv_replay: needs kv_events"},
		{"tiny bound", func(p *PoolConfig) { p.Prefix.Exact.MaxBlocks = 1 }, "max_blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("http://127.0.0.1:9")
			pc := cfg.Pools["p"]
			pc.Selection = PrefixPolicy
			pc.Prefix.Exact.Enabled = true
			pc.Backends[0].KVEvents, pc.Backends[0].KVReplay = "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"
			pc.defaults()
			tc.edit(&pc)
			err := pc.validate("pools.p")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A backend whose /tokenize fails (an engine image without it, a
// timeout) costs one failed round trip, not one per request: exact mode
// routes approximately, asking again a second later.
func TestExactModeBacksOffAFailingTokenize(t *testing.T) {
	t.Parallel()
	s := kvSim(t, 8192)
	target, _ := neturl.Parse(s.URL)
	var tokenizes atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			tokenizes.Add(1)
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := exactConfig(s)
	pc := cfg.Pools["p"]
	pc.Backends[0].URL = front.URL
	cfg.Pools["p"] = pc
	gw := startGateway(t, cfg)
	ex := exactOf(gw)
	within(t, "the engine's block size heard", func() bool {
		completion(t, s.URL, words("w", 30))
		return ex.idx.BlockSize(front.URL) > 0
	})
	start := time.Now()
	for i := range 20 {
		completion(t, gw.URL, words(fmt.Sprintf("b%d-", i), 40))
	}
	elapsed := time.Since(start)
	if ex.matched.Load() != 0 || ex.noTokens.Load() < 20 {
		t.Fatalf("matched %d, without tokens %d: want all 20 routed approximately", ex.matched.Load(), ex.noTokens.Load())
	}
	if n, most := tokenizes.Load(), int64(elapsed/tokenizeBackoff)+1; n > most {
		t.Fatalf("%d /tokenize calls in %v; the backoff allows %d", n, elapsed, most)
	}
}

package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

// vllmBackend is a vLLM-like server for routing tests: chat answers after
// a delay, counted, and /metrics with the gauges the test sets (or a
// failure, or a reading frozen in time).
type vllmBackend struct {
	URL              string
	chats, inFlight  atomic.Int64
	running, waiting atomic.Int64
	kvPermille       atomic.Int64
	metricsStatus    atomic.Int64 // 0: 200
	frozen           atomic.Bool  // report running = waiting = 0 whatever is in flight
	delay            atomic.Int64 // ns per answer
	healthStatus     atomic.Int64 // 0: 200
	// slots > 0 answers as llama.cpp's server with that many slots:
	// /metrics in its names (requests_processing, requests_deferred),
	// /props (propsStatus, 0: 200) and /slots (slotsStatus).
	slots, propsStatus, slotsStatus atomic.Int64
	mu                              sync.Mutex
	prompts                         []string
	srv                             *http.Server
}

func newVLLMBackend(t *testing.T) *vllmBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &vllmBackend{URL: "http://" + ln.Addr().String()}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			if s := b.metricsStatus.Load(); s != 0 {
				w.WriteHeader(int(s))
				return
			}
			running, waiting := b.running.Load(), b.waiting.Load()
			if !b.frozen.Load() {
				running += b.inFlight.Load()
			}
			if n := b.slots.Load(); n > 0 {
				// llama.cpp: a request per slot, the rest deferred.
				waiting += max(0, running-n)
				running = min(running, n)
				fmt.Fprintf(w, "# HELP llamacpp:requests_processing Number of requests processing\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"+
					"# HELP llamacpp:requests_deferred Number of requests deferred\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n", running, waiting)
				return
			}
			fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n"+
				"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\n"+
				"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} %g\n",
				running, waiting, float64(b.kvPermille.Load())/1000)
		case "/props", "/slots":
			status := &b.propsStatus
			if r.URL.Path == "/slots" {
				status = &b.slotsStatus
			}
			if s := status.Load(); s != 0 || b.slots.Load() == 0 {
				w.WriteHeader(int(max(s, 404)))
				return
			}
			n := int(b.slots.Load())
			if r.URL.Path == "/props" {
				fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":2048},"total_slots":%d,"model_alias":"m"}`, n)
				return
			}
			out := make([]map[string]any, n)
			for i := range out {
				out[i] = map[string]any{"id": i, "n_ctx": 2048, "is_processing": false}
			}
			_ = json.NewEncoder(w).Encode(out)
		case "/health":
			if s := b.healthStatus.Load(); s != 0 {
				w.WriteHeader(int(s))
			}
		default:
			body, _ := io.ReadAll(r.Body)
			b.chats.Add(1)
			b.inFlight.Add(1)
			defer b.inFlight.Add(-1)
			b.mu.Lock()
			b.prompts = append(b.prompts, string(body))
			b.mu.Unlock()
			time.Sleep(time.Duration(b.delay.Load()))
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101,"prompt_tokens_details":{"cached_tokens":64}}}`)
		}
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// routingGateway runs a gateway of selection over the backends, scraping
// them every 20ms.
func routingGateway(t *testing.T, selection string, bs []*vllmBackend, edit func(*PoolConfig)) *testGateway {
	t.Helper()
	var urls []string
	for _, b := range bs {
		urls = append(urls, b.URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = selection
	pc.Load.Interval = 20 * time.Millisecond
	pc.Load.StaleAfter = time.Second
	if edit != nil {
		edit(&pc)
	}
	cfg.Pools["p"] = pc
	gw := startGateway(t, cfg)
	// Every backend read once before the test sends anything.
	waitFor(t, 3*time.Second, "a first scrape of every backend", func() bool {
		for _, b := range gw.Stats(time.Now()).Gateway.Backends {
			if b.Load == nil || (b.Load.Source != "metrics" && b.Load.ScrapeFailures == 0) {
				return false
			}
		}
		return true
	})
	return gw
}

// groupBody is a chat request of group g's long system prompt and a
// question of its own.
func groupBody(g, q int) string {
	system := strings.Repeat(fmt.Sprintf("You are the assistant of tenant %d. ", g), 60)
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{
		{"role": "system", "content": system}, {"role": "user", "content": fmt.Sprintf("question %d", q)}}})
	return string(b)
}

func backendStates(gw *testGateway) map[string]adminapi.BackendState {
	out := map[string]adminapi.BackendState{}
	for _, b := range gw.Stats(time.Now()).Gateway.Backends {
		out[b.Name] = b
	}
	return out
}

// A group's requests stay on the backend that first served it while that
// backend has room, and spill to the least loaded once its own metrics
// say it queues.
func TestPrefixAffinityHoldsUntilTheGuardTrips(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, nil)
	home := map[int]*vllmBackend{}
	for g := range 4 {
		for q := range 10 {
			before := map[*vllmBackend]int64{}
			for _, b := range bs {
				before[b] = b.chats.Load()
			}
			if code, _, body := post(t, gw.URL, "/v1/chat/completions", groupBody(g, q)); code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
			for _, b := range bs {
				if b.chats.Load() > before[b] {
					if home[g] == nil {
						home[g] = b
					} else if home[g] != b {
						t.Fatalf("group %d's request %d went to %s, its earlier ones to %s", g, q, b.URL, home[g].URL)
					}
				}
			}
		}
	}
	st := backendStates(gw)
	warm := st[home[0].URL]
	if warm.Routes[reasonWarm.String()] < 9 || warm.Prefix == nil || warm.Prefix.ExpectedRatio == nil || *warm.Prefix.ExpectedRatio < 0.5 {
		t.Fatalf("the warm backend's state: routes %v, prefix %+v", warm.Routes, warm.Prefix)
	}
	if r := warm.Prefix.ReportedRatio; r == nil || *r != 0.64 {
		t.Fatalf("reported hit ratio %v, want the answers' 64/100", r)
	}
	// Group 0's home queues: its next request spills, and says why.
	home[0].waiting.Store(5)
	waitFor(t, 2*time.Second, "the queue to show in the scrape", func() bool {
		l := backendStates(gw)[home[0].URL].Load
		return l.Waiting != nil && *l.Waiting == 5
	})
	counts := func() []int64 {
		var n []int64
		for _, b := range bs {
			n = append(n, b.chats.Load())
		}
		return n
	}
	was := counts()
	post(t, gw.URL, "/v1/chat/completions", groupBody(0, 99))
	var spillTo *vllmBackend
	for i, n := range counts() {
		if n > was[i] {
			spillTo = bs[i]
		}
	}
	if spillTo == nil || spillTo == home[0] {
		t.Fatal("a request went to a warm backend whose queue passed prefix.spill_waiting")
	}
	spilled := int64(0)
	for _, b := range backendStates(gw) {
		spilled += b.Routes[reasonSpillQueue.String()]
	}
	if spilled != 1 {
		t.Fatalf("%d picks counted as prefix_spill_queue, want 1", spilled)
	}
	gw.syncTelemetry() // the log line is written off the request path
	if !strings.Contains(gw.logs.String(), "route=prefix_spill_queue") {
		t.Fatal("the request log line does not say the request spilled")
	}
	// The queue drains: the group goes to a backend warm for it again,
	// its home or the one it spilled to (both now hold its prefix; the
	// tie goes by load), not to a cold one.
	home[0].waiting.Store(0)
	waitFor(t, 2*time.Second, "the queue to drain in the scrape", func() bool {
		l := backendStates(gw)[home[0].URL].Load
		return l.Waiting != nil && *l.Waiting == 0
	})
	warmBefore := int64(0)
	for _, b := range backendStates(gw) {
		warmBefore += b.Routes[reasonWarm.String()]
	}
	before, spilledBefore := home[0].chats.Load(), spillTo.chats.Load()
	post(t, gw.URL, "/v1/chat/completions", groupBody(0, 100))
	if home[0].chats.Load()+spillTo.chats.Load() != before+spilledBefore+1 {
		t.Fatal("once its home's queue drained, the group went to a backend that holds none of it")
	}
	warmAfter := int64(0)
	for _, b := range backendStates(gw) {
		warmAfter += b.Routes[reasonWarm.String()]
	}
	if warmAfter != warmBefore+1 {
		t.Fatalf("the request after the drain was not routed prefix_warm (%d → %d)", warmBefore, warmAfter)
	}
}

// burst sends n concurrent requests of distinct prompts and returns how
// many each backend got.
func burst(t *testing.T, gw *testGateway, bs []*vllmBackend, n int) []int64 {
	t.Helper()
	before := make([]int64, len(bs))
	for i, b := range bs {
		before[i] = b.chats.Load()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"unique prompt %d of the burst, long enough to fill a block or two of the prefix index for sure"}]}`, i)
			if code, _, b := post(t, gw.URL, "/v1/chat/completions", body); code != 200 {
				t.Errorf("status %d: %s", code, b)
			}
		}()
	}
	wg.Wait()
	got := make([]int64, len(bs))
	for i, b := range bs {
		got[i] = b.chats.Load() - before[i]
	}
	return got
}

// A reading that does not move (a stale scrape, or one that never counts
// the gateway's requests) and a scrape that fails do not make one
// backend look idle to a whole burst: the gateway adds what it sent.
func TestStaleOrFailedScrapeDoesNotPileRequestsOnOneBackend(t *testing.T) {
	t.Parallel()
	for _, selection := range []string{LoadPolicy, PrefixPolicy} {
		t.Run(selection, func(t *testing.T) {
			bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
			for _, b := range bs {
				b.delay.Store(int64(300 * time.Millisecond))
			}
			// The others report load; the first looks empty forever, or
			// cannot be read at all.
			bs[1].running.Store(2)
			bs[2].running.Store(2)
			bs[0].frozen.Store(true)
			gw := routingGateway(t, selection, bs, nil)
			got := burst(t, gw, bs, 30)
			if got[0] > 16 {
				t.Fatalf("a backend whose reading stood still got %d of 30 requests (%v)", got[0], got)
			}
			bs[0].metricsStatus.Store(500)
			waitFor(t, 2*time.Second, "the failure to show", func() bool {
				l := backendStates(gw)[bs[0].URL].Load
				return l.Source == "gateway" && strings.Contains(l.Error, "status 500")
			})
			got = burst(t, gw, bs, 30)
			if got[0] > 16 {
				t.Fatalf("a backend whose scrape fails got %d of 30 requests (%v)", got[0], got)
			}
			if got[1]+got[2] == 0 {
				t.Fatalf("distribution %v", got)
			}
		})
	}
}

// A backend out of selection (its health check failing) is never picked,
// however much of the prompt it is expected to hold.
func TestUnavailableBackendIsNeverChosenForItsPrefix(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, func(pc *PoolConfig) {
		pc.Health = HealthConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1}
	})
	for q := range 5 {
		post(t, gw.URL, "/v1/chat/completions", groupBody(7, q))
	}
	warm, other := bs[0], bs[1]
	if bs[1].chats.Load() == 5 {
		warm, other = bs[1], bs[0]
	}
	if warm.chats.Load() != 5 {
		t.Fatalf("the group was split: %d and %d", bs[0].chats.Load(), bs[1].chats.Load())
	}
	warm.healthStatus.Store(503)
	waitFor(t, 2*time.Second, "the warm backend to leave selection", func() bool {
		return !backendStates(gw)[warm.URL].Up
	})
	for q := range 20 {
		if code, _, body := post(t, gw.URL, "/v1/chat/completions", groupBody(7, 100+q)); code != 200 {
			t.Fatalf("status %d: %s", code, body)
		}
	}
	if warm.chats.Load() != 5 || other.chats.Load() != 20 {
		t.Fatalf("with the warm backend down: %d to it, %d to the other; want 5 and 20", warm.chats.Load(), other.chats.Load())
	}
}

// Hostile prompts cost the index a bounded amount: a megabyte of prompt
// and ten thousand messages are answered, and route like any other.
func TestPrefixRoutingTakesHostilePrompts(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	gw := routingGateway(t, PrefixPolicy, bs, nil)
	huge := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("\\u00e9\xff", 1<<19/4) + `"}]}`
	var many strings.Builder
	many.WriteString(`{"model":"m","messages":[`)
	for i := range 10000 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"content":"m%d","role":"user"}`, i)
	}
	many.WriteString(`]}`)
	for _, body := range []string{huge, many.String(), `{"model":"m","messages":[]}`, `{"model":"m","messages":[{"role":"user"}]}`, `{"model":"m","prompt":["a",1]}`} {
		code, _, resp := post(t, gw.URL, "/v1/chat/completions", body)
		if code != 200 && code != 400 {
			t.Fatalf("status %d: %.200s", code, resp)
		}
	}
	if bs[0].chats.Load()+bs[1].chats.Load() == 0 {
		t.Fatal("nothing reached a backend")
	}
}

// The load scrape reads llama.cpp's server in its own terms: busy slots
// (requests_processing) as running, deferred requests as its queue, and
// its slot count, which /metrics does not carry, from /props or else
// /slots; without either the reading still counts, with no bound.
func TestLoadReadsLlamaCpp(t *testing.T) {
	t.Parallel()
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	for i, b := range bs {
		b.slots.Store(int64(1 + 3*i)) // 1, 4, 7
		b.running.Store(3)            // 3 in flight: llama.cpp runs min(3, slots)
		b.frozen.Store(true)
	}
	bs[1].propsStatus.Store(404) // an old server: /slots only
	bs[2].propsStatus.Store(404)
	bs[2].slotsStatus.Store(501) // --no-slots as well: no bound
	gw := routingGateway(t, LoadPolicy, bs, nil)
	want := []struct {
		running, waiting float64
		bound            *float64
	}{{1, 2, ptr(1.0)}, {3, 0, ptr(4.0)}, {3, 0, nil}}
	waitFor(t, 3*time.Second, "the slot counts", func() bool {
		st := backendStates(gw)
		return st[bs[0].URL].Load.MaxRunning != nil && st[bs[1].URL].Load.MaxRunning != nil
	})
	st := backendStates(gw)
	for i, b := range bs {
		l := st[b.URL].Load
		if l.Source != "metrics" || l.Server != "llamacpp" {
			t.Errorf("backend %d: source %q, server %q: want llama.cpp's metrics (error %q)", i, l.Source, l.Server, l.Error)
			continue
		}
		if l.Running == nil || *l.Running != want[i].running || l.Waiting == nil || *l.Waiting != want[i].waiting {
			t.Errorf("backend %d: running %v, waiting %v; want %v busy slots and %v deferred", i, deref(l.Running), deref(l.Waiting), want[i].running, want[i].waiting)
		}
		if (l.MaxRunning == nil) != (want[i].bound == nil) || l.MaxRunning != nil && *l.MaxRunning != *want[i].bound {
			t.Errorf("backend %d: bound %v, want %v", i, deref(l.MaxRunning), deref(want[i].bound))
		}
	}
}

func ptr[T any](v T) *T { return &v }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

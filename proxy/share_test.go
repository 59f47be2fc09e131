package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity/share"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/testredis"
	"github.com/infergate/infergate/shaping"
	"github.com/redis/go-redis/v9"
)

// shareGateway is a replica of selection prefix over bs (in that order),
// sharing its placements through the Redis at addr under keyPrefix ("":
// no Redis, its index its own). It returns once every backend was
// scraped and, with Redis, the bus subscribed.
func shareGateway(t *testing.T, addr, keyPrefix string, bs ...*vllmBackend) *testGateway {
	t.Helper()
	return shareGatewayOpTimeout(t, addr, keyPrefix, time.Second, bs...)
}

// shareGatewayOpTimeout is shareGateway whose Redis calls each wait at
// most opTimeout.
func shareGatewayOpTimeout(t *testing.T, addr, keyPrefix string, opTimeout time.Duration, bs ...*vllmBackend) *testGateway {
	t.Helper()
	var urls []string
	for _, b := range bs {
		urls = append(urls, b.URL)
	}
	cfg := testConfig(urls...)
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Load.Interval = 20 * time.Millisecond
	pc.Load.StaleAfter = time.Second
	cfg.Pools["p"] = pc
	if addr != "" {
		cfg.Shaping.Redis = shaping.RedisConfig{Addr: addr, KeyPrefix: keyPrefix, OpTimeout: opTimeout}
	}
	cfg.Share.Interval = 5 * time.Millisecond
	gw := startGateway(t, cfg)
	waitFor(t, 3*time.Second, "a first scrape of every backend", func() bool {
		for _, b := range gw.Stats(time.Now()).Gateway.Backends {
			if b.Load == nil || b.Load.Source != "metrics" {
				return false
			}
		}
		return true
	})
	if addr != "" {
		waitFor(t, 3*time.Second, "the placements channel", func() bool { return shared(gw).Up })
	}
	return gw
}

// shared is the replica's share state (a zero one when it shares none).
func shared(gw *testGateway) adminapi.ShareState {
	if s := gw.Stats(time.Now()).Gateway.Share; s != nil {
		return *s
	}
	return adminapi.ShareState{}
}

// sendTo posts body to gw and returns the backend of bs that got it.
func sendTo(t *testing.T, gw *testGateway, bs []*vllmBackend, body string) *vllmBackend {
	t.Helper()
	before := make([]int64, len(bs))
	for i, b := range bs {
		before[i] = b.chats.Load()
	}
	if code, _, out := post(t, gw.URL, "/v1/chat/completions", body); code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	for i, b := range bs {
		if b.chats.Load() > before[i] {
			return b
		}
	}
	t.Fatal("no backend got the request")
	return nil
}

// conversation is turn n of a chat: a long system prompt of its own,
// then n exchanges, each answer long enough to fill blocks of its own.
func conversation(id, n int) string {
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat(fmt.Sprintf("You are assistant number %d. ", id), 40)}}
	for i := range n {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("question %d of conversation %d", i, id)})
		if i < n-1 {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": strings.Repeat(fmt.Sprintf("answer %d. ", i), 60)})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return string(b)
}

// A prefix one replica placed goes to the same backend from another,
// though the other's file lists the backends in another order, and
// though on its own that replica would have sent it elsewhere.
func TestReplicasSendAPrefixWhereAnotherPlacedIt(t *testing.T) {
	t.Parallel()
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("share-%d", time.Now().UnixNano())
	x, y, z := newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)
	all := []*vllmBackend{x, y, z}
	a := shareGateway(t, addr, prefix, x) // x is its only backend
	b := shareGateway(t, addr, prefix, z, y, x)
	alone := shareGateway(t, "", "", z, y, x) // b without sharing
	// A conversation that b, alone, would start elsewhere than x.
	id := -1
	for i := range 50 {
		if sendTo(t, alone, all, conversation(i, 1)) != x {
			id = i
			break
		}
	}
	if id < 0 {
		t.Fatal("every conversation went to x")
	}
	if got := sendTo(t, a, all, conversation(id, 1)); got != x {
		t.Fatalf("a sent it to %s", got.URL)
	}
	waitFor(t, 3*time.Second, "b to learn a's placement", func() bool { return shared(b).Applied >= 1 })
	if got := sendTo(t, b, all, conversation(id, 1)); got != x {
		t.Fatalf("b sent the prefix a placed on x (%s) to %s", x.URL, got.URL)
	}
	if r := backendStates(b)[x.URL].Routes; r[reasonWarm.String()] != 1 {
		t.Fatalf("b's routes to x: %v, want one prefix_warm", r)
	}
	if s := shared(a); s.Published < 1 || s.Received != 0 || s.Errors != 0 || s.Invalid != 0 {
		t.Fatalf("a's share state: %+v", s)
	}
	// b's own placement was no news to the index (x held all of it):
	// nothing sent. a learns nothing it did not know.
	time.Sleep(30 * time.Millisecond)
	if s := shared(b); s.Published != 0 {
		t.Fatalf("b published %d records for a placement its index expected", s.Published)
	}
}

// A conversation that a spill moved on one replica follows the move on
// another: its next turn goes where the longer prefix now is.
func TestReplicasFollowASpill(t *testing.T) {
	t.Parallel()
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("share-%d", time.Now().UnixNano())
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	a := shareGateway(t, addr, prefix, bs...)
	b := shareGateway(t, addr, prefix, bs[2], bs[0], bs[1])
	home := sendTo(t, a, bs, conversation(1, 1))
	home.waiting.Store(5)
	waitFor(t, 2*time.Second, "a to see its home queue", func() bool {
		l := backendStates(a)[home.URL].Load
		return l.Waiting != nil && *l.Waiting == 5
	})
	moved := sendTo(t, a, bs, conversation(1, 2))
	if moved == home {
		t.Fatal("turn 2 did not spill")
	}
	home.waiting.Store(0)
	waitFor(t, 3*time.Second, "b to learn both turns", func() bool { return shared(b).Applied >= 2 })
	waitFor(t, 2*time.Second, "b to see the queue drained", func() bool {
		l := backendStates(b)[home.URL].Load
		return l.Waiting != nil && *l.Waiting == 0
	})
	if got := sendTo(t, b, bs, conversation(1, 3)); got != moved {
		t.Fatalf("turn 3 through b went to %s; the conversation moved to %s (from %s)", got.URL, moved.URL, home.URL)
	}
}

// keyed is turn n of session key's conversation, named by
// prompt_cache_key: a short prompt, so the session, not the prefix, is
// what places it.
func keyed(key string, n int) string {
	return fmt.Sprintf(`{"model":"m","prompt_cache_key":%q,"messages":[{"role":"user","content":"turn %d"}]}`, key, n)
}

// A session one replica moved (its backend queued) stays where it moved
// when its next turn goes through another replica, which on its own
// would have sent the session to its rendezvous home.
func TestReplicasAgreeOnASessionThatMoved(t *testing.T) {
	t.Parallel()
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("share-%d", time.Now().UnixNano())
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	a := shareGateway(t, addr, prefix, bs...)
	b := shareGateway(t, addr, prefix, bs[1], bs[2], bs[0])
	home := sendTo(t, a, bs, keyed("conv-1", 1))
	home.waiting.Store(5)
	waitFor(t, 2*time.Second, "a to see the session's home queue", func() bool {
		l := backendStates(a)[home.URL].Load
		return l.Waiting != nil && *l.Waiting == 5
	})
	moved := sendTo(t, a, bs, keyed("conv-1", 2))
	if moved == home {
		t.Fatal("the session did not move off a queueing backend")
	}
	home.waiting.Store(0)
	waitFor(t, 3*time.Second, "b to learn both placements", func() bool { return shared(b).Applied >= 2 })
	waitFor(t, 2*time.Second, "b to see the queue drained", func() bool {
		l := backendStates(b)[home.URL].Load
		return l.Waiting != nil && *l.Waiting == 0
	})
	if got := sendTo(t, b, bs, keyed("conv-1", 3)); got != moved {
		t.Fatalf("turn 3 through b went to %s; the session moved to %s (from %s)", got.URL, moved.URL, home.URL)
	}
	if r := backendStates(b)[moved.URL].Routes; r[reasonSessionSticky.String()] != 1 {
		t.Fatalf("b's routes to the session's backend: %v, want one session_sticky", r)
	}
	// Sticky turns teach nobody anything: a published one record per
	// placement that moved or began the session, b none.
	sendTo(t, a, bs, keyed("conv-1", 4))
	time.Sleep(30 * time.Millisecond)
	if pa, pb := shared(a).Published, shared(b).Published; pa != 2 || pb != 0 {
		t.Fatalf("published: a %d, b %d; want 2 and 0", pa, pb)
	}
}

// cutProxy stands between the gateways and Redis: it forwards until
// Cut, then swallows every byte both ways and answers nothing, on the
// connections it holds and on new ones (a partition, where a call waits
// out its timeout, not a refusal); Mend closes them all and forwards
// again.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.Mend() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *cutProxy) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if !p.cut.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) Cut() { p.cut.Store(true) }

func (p *cutProxy) Mend() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.cut.Store(false)
}

// A replica cut off from Redis (a partition: every call waits out its
// timeout) keeps routing on what it learnt, with no request waiting on
// Redis; it says so once, counts what it could not send, and shares
// again when Redis is back. It runs beside other tests: the bound on a
// request (half the Redis timeout) is far above a starved request and
// below any wait on Redis.
func TestReplicaWithoutRedisKeepsRouting(t *testing.T) {
	t.Parallel()
	cut := newCutProxy(t, testredis.Addr(t))
	prefix := fmt.Sprintf("cut-%d", time.Now().UnixNano())
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t), newVLLMBackend(t)}
	// A request that waited on Redis would take at least opTimeout; one
	// that did not takes milliseconds. The bound below is half of it: long
	// enough that a request on a starved CPU does not reach it (a fixed
	// 500 ms did, in full -race runs), short of any wait on Redis.
	const opTimeout = 3 * time.Second
	a := shareGatewayOpTimeout(t, cut.Addr(), prefix, opTimeout, bs...)
	b := shareGatewayOpTimeout(t, cut.Addr(), prefix, opTimeout, bs...)
	timed := func(gw *testGateway, body string) (*vllmBackend, time.Duration) {
		start := time.Now()
		got := sendTo(t, gw, bs, body)
		return got, time.Since(start)
	}
	var before []time.Duration
	homes := map[int]*vllmBackend{}
	for i := range 20 {
		got, d := timed(a, conversation(i, 1))
		homes[i] = got
		before = append(before, d)
	}
	waitFor(t, 10*time.Second, "b to learn a's placements", func() bool { return shared(b).Applied >= 20 })

	cut.Cut()
	// The first request of each replica after the cut is admission's: its
	// lease call waits out shaping.redis.op_timeout (opTimeout), and
	// admission stops asking (on_failure open). Sharing asks Redis on no
	// request.
	sendTo(t, a, bs, conversation(1000, 1))
	sendTo(t, b, bs, conversation(1001, 1))
	var after []time.Duration
	for i := range 20 {
		// b routes each conversation's next turn by what it learnt.
		got, d := timed(b, conversation(i, 2))
		if got != homes[i] {
			t.Fatalf("with Redis gone, b sent conversation %d to %s, not its home %s", i, got.URL, homes[i].URL)
		}
		after = append(after, d)
		// a places new conversations, each offered to a bus whose
		// publish now waits out its timeout.
		_, d = timed(a, conversation(100+i, 1))
		after = append(after, d)
	}
	slices.Sort(before)
	slices.Sort(after)
	t.Logf("with Redis: p50 %v p90 %v; cut off: p50 %v p90 %v max %v", before[len(before)/2], before[len(before)*9/10],
		after[len(after)/2], after[len(after)*9/10], after[len(after)-1])
	if worst := after[len(after)-1]; worst > opTimeout/2 {
		t.Fatalf("cut off from Redis, a request took %v (Redis calls time out after %v)", worst, opTimeout)
	}
	// A publish lost is one that waited out opTimeout.
	waitFor(t, 3*opTimeout, "a to count its placements lost", func() bool { s := shared(a); return s.Lost > 0 && !s.Up })
	if n := strings.Count(a.logs.String(), "share: redis down"); n != 1 {
		t.Fatalf("a logged 'redis down' %d times, want once:\n%s", n, a.logs.String())
	}

	cut.Mend()
	waitFor(t, 15*time.Second, "both to share again", func() bool { return shared(a).Up && shared(b).Up })
	applied := shared(b).Applied
	for i := 0; shared(b).Applied == applied; i++ {
		if i == 100 {
			t.Fatal("b learnt nothing from a after Redis came back")
		}
		sendTo(t, a, bs, conversation(200+i, 1))
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(a.logs.String(), "share: redis answers again"); n != 1 {
		t.Fatalf("a logged 'answers again' %d times, want once:\n%s", n, a.logs.String())
	}
}

// Whatever else is published on the channel is refused and counted;
// routing and the real batches go on.
func TestGarbledBatchesOnTheChannel(t *testing.T) {
	t.Parallel()
	addr := testredis.Addr(t)
	prefix := fmt.Sprintf("share-%d", time.Now().UnixNano())
	bs := []*vllmBackend{newVLLMBackend(t), newVLLMBackend(t)}
	a := shareGateway(t, addr, prefix, bs...)
	b := shareGateway(t, addr, prefix, bs...)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	channel := "{" + prefix + "}:placements"
	good := share.Append(nil, 99, []share.Record{{Pool: 1, Backend: 2, N: 1}})
	for _, p := range []string{"", "garbage", string(good[:len(good)-3]), string(good) + "x", strings.Repeat("\xff", share.MaxBatchBytes+1)} {
		if err := c.Publish(context.Background(), channel, p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Second, "the five to be refused", func() bool { return shared(b).Invalid == 5 })
	// A well-formed batch of a pool b lacks: received, ignored.
	c.Publish(context.Background(), channel, string(good))
	waitFor(t, 3*time.Second, "the foreign record", func() bool { return shared(b).Ignored == 1 })
	home := sendTo(t, a, bs, conversation(7, 1))
	waitFor(t, 3*time.Second, "b to learn a's placement", func() bool { return shared(b).Applied == 1 })
	if got := sendTo(t, b, bs, conversation(7, 2)); got != home {
		t.Fatalf("after the garbage, b sent a's conversation to %s, not %s", got.URL, home.URL)
	}
	resp, err := http.Get(b.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`infergate_share_records_total{kind="applied"} 1`, `infergate_share_records_total{kind="ignored"} 1`,
		"infergate_share_invalid_batches_total 5", "infergate_share_redis_up 1"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepShare(string(text)))
		}
	}
}

// Shutdown stops the bus: no goroutine of package share outlives it.
// Not parallel: the other tests' buses run meanwhile.
func TestShutdownStopsSharing(t *testing.T) {
	addr := testredis.Addr(t)
	bs := []*vllmBackend{newVLLMBackend(t)}
	gw := shareGateway(t, addr, fmt.Sprintf("share-%d", time.Now().UnixNano()), bs...)
	sendTo(t, gw, bs, conversation(1, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if s := shared(gw); s.Published != 1 {
		t.Fatalf("published %d at shutdown, want the one placement", s.Published)
	}
	buf := make([]byte, 1<<22)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "affinity/share.(*Bus)") {
		t.Fatalf("a goroutine of the bus is still running:\n%s", stacks)
	}
}

// Sharing is off without Redis, with share.off, and without a prefix pool.
func TestShareIsOnOnlyWithRedisAndPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want bool
	}{
		{"redis and prefix", func(*Config) {}, true},
		{"no redis", func(c *Config) { c.Shaping.Redis.Addr = "" }, false},
		{"off", func(c *Config) { c.Share.Off = true }, false},
		{"no prefix pool", func(c *Config) { p := c.Pools["p"]; p.Selection = LoadPolicy; c.Pools["p"] = p }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("http://127.0.0.1:1")
			p := cfg.Pools["p"]
			p.Selection = PrefixPolicy
			cfg.Pools["p"] = p
			cfg.Shaping.Redis.Addr = "127.0.0.1:1"
			tc.edit(&cfg)
			if got := wantsShare(&cfg); got != tc.want {
				t.Fatalf("wantsShare = %v", got)
			}
		})
	}
	cfg := testConfig("http://127.0.0.1:1")
	cfg.Share.Queue = 3
	cfg.Defaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "share.queue") {
		t.Fatalf("a queue of 3: %v", err)
	}
}

func grepShare(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "share") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

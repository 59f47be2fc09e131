//go:build !race

package proxy

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/alicebob/miniredis/v2"
	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/affinity/share"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
	"github.com/redis/go-redis/v9"
)

// The relay loop allocates nothing per event.
func TestRelayAllocatesNothingPerEvent(t *testing.T) {
	er := openai.NewEventReader(nil, nil, 1<<20)
	w := bufio.NewWriter(io.Discard)
	src := &eventSource{ev: benchEvent, tail: []byte(doneEvent)}
	var tl tracing.Timeline
	allocs := testing.AllocsPerRun(50, func() {
		src.n, src.i = 500, 0
		er.Reset(src, nil, 1<<20)
		relay(w, er, noDeadline{}, time.Second, time.Second, &tl, &openai.Tally{}, relayMode{})
	})
	if allocs != 0 {
		t.Errorf("relaying 500 events allocated %v times, want 0", allocs)
	}
}

// What one whole request allocates, gateway, client and backend together
// (the last two allocate nothing once warm): pinned, so a change that adds
// allocations to the request path fails here and says by how many. Raise
// a ceiling only with a reason in the commit; lower it when a change
// saves some. (36 and 46 since request bodies are streamed: fasthttp's
// discard of what a handler left unread costs one small allocation, the
// price of never reserving a body's declared size before it arrives; 32
// and 42 since the backend connection's round-trip time is read at most
// every 200 ms: each TCP_INFO read cost four; 19 and 28 since a
// request's context is a reqctx.Ctx inside the exchange: the standard
// library's pair of contexts under the gateway's, its timer and the
// round trip's AfterFunc child cost thirteen; 14 and 26 since a plain
// answer is read into a pooled buffer, the anonymous tenant is kept
// between requests and a backend is picked without a closure or a
// candidate list on the heap; 13 and 25 since the upstream request line is
// in origin-form: without a URL prefix or a query its target is the
// client's path, no string built; 12 and 24 since a tenant forgotten
// after its request (the anonymous one) is made again from the shaping
// limiter's spare; 9 and 21 since the method and a common path are not
// copied into strings and the attempt's upstream lives in the exchange;
// 9 and 20 since the flag a stream's body and its abandonment race for
// lives in the exchange.)
func TestGatewayRequestAllocations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stream  bool
		ceiling float64
	}{
		{"plain", false, 9},
		{"stream", true, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bg := newBenchGateway(t, tc.stream)
			for range 200 {
				bg.do(t)
			}
			bg.g.syncTelemetry()
			got := testing.AllocsPerRun(500, func() { bg.do(t) })
			t.Logf("%s request: %v allocations", tc.name, got)
			if got > tc.ceiling {
				t.Errorf("one %s request allocated %v times, over its ceiling of %v", tc.name, got, tc.ceiling)
			}
		})
	}
}

// The exchange, every request's one allocation of its own, fits Go's
// 1,792-byte size class with the 8-byte header the allocator puts before
// an object of more than 512 bytes that holds pointers: 8 bytes more and
// each request takes 2,048 (+256 B/op in BenchmarkGateway, as a field of
// issue 46 once did). Optional state (a mirrored copy's) goes behind a
// pointer it already has.
func TestExchangeFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(exchange{}); n+8 > 1792 {
		t.Errorf("the exchange is %d bytes, with its allocation header past the 1,792-byte size class: each request allocates 2,048", n)
	}
}

// Selection prefix with replicas sharing: the offer of each placement to
// the other replicas adds no allocation to the pick (whose one is the
// breaker's permit).
func TestSharedPrefixPickAllocatesNothing(t *testing.T) {
	m := miniredis.RunT(t)
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4")
	pc := cfg.Pools["p"]
	pc.Selection = PrefixPolicy
	pc.Load.Interval, pc.Load.StaleAfter = time.Hour, time.Hour // no scrape during the run
	cfg.Pools["p"] = pc
	cfg.Defaults()
	p, err := newPool("p", cfg.Pools["p"], time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bus := share.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), share.Config{Queue: 1 << 13}, func(*share.Record) bool { return true }, nil)
	defer bus.Close()
	// Every pick a new prefix: each is news to the index, so offered.
	keys := make([]affinity.Key, 4000)
	text := bytes.Repeat([]byte("y"), 8<<10)
	for i := range keys {
		var h affinity.Hasher
		h.Reset(&keys[i], 128, 1024)
		h.Write([]byte(strconv.Itoa(i)))
		h.Write(text)
	}
	now, i := time.Now(), 0
	pick := func() {
		b, permit, _, _, err := p.pick(nil, now, &keys[i])
		if err != nil {
			t.Fatal(err)
		}
		b.settle(permit, true)
		i++
	}
	alone := testing.AllocsPerRun(1000, pick)
	p.prefix.bus = new(atomic.Pointer[share.Bus])
	p.prefix.bus.Store(bus)
	sharing := testing.AllocsPerRun(1000, pick)
	t.Logf("a pick: %v allocations alone, %v sharing", alone, sharing)
	if sharing != alone || alone > 1 {
		t.Fatalf("a prefix pick allocated %v times alone, %v sharing", alone, sharing)
	}
	waitFor(t, 3*time.Second, "the offers to be published", func() bool { return bus.Stats().Published == 1001 })
}

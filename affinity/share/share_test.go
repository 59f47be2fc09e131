package share

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a log the test reads while the bus writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

// sink collects the records a bus applies.
type sink struct {
	mu   sync.Mutex
	recs []Record
	want uint64 // the pool it knows; others are ignored
}

func (s *sink) apply(r *Record) bool {
	if r.Pool != s.want {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, *r)
	return true
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// newBus starts a bus on addr with a fast cadence; the test closes it.
func newBus(t *testing.T, addr string, s *sink, log *syncBuffer) *Bus {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	var w interface{ Write([]byte) (int, error) } = &syncBuffer{}
	if log != nil {
		w = log
	}
	b := New(c, Config{Channel: "{t}:placements", Interval: 5 * time.Millisecond, Heartbeat: 200 * time.Millisecond, Queue: 64},
		s.apply, slog.New(slog.NewTextHandler(w, nil)))
	t.Cleanup(func() { b.Close() })
	waitFor(t, "the subscription", func() bool { return b.Stats().Up })
	return b
}

// A record one replica offers reaches the other, which applies it; the
// sender skips its own; a pool the receiver lacks is ignored, counted.
func TestRecordsReachTheOtherReplica(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	sa, sb := &sink{want: 1}, &sink{want: 1}
	a, b := newBus(t, m.Addr(), sa, nil), newBus(t, m.Addr(), sb, nil)
	r := rec(1, 0xb0, 0, 11, 12, 13)
	a.Offer(&r)
	other := rec(2, 0xb0, 0, 14)
	a.Offer(&other)
	waitFor(t, "b to receive both", func() bool { return b.Stats().Received == 2 })
	if sb.len() != 1 || sb.recs[0] != r {
		t.Fatalf("b applied %+v, want %+v", sb.recs, r)
	}
	if st := b.Stats(); st.Applied != 1 || st.Ignored != 1 || st.Invalid != 0 {
		t.Fatalf("b's stats %+v", st)
	}
	time.Sleep(20 * time.Millisecond)
	if sa.len() != 0 || a.Stats().Received != 0 {
		t.Fatalf("a applied its own records: %+v", sa.recs)
	}
	if st := a.Stats(); st.Published != 2 || st.Batches < 1 || st.Dropped != 0 || !st.Up {
		t.Fatalf("a's stats %+v", st)
	}
}

// Garbled and hostile batches on the channel are refused and counted,
// applied never, logged at most once a minute; good batches still pass.
func TestGarbledBatchesAreRefused(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	s := &sink{want: 1}
	var log syncBuffer
	b := newBus(t, m.Addr(), s, &log)
	good := Append(nil, 77, []Record{rec(1, 2, 0, 3)})
	for _, p := range [][]byte{nil, []byte("hello"), good[:len(good)-1], append(bytes.Clone(good), 9), make([]byte, MaxBatchBytes+10)} {
		m.Publish("{t}:placements", string(p))
	}
	m.Publish("{t}:placements", string(good))
	waitFor(t, "the good batch", func() bool { return s.len() == 1 })
	if st := b.Stats(); st.Invalid != 5 || st.Received != 1 || st.Applied != 1 {
		t.Fatalf("stats %+v, want 5 invalid and the good one applied", st)
	}
	if n := log.count("malformed batches"); n != 1 {
		t.Fatalf("%d log lines for 5 malformed batches, want 1", n)
	}
}

// A replica cut off from Redis keeps taking records without blocking
// (dropped and counted once the queue is full), logs the loss once, and
// shares again on its own when Redis comes back.
func TestLosingRedis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	sa, sb := &sink{want: 1}, &sink{want: 1}
	var logA syncBuffer
	a, b := newBus(t, m.Addr(), sa, &logA), newBus(t, m.Addr(), sb, nil)
	m.Close()
	waitFor(t, "a to see Redis down", func() bool { return !a.Stats().Up })
	start := time.Now()
	r := rec(1, 2, 0, 3)
	for range 10_000 {
		a.Offer(&r)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("10,000 offers took %v with Redis down", d)
	}
	waitFor(t, "the records to be lost or dropped", func() bool {
		st := a.Stats()
		return st.Lost+st.Dropped == 10_000
	})
	if st := a.Stats(); st.Dropped == 0 || st.Errors == 0 || st.Published != 0 {
		t.Fatalf("stats while down: %+v", st)
	}
	time.Sleep(300 * time.Millisecond) // several heartbeats and retries
	if n := logA.count("redis down"); n != 1 {
		t.Fatalf("%d 'redis down' lines, want 1:\n%s", n, logA.b.String())
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both to subscribe again", func() bool { return a.Stats().Up && b.Stats().Up })
	// Records sent as the subscriptions come back may be lost: send until
	// one lands.
	r2 := rec(1, 2, 5, 4)
	waitFor(t, "a record after the restart", func() bool {
		a.Offer(&r2)
		time.Sleep(10 * time.Millisecond)
		return sb.len() > 0
	})
	if n := logA.count("redis answers again"); n != 1 {
		t.Fatalf("%d 'answers again' lines, want 1", n)
	}
}

// A Redis that accepts and never answers holds up the bus's own
// goroutine, never an Offer.
func TestOfferNeverWaitsOnAStuckRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read nothing, answer nothing
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	b := New(c, Config{Interval: time.Millisecond, OpTimeout: 50 * time.Millisecond, Queue: 256}, func(*Record) bool { return true }, nil)
	defer b.Close()
	r := rec(1, 2, 0, 3)
	for range 20 {
		start := time.Now()
		for range 1000 {
			b.Offer(&r)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("1,000 offers took %v with Redis stuck", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, "the publish to time out", func() bool { s := b.Stats(); return s.Errors > 0 && s.Dropped > 0 && s.Lost > 0 })
	start := time.Now()
	b.Close()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with Redis stuck", d)
	}
}

// A subscription whose connection goes silent (a partition closes
// nothing) is noticed within two heartbeats, with no record to send, and
// made anew once Redis answers.
func TestSilentSubscriptionIsNoticed(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var silent atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", m.Addr())
			if err != nil {
				c.Close()
				continue
			}
			pipe := func(from, to net.Conn) {
				defer from.Close()
				defer to.Close()
				buf := make([]byte, 4096)
				for {
					n, err := from.Read(buf)
					if err != nil {
						return
					}
					if !silent.Load() {
						to.Write(buf[:n])
					}
				}
			}
			go pipe(c, u)
			go pipe(u, c)
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	b := New(c, Config{Heartbeat: 50 * time.Millisecond}, func(*Record) bool { return true }, nil)
	defer b.Close()
	waitFor(t, "the subscription", func() bool { return b.Stats().Up })
	silent.Store(true)
	waitFor(t, "the silence to be noticed", func() bool { return !b.Stats().Up })
	silent.Store(false)
	waitFor(t, "a new subscription", func() bool { return b.Stats().Up })
}

// Close sends what is queued, stops every goroutine, and is safe twice.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	m := miniredis.RunT(t)
	before := runtime.NumGoroutine()
	s := &sink{want: 1}
	other := newBus(t, m.Addr(), s, nil)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b := New(c, Config{Channel: "{t}:placements", Interval: time.Hour}, func(*Record) bool { return true }, nil)
	r := rec(1, 2, 0, 3)
	b.Offer(&r) // waits an hour for company, unless Close sends it
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	waitFor(t, "the queued record, sent at Close", func() bool { return s.len() == 1 })
	other.Close()
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if c.Ping(context.Background()).Err() == nil {
		t.Fatal("the client is still open after Close")
	}
}

// The offer of the request path allocates nothing (BenchmarkOffer).
func BenchmarkOffer(b *testing.B) {
	bus := &Bus{q: make(chan Record, 1<<20)}
	var r Record
	r.Set(make([]uint64, 20))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%(1<<19) == 0 {
			for len(bus.q) > 0 {
				<-bus.q
			}
		}
		bus.Offer(&r)
	}
}

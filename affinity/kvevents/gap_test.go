package kvevents_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/infergate/infergate/affinity/kvevents"
)

// A lost batch is detected by its sequence number and filled from the
// replay socket: the index ends as if nothing was lost.
func TestGapFilledByReplay(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	idx := kvevents.NewIndex(0)
	sub := subscribe(t, idx, "b", s, true)
	warm(t, sub, "b", s)
	lost := text("lost", 60)
	p := blocks(t, s, lost)
	s.Sim.DropKVBatches(1, false) // numbered, kept for replay, not sent
	complete(t, s, lost)
	complete(t, s, text("next", 60)) // its batch reveals the gap
	eventually(t, "the gap replayed", func() bool {
		st, _ := sub.Stats("b")
		return st.Gaps == 1 && st.Replayed == 1
	})
	if n, ok := idx.Match("b", &p); !ok || n != len(p.Hashes) {
		t.Fatalf("after the replay the lost prompt matches %d of %d blocks (known %v)", n, len(p.Hashes), ok)
	}
	if st, _ := sub.Stats("b"); st.Cleared != 0 {
		t.Fatalf("a replayed gap cleared the index: %+v", st)
	}
}

// A gap the replay cannot cover (the publisher no longer has the batch)
// clears the backend's entries and marks it unknown, so routing falls
// back to the approximate index; fresh events make it known again.
func TestGapReplayCannotCoverClears(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	idx := kvevents.NewIndex(0)
	sub := subscribe(t, idx, "b", s, true)
	warm(t, sub, "b", s)
	kept := text("kept", 60)
	p := blocks(t, s, kept)
	complete(t, s, kept)
	eventually(t, "the prompt indexed", func() bool {
		n, ok := idx.Match("b", &p)
		return ok && n == len(p.Hashes)
	})
	s.Sim.DropKVBatches(1, true) // lost for good
	complete(t, s, text("lost", 60))
	complete(t, s, text("reveal", 60))
	eventually(t, "the gap detected and the index cleared", func() bool {
		st, _ := sub.Stats("b")
		return st.Gaps == 1 && st.Cleared == 1
	})
	if _, ok := idx.Match("b", &p); ok {
		t.Fatal("after an uncovered gap the backend is still known")
	}
	if n := idx.Blocks("b"); n > 8 {
		t.Fatalf("after the clear %d blocks indexed; want only the revealing batch's", n)
	}
	fresh := text("fresh", 60)
	q := blocks(t, s, fresh)
	complete(t, s, fresh)
	eventually(t, "known again on fresh events", func() bool {
		n, ok := idx.Match("b", &q)
		return ok && n == len(q.Hashes)
	})
}

// Without a replay socket a gap clears at once.
func TestGapWithoutReplayClears(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	idx := kvevents.NewIndex(0)
	sub := subscribe(t, idx, "b", s, false)
	warm(t, sub, "b", s)
	s.Sim.DropKVBatches(1, false)
	complete(t, s, text("lost", 60))
	complete(t, s, text("reveal", 60))
	eventually(t, "cleared", func() bool {
		st, _ := sub.Stats("b")
		return st.Gaps == 1 && st.Cleared == 1 && st.Replayed == 0
	})
}

// A publisher that dies leaves its backend unknown (routing falls back)
// and the subscriber retrying; nothing panics.
func TestPublisherDies(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	idx := kvevents.NewIndex(0)
	sub := subscribe(t, idx, "b", s, true)
	warm(t, sub, "b", s)
	p := blocks(t, s, "x")
	if _, ok := idx.Match("b", &p); !ok {
		t.Fatal("not known while connected")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Sim.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unknown once the publisher is gone", func() bool {
		_, ok := idx.Match("b", &p)
		return !ok
	})
	eventually(t, "reconnection attempts", func() bool { st, _ := sub.Stats("b"); return st.Connects >= 1 })
}

// hostile is a publisher the test controls frame by frame.
func hostile(t *testing.T) (zmq4.Socket, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx)
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close(); cancel() })
	return pub, "tcp://" + pub.Addr().String()
}

func seqFrame(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

// Garbage on the wire (wrong frame counts, short sequence numbers,
// payloads that are not batches, an oversized frame) is rejected without
// a panic; the backend is never left known with entries it cannot trust.
func TestGarbagePublisher(t *testing.T) {
	t.Parallel()
	pub, ep := hostile(t)
	idx := kvevents.NewIndex(0)
	sub := kvevents.NewSubscriber(idx, kvevents.Config{Limits: kvevents.Limits{MaxFrameBytes: 4096},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, slog.New(slog.DiscardHandler))
	t.Cleanup(sub.Close)
	if err := sub.Add(kvevents.Source{Backend: "b", Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	garbage := [][][]byte{
		{[]byte("t")},
		{[]byte("t"), []byte("short"), []byte{0x90}},
		{[]byte("t"), seqFrame(0), []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},           // array32 of 4G elements
		{[]byte("t"), seqFrame(1), []byte("not msgpack at all")},                   // garbage
		{[]byte("t"), seqFrame(2), append([]byte{0x92, 0xcb}, make([]byte, 8)...)}, // events missing
	}
	deep := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xab}
	deep = append(deep, "BlockStored"...)
	for range 3000 {
		deep = append(deep, 0x91)
	}
	garbage = append(garbage, [][]byte{[]byte("t"), seqFrame(3), deep})
	for i := range 200 {
		for _, g := range garbage {
			_ = pub.Send(zmq4.NewMsgFrom(g...))
		}
		if st, _ := sub.Stats("b"); st.Rejected >= int64(len(garbage)-1) {
			break
		}
		if i == 199 {
			st, _ := sub.Stats("b")
			t.Fatalf("garbage not rejected: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := kvevents.NewPrompt(make([]uint32, 64), 16)
	if _, ok := idx.Match("b", &p); ok {
		t.Fatal("a publisher of garbage left the backend known")
	}
	// A frame over the limit drops the connection; the subscriber comes back.
	before, _ := sub.Stats("b")
	_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(9), make([]byte, 8192)))
	eventually(t, "reconnected after an oversized frame", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(9), make([]byte, 8192)))
		st, _ := sub.Stats("b")
		return st.Connects > before.Connects
	})
}

// A gateway that starts after its engine learns what the engine already
// holds from the replay buffer, without waiting for new traffic.
func TestLateSubscriberLearnsHistory(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	early := text("early", 60)
	p := blocks(t, s, early)
	complete(t, s, early)
	complete(t, s, text("other", 60))
	idx := kvevents.NewIndex(0)
	subscribe(t, idx, "b", s, true)
	eventually(t, "history replayed", func() bool {
		n, ok := idx.Match("b", &p)
		return ok && n == len(p.Hashes)
	})
}

// A restarted engine numbers its batches from 0 again: its cache is
// empty, and the index drops what the old one held.
func TestRestartedEngineClears(t *testing.T) {
	t.Parallel()
	pub, ep := hostile(t)
	idx := kvevents.NewIndex(0)
	sub := kvevents.NewSubscriber(idx, kvevents.Config{BackoffMin: 10 * time.Millisecond}, slog.New(slog.DiscardHandler))
	t.Cleanup(sub.Close)
	if err := sub.Add(kvevents.Source{Backend: "b", Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	// [ts, [["BlockStored", [h], None, [1, 2], 2, None, "GPU", None]]]
	stored := func(h byte) []byte {
		return []byte{0x92, 0x00, 0x91, 0x98, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
			0x91, h, 0xc0, 0x92, 0x01, 0x02, 0x02, 0xc0, 0xa3, 'G', 'P', 'U', 0xc0}
	}
	p := kvevents.NewPrompt([]uint32{1, 2}, 2)
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("the first batches never arrived")
		}
		for seq := range uint64(3) {
			_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(seq), stored(byte(seq+1))))
		}
		if st, _ := sub.Stats("b"); st.LastSeq == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, ok := idx.Match("b", &p); !ok || n != 1 {
		t.Fatalf("before the restart: %d blocks, known %v", n, ok)
	}
	// The restarted engine's first batch removes nothing but is seq 0.
	before, _ := sub.Stats("b")
	_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(0), []byte{0x92, 0x00, 0x90}))
	eventually(t, "the restart seen", func() bool { st, _ := sub.Stats("b"); return st.Restarts > before.Restarts })
	if n := idx.Blocks("b"); n != 0 {
		t.Fatalf("after the restart %d blocks still indexed", n)
	}
}

// The engine's cache reset (vLLM's /reset_prefix_cache) publishes
// AllBlocksCleared: the backend holds nothing afterwards.
func TestCacheResetClears(t *testing.T) {
	t.Parallel()
	s := engine(t, 8192)
	idx := kvevents.NewIndex(0)
	sub := subscribe(t, idx, "b", s, true)
	warm(t, sub, "b", s)
	p := blocks(t, s, text("held", 60))
	complete(t, s, text("held", 60))
	eventually(t, "indexed", func() bool { n, _ := idx.Match("b", &p); return n == len(p.Hashes) })
	post(t, s.URL+"/reset_prefix_cache", map[string]any{}, nil)
	eventually(t, "cleared", func() bool { return idx.Blocks("b") == 0 })
	if n, ok := idx.Match("b", &p); !ok || n != 0 {
		t.Fatalf("after the reset: %d blocks, known %v", n, ok)
	}
}

// A publisher that goes away and comes back (an engine restarted on the
// same address) is followed again from scratch: nothing the old one held
// is still counted.
func TestReconnectStartsOver(t *testing.T) {
	t.Parallel()
	pub, ep := hostile(t)
	idx := kvevents.NewIndex(0)
	sub := kvevents.NewSubscriber(idx, kvevents.Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}, slog.New(slog.DiscardHandler))
	t.Cleanup(sub.Close)
	if err := sub.Add(kvevents.Source{Backend: "b", Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	stored := func(tok byte) []byte {
		return []byte{0x92, 0x00, 0x91, 0x98, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
			0x91, tok, 0xc0, 0x92, tok, tok, 0x02, 0xc0, 0xa3, 'G', 'P', 'U', 0xc0}
	}
	old := kvevents.NewPrompt([]uint32{1, 1}, 2)
	eventually(t, "the old engine's block indexed", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(5), stored(1))) // repeats are duplicates
		n, ok := idx.Match("b", &old)
		return ok && n == 1
	})
	pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	again := zmq4.NewPub(ctx)
	t.Cleanup(func() { again.Close() })
	if err := again.Listen(ep); err != nil {
		t.Skipf("cannot listen on %s again: %v", ep, err)
	}
	fresh := kvevents.NewPrompt([]uint32{2, 2}, 2)
	// Its numbers go on from the old one's (6, 7, ...): no gap, no
	// restart to see in them.
	next := uint64(6)
	eventually(t, "the new engine's block indexed", func() bool {
		_ = again.Send(zmq4.NewMsgFrom([]byte("t"), seqFrame(next), stored(2)))
		next++
		n, ok := idx.Match("b", &fresh)
		return ok && n == 1
	})
	if n, _ := idx.Match("b", &old); n != 0 {
		t.Fatal("the old engine's block is still counted after the reconnection")
	}
}

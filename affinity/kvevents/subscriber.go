package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Source is one backend's event stream.
type Source struct {
	// Backend names the backend in the Index.
	Backend string
	// Endpoint is the engine's PUB socket, tcp://host:port (vLLM's
	// kv-events-config endpoint, with the engine's host for *).
	Endpoint string
	// Replay is its replay (ROUTER) socket, "" when it has none: a gap
	// then clears the backend's entries.
	Replay string
	// Topic filters messages by their first frame's prefix; "" takes all.
	Topic string
}

// Config tunes a Subscriber. The zero value takes the defaults.
type Config struct {
	Limits Limits
	// ReplayTimeout bounds one replay exchange. Default 2s.
	ReplayTimeout time.Duration
	// MaxReplayBatches is the most batches one replay may return before
	// it is abandoned (and the backend cleared). Default 10,000, vLLM's
	// buffer_steps.
	MaxReplayBatches int
	// BackoffMin and BackoffMax bound the wait between connection
	// attempts, doubling from the first to the second. Defaults 100ms, 5s.
	BackoffMin, BackoffMax time.Duration
}

func (c Config) withDefaults() Config {
	c.Limits = c.Limits.withDefaults()
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = 2 * time.Second
	}
	if c.MaxReplayBatches <= 0 {
		c.MaxReplayBatches = 10000
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Second
	}
	return c
}

// Stats are one source's counters.
type Stats struct {
	Batches  int64 // applied
	Gaps     int64 // sequence gaps seen
	Replayed int64 // gaps a replay filled
	Cleared  int64 // gaps no replay covered: the backend's entries dropped
	Rejected int64 // messages that were not a well-formed batch
	Restarts int64 // the publisher's sequence started over
	Connects int64 // connections made
	LastSeq  uint64
}

// Subscriber follows the event streams of a pool's backends into an
// Index: one goroutine per source, each reconnecting with backoff until
// Close.
type Subscriber struct {
	idx    *Index
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	sources map[string]*stream
}

// stream is one source's state, owned by its goroutine but for stats.
type stream struct {
	src   Source
	pub   string // endpoints in the limited transport
	rep   string
	last  uint64
	have  bool // last is set: a batch was applied
	fresh bool // entries were cleared; synchronised again at the next batch in sequence
	// dupFloor is the first sequence number the latest replay applied,
	// or last+1 after a live batch: a live batch from it to last is a
	// duplicate, one below it a restart.
	dupFloor uint64

	batches, gaps, replayed, cleared, rejected, restarts, connects atomic.Int64
	lastSeq                                                        atomic.Uint64
}

// NewSubscriber returns a subscriber feeding idx.
func NewSubscriber(idx *Index, cfg Config, log *slog.Logger) *Subscriber {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	register()
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{idx: idx, cfg: cfg, log: log, ctx: ctx, cancel: cancel, sources: map[string]*stream{}}
}

// Add starts following src. The backend is unknown to the index until
// its first batch arrives.
func (s *Subscriber) Add(src Source) error {
	st := &stream{src: src}
	var err error
	if st.pub, err = endpoint(src.Endpoint, s.cfg.Limits.MaxFrameBytes); err != nil {
		return err
	}
	if src.Replay != "" {
		if st.rep, err = endpoint(src.Replay, s.cfg.Limits.MaxFrameBytes); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return errors.New("kvevents: subscriber closed")
	}
	if _, dup := s.sources[src.Backend]; dup {
		return fmt.Errorf("kvevents: backend %q added twice", src.Backend)
	}
	s.sources[src.Backend] = st
	s.idx.SetSynced(src.Backend, false)
	s.wg.Add(1)
	go s.follow(st)
	return nil
}

// Stats returns backend's counters; false when it is not followed.
func (s *Subscriber) Stats(backend string) (Stats, bool) {
	s.mu.Lock()
	st := s.sources[backend]
	s.mu.Unlock()
	if st == nil {
		return Stats{}, false
	}
	return Stats{Batches: st.batches.Load(), Gaps: st.gaps.Load(), Replayed: st.replayed.Load(), Cleared: st.cleared.Load(),
		Rejected: st.rejected.Load(), Restarts: st.restarts.Load(), Connects: st.connects.Load(), LastSeq: st.lastSeq.Load()}, true
}

// Close stops every stream and waits for them. Safe to call twice.
func (s *Subscriber) Close() {
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
}

// follow connects, reads until the connection fails, and reconnects
// with backoff. While it is not connected the backend is unknown: the
// engine may be evicting blocks it does not hear of.
func (s *Subscriber) follow(st *stream) {
	defer s.wg.Done()
	wait := s.cfg.BackoffMin
	for s.ctx.Err() == nil {
		got, err := s.connect(st)
		s.idx.SetSynced(st.src.Backend, false)
		if s.ctx.Err() != nil {
			return
		}
		if got {
			wait = s.cfg.BackoffMin
		}
		s.log.Warn("kv events: connection lost; the backend routes by the approximate index until it is back",
			"backend", st.src.Backend, "endpoint", st.src.Endpoint, "err", err, "retry_in", wait)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, s.cfg.BackoffMax)
	}
}

// connect runs one connection; got reports whether any message came.
func (s *Subscriber) connect(st *stream) (got bool, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0))
	defer sub.Close()
	if err := sub.Dial(st.pub); err != nil {
		return false, err
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, st.src.Topic); err != nil {
		return false, err
	}
	st.connects.Add(1)
	if st.have {
		// Back after a disconnection: the engine may have restarted (its
		// cache empty, its numbering from 0, and a replay from last+1
		// cannot tell), so start over as a new subscriber: clear, and
		// learn the past from the replay buffer.
		s.idx.Clear(st.src.Backend)
		st.have, st.fresh, st.dupFloor = false, false, 0
	}
	if !st.have && st.rep != "" {
		// A subscriber that starts after its engine learns what it can
		// of the engine's past from the replay buffer (the last 10,000
		// batches): stores it replays are held unless a later batch
		// removed them, and blocks stored before the buffer's start are
		// only missing, never wrongly counted.
		if s.replayHistory(st) {
			s.idx.SetSynced(st.src.Backend, true)
		}
	}
	for {
		m, err := sub.Recv()
		if err != nil {
			return got, err
		}
		got = true
		// The sequence frame is 8 bytes, or 24 where vLLM's snapshot
		// endpoint appends a 16-byte publisher identity.
		if len(m.Frames) != 3 || len(m.Frames[1]) < 8 {
			st.rejected.Add(1)
			continue
		}
		s.receive(st, binary.BigEndian.Uint64(m.Frames[1]), m.Frames[2])
	}
}

// receive handles one live batch: in sequence it is applied; after a gap
// the missing batches are replayed first, or the backend cleared.
func (s *Subscriber) receive(st *stream, seq uint64, payload []byte) {
	name := st.src.Backend
	switch {
	case !st.have:
		// The first batch: what the engine cached before is unknown, but
		// nothing indexed is wrong (only missing), so it counts at once.
	case seq == st.last+1:
	case seq <= st.last && seq >= st.dupFloor:
		// A batch a replay already brought: the live socket delivers it
		// too.
		return
	case seq <= st.last:
		// The sequence started over: a restarted engine, whose cache is
		// empty.
		st.restarts.Add(1)
		s.idx.Clear(name)
	default:
		st.gaps.Add(1)
		if s.replay(st, st.last+1, seq) {
			st.replayed.Add(1)
			if seq <= st.last {
				return // the replay brought it
			}
		} else {
			st.cleared.Add(1)
			s.idx.Clear(name)
			st.fresh = true
			s.log.Warn("kv events: lost batches no replay covers; the backend's entries are cleared",
				"backend", name, "from", st.last+1, "to", seq-1)
		}
	}
	s.apply(st, seq, payload)
	st.dupFloor = seq + 1
}

// apply decodes and applies one batch in sequence.
func (s *Subscriber) apply(st *stream, seq uint64, payload []byte) {
	wasFresh := st.fresh && st.have && seq == st.last+1
	st.last, st.have = seq, true
	st.lastSeq.Store(seq)
	b, err := Decode(payload, s.cfg.Limits)
	if err != nil {
		// A batch that cannot be read is a batch lost: clear rather than
		// keep blocks it may have removed.
		st.rejected.Add(1)
		s.idx.Clear(st.src.Backend)
		st.fresh = true
		return
	}
	s.idx.Apply(st.src.Backend, &b)
	st.batches.Add(1)
	if !st.fresh || wasFresh {
		st.fresh = false
		s.idx.SetSynced(st.src.Backend, true)
	}
}

// replay asks the replay socket for the batches from start and applies
// those before end in order; false when it cannot fill the whole gap.
func (s *Subscriber) replay(st *stream, start, end uint64) bool {
	return s.replayFrom(st, start, end, false)
}

// replayHistory applies every batch the replay buffer holds, from
// whichever it starts with; true when the buffer answered and what it
// holds was contiguous.
func (s *Subscriber) replayHistory(st *stream) bool {
	if !s.replayFrom(st, 0, 0, true) {
		if st.have { // applied some, then a hole: trust none of it
			s.idx.Clear(st.src.Backend)
			st.fresh = true
			st.cleared.Add(1)
		}
		return false
	}
	return true
}

// replayFrom is replay; anywhere accepts a buffer that begins after
// start (the engine's history before it is then unknown, not wrong).
func (s *Subscriber) replayFrom(st *stream, start, end uint64, anywhere bool) bool {
	if st.rep == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0))
	defer d.Close()
	if err := d.Dial(st.rep); err != nil {
		s.log.Warn("kv events: replay", "backend", st.src.Backend, "err", err)
		return false
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], start)
	if err := d.Send(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		return false
	}
	next, first := start, true
	for range s.cfg.MaxReplayBatches + 1 {
		m, err := d.Recv()
		if err != nil {
			s.log.Warn("kv events: replay", "backend", st.src.Backend, "err", err)
			return false
		}
		// [ "", seq, payload ]: the ROUTER's identity frame is gone.
		if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
			st.rejected.Add(1)
			return false
		}
		seq := binary.BigEndian.Uint64(m.Frames[1])
		if seq == ^uint64(0) { // END_SEQ
			return next >= end
		}
		if anywhere && !st.have {
			next = seq // the buffer's first batch starts the history
		}
		switch {
		case seq < next:
			continue
		case seq > next:
			return false // the buffer no longer holds next
		}
		if first {
			st.dupFloor, first = seq, false
		}
		s.apply(st, seq, m.Frames[2])
		next = seq + 1
	}
	return false
}

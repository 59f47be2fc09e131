package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/infergate/infergate/openai"
	"github.com/vmihailenco/msgpack/v5"
)

// KV-cache events as vLLM publishes them with
// --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq",
// "endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}', written
// from vllm/distributed/kv_events.py (vllm-project/vllm at
// b4e69e0af33f4698e157a262cc787fe61983cd3d, the array_like encoding;
// fields after medium as at 0181ea3173e53eea8cf04a86891488e3dc89bb34):
//
//   - the PUB socket sends each batch as three frames: the topic, the
//     sequence number (8 bytes, big-endian, from 0) and the payload;
//   - the payload is msgspec's msgpack of EventBatch, array_like:
//     [ts float64, events, data_parallel_rank] (the rank left out when
//     None, omit_defaults);
//   - each event is a tagged array_like struct, its class name first:
//     ["BlockStored", block_hashes, parent_block_hash, token_ids,
//     block_size, lora_id, medium, lora_name], ["BlockRemoved",
//     block_hashes, medium], ["AllBlocksCleared"];
//   - the ROUTER replay socket takes [identity, "", start seq (8 bytes
//     big-endian)] and answers each buffered batch from that sequence
//     number as [identity, "", seq, payload], then [identity, "", -1 as
//     8 bytes, ""]; it keeps the last 10,000 batches (buffer_steps).

// KVEventsConfig is the simulator's KV-event publisher; off when
// Endpoint is empty.
type KVEventsConfig struct {
	// Endpoint is the PUB socket's address, tcp://host:port; port 0
	// picks a free one (Server.KVEventsAddr tells which). Default off.
	Endpoint string `yaml:"endpoint"`
	// Replay is the ROUTER socket that answers replay requests,
	// tcp://host:port (port 0 as above). Default: none.
	Replay string `yaml:"replay"`
	// Topic is the first frame of every message. Default "" (vLLM's).
	Topic string `yaml:"topic"`
	// BufferSteps is how many batches the replay socket keeps. Default
	// 10000, vLLM's buffer_steps.
	BufferSteps int `yaml:"buffer_steps"`
}

func (k *KVEventsConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&k.Endpoint, "kv-events", k.Endpoint, "publish KV-cache events in vLLM's ZMQ format on this address (tcp://127.0.0.1:PORT; port 0 picks one, logged)")
	fs.StringVar(&k.Replay, "kv-events-replay", k.Replay, "answer KV-event replay requests on this address (tcp://127.0.0.1:PORT)")
	fs.StringVar(&k.Topic, "kv-events-topic", k.Topic, "topic frame of KV-event messages")
}

func (k *KVEventsConfig) validate() error {
	for name, ep := range map[string]string{"kv_events.endpoint": k.Endpoint, "kv_events.replay": k.Replay} {
		if ep != "" && !strings.HasPrefix(ep, "tcp://") {
			return fmt.Errorf("sim: %s: %q is not tcp://host:port", name, ep)
		}
	}
	if k.Replay != "" && k.Endpoint == "" {
		return errors.New("sim: kv_events.replay: needs kv_events.endpoint")
	}
	if k.BufferSteps < 0 {
		return errors.New("sim: kv_events.buffer_steps: must not be negative")
	}
	return nil
}

// kvEvent is one event the engine's prefix cache emits; kind is one of
// the kv* constants.
type kvEvent struct {
	kind      uint8
	hashes    []uint64
	parent    uint64
	hasParent bool
	tokens    []uint32 // BlockStored: the blocks' token ids, in order
}

const (
	kvStored uint8 = iota
	kvRemoved
	kvCleared
)

// kvPublisher sends the engine's events, one batch per engine step, and
// answers replays. The engine loop hands batches over on a bounded
// channel (a full channel drops the batch: a sequence gap the
// subscriber must detect, as with a real engine whose queue overflows).
type kvPublisher struct {
	cfg    KVEventsConfig
	log    *slog.Logger
	pub    zmq4.Socket
	replay zmq4.Socket // nil: no replay endpoint
	in     chan []kvEvent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	buf    []kvBuffered // ring of the last BufferSteps batches, oldest first
	seq    uint64       // the next batch's sequence number
	drop   atomic.Int32 // test hook: batches to number but not send
	forget atomic.Bool  // test hook: dropped batches leave the replay buffer too
}

type kvBuffered struct {
	seq     uint64
	payload []byte
}

func newKVPublisher(cfg KVEventsConfig, log *slog.Logger) (*kvPublisher, error) {
	if cfg.BufferSteps == 0 {
		cfg.BufferSteps = 10000
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &kvPublisher{cfg: cfg, log: log, in: make(chan []kvEvent, 1024), ctx: ctx, cancel: cancel}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		return nil, fmt.Errorf("sim: kv events on %s: %w", cfg.Endpoint, err)
	}
	if cfg.Replay != "" {
		p.replay = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("infergate-sim-replay")))
		if err := p.replay.Listen(cfg.Replay); err != nil {
			p.pub.Close()
			cancel()
			return nil, fmt.Errorf("sim: kv events replay on %s: %w", cfg.Replay, err)
		}
	}
	log.Info("kv events", "endpoint", p.addr(p.pub), "replay", p.addr(p.replay))
	p.wg.Add(1)
	go p.publishLoop()
	if p.replay != nil {
		p.wg.Add(1)
		go p.replayLoop()
	}
	return p, nil
}

func (p *kvPublisher) addr(s zmq4.Socket) string {
	if s == nil || s.Addr() == nil {
		return ""
	}
	return "tcp://" + s.Addr().String()
}

// send hands one step's events to the publisher; never blocks.
func (p *kvPublisher) send(evs []kvEvent) {
	select {
	case p.in <- evs:
	default:
		p.mu.Lock()
		p.seq++ // lost: the subscriber sees the gap
		p.mu.Unlock()
	}
}

func (p *kvPublisher) publishLoop() {
	defer p.wg.Done()
	topic := []byte(p.cfg.Topic)
	for {
		select {
		case <-p.ctx.Done():
			return
		case evs := <-p.in:
			payload := encodeKVBatch(float64(time.Now().UnixNano())/1e9, evs)
			p.mu.Lock()
			seq := p.seq
			p.seq++
			dropped := p.drop.Load() > 0
			if dropped {
				p.drop.Add(-1)
			}
			if !dropped || !p.forget.Load() {
				if len(p.buf) == p.cfg.BufferSteps {
					p.buf = append(p.buf[:0], p.buf[1:]...)
				}
				p.buf = append(p.buf, kvBuffered{seq, payload})
			}
			p.mu.Unlock()
			if dropped {
				continue
			}
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], seq)
			if err := p.pub.Send(zmq4.NewMsgFrom(topic, sb[:], payload)); err != nil && p.ctx.Err() == nil {
				p.log.Warn("kv events: send", "err", err)
			}
		}
	}
}

// replayLoop answers replay requests as vLLM's _service_replay does.
func (p *kvPublisher) replayLoop() {
	defer p.wg.Done()
	end := make([]byte, 8)
	binary.BigEndian.PutUint64(end, ^uint64(0)) // (-1).to_bytes(8, "big", signed=True)
	for {
		m, err := p.replay.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		if len(m.Frames) != 3 || len(m.Frames[2]) != 8 {
			continue // vLLM logs "Invalid replay request" and goes on
		}
		id, start := m.Frames[0], binary.BigEndian.Uint64(m.Frames[2])
		p.mu.Lock()
		var out []kvBuffered
		for _, b := range p.buf {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		p.mu.Unlock()
		for _, b := range out {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], b.seq)
			if p.replay.Send(zmq4.NewMsgFrom(id, nil, sb[:], b.payload)) != nil {
				break
			}
		}
		_ = p.replay.Send(zmq4.NewMsgFrom(id, nil, end, nil))
	}
}

func (p *kvPublisher) close() {
	p.cancel()
	p.pub.Close()
	if p.replay != nil {
		p.replay.Close()
	}
	p.wg.Wait()
}

// encodeKVBatch is msgspec's encoding of a KVEventBatch: array_like
// structs, the tag (class name) first in each event, data_parallel_rank
// left out (None under omit_defaults). Hashes are msgpack integers, as
// vLLM's int block hashes are.
func encodeKVBatch(ts float64, evs []kvEvent) []byte {
	var b strings.Builder
	enc := msgpack.NewEncoder(&b)
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeFloat64(ts)
	_ = enc.EncodeArrayLen(len(evs))
	hashes := func(hs []uint64) {
		_ = enc.EncodeArrayLen(len(hs))
		for _, h := range hs {
			_ = enc.EncodeUint(h)
		}
	}
	for _, e := range evs {
		switch e.kind {
		case kvStored:
			_ = enc.EncodeArrayLen(8)
			_ = enc.EncodeString("BlockStored")
			hashes(e.hashes)
			if e.hasParent {
				_ = enc.EncodeUint(e.parent)
			} else {
				_ = enc.EncodeNil()
			}
			_ = enc.EncodeArrayLen(len(e.tokens))
			for _, t := range e.tokens {
				_ = enc.EncodeUint(uint64(t))
			}
			_ = enc.EncodeInt(int64(len(e.tokens) / max(1, len(e.hashes))))
			_ = enc.EncodeNil()         // lora_id
			_ = enc.EncodeString("GPU") // medium
			_ = enc.EncodeNil()         // lora_name
		case kvRemoved:
			_ = enc.EncodeArrayLen(3)
			_ = enc.EncodeString("BlockRemoved")
			hashes(e.hashes)
			_ = enc.EncodeString("GPU")
		case kvCleared:
			_ = enc.EncodeArrayLen(1)
			_ = enc.EncodeString("AllBlocksCleared")
		}
	}
	return []byte(b.String())
}

// KVEventsAddr is the bound address of the KV-event PUB socket,
// tcp://host:port, "" when off.
func (s *Server) KVEventsAddr() string {
	if s.kv == nil {
		return ""
	}
	return s.kv.addr(s.kv.pub)
}

// KVReplayAddr is the bound address of the replay socket, "" when none.
func (s *Server) KVReplayAddr() string {
	if s.kv == nil {
		return ""
	}
	return s.kv.addr(s.kv.replay)
}

// DropKVBatches makes the publisher number the next n batches but not
// send them, as a subscriber that missed them would see; forget leaves
// them out of the replay buffer too, so a replay cannot cover the gap.
// For tests.
func (s *Server) DropKVBatches(n int, forget bool) {
	if s.kv != nil {
		s.kv.forget.Store(forget)
		s.kv.drop.Add(int32(n))
	}
}

// ResetPrefixCache drops every unused cached block and publishes
// AllBlocksCleared, as vLLM's /reset_prefix_cache does; false when a
// running sequence still uses cached blocks (vLLM refuses then too) or
// prefix caching is off.
func (s *Server) ResetPrefixCache() bool {
	if s.eng == nil || s.eng.cache == nil {
		return false
	}
	done := make(chan bool, 1)
	select {
	case s.eng.control <- func(e *engine) { done <- e.resetCache() }:
	case <-s.eng.done:
		return false
	}
	select {
	case ok := <-done:
		return ok
	case <-s.eng.done:
		return false
	}
}

// blockTokenIDs are the token ids of the prompt block whose chained hash
// is h: the simulator's tokenizer counts tokens but assigns no ids, so
// a block's ids are drawn from its hash. Two prompts that share a block
// (and so everything before it) share its ids, which is all a router
// that matches prompts to cached blocks by token ids relies on.
func blockTokenIDs(dst []uint32, h uint64, n int) []uint32 {
	for j := range n {
		dst = append(dst, uint32(mix(h, uint64(j))%151936)) // a Qwen-sized vocabulary
	}
	return dst
}

// kvStored records that block i of a prompt whose block hashes are
// hashes was stored; consecutive blocks of one prompt stored in one step
// join one BlockStored, as vLLM's cache_full_blocks emits them.
func (e *engine) kvStored(hashes []uint64, i int) {
	bs := e.cfg.BlockSize
	if n := len(e.kvPending); n > 0 && i > 0 {
		last := &e.kvPending[n-1]
		if last.kind == kvStored && last.hashes[len(last.hashes)-1] == hashes[i-1] {
			last.hashes = append(last.hashes, hashes[i])
			last.tokens = blockTokenIDs(last.tokens, hashes[i], bs)
			return
		}
	}
	ev := kvEvent{kind: kvStored, hashes: []uint64{hashes[i]}, tokens: blockTokenIDs(nil, hashes[i], bs)}
	if i > 0 {
		ev.parent, ev.hasParent = hashes[i-1], true
	}
	e.kvPending = append(e.kvPending, ev)
}

// kvRemoved records an evicted block; evictions in one step join one
// BlockRemoved.
func (e *engine) kvRemoved(h uint64) {
	if n := len(e.kvPending); n > 0 && e.kvPending[n-1].kind == kvRemoved {
		e.kvPending[n-1].hashes = append(e.kvPending[n-1].hashes, h)
		return
	}
	e.kvPending = append(e.kvPending, kvEvent{kind: kvRemoved, hashes: []uint64{h}})
}

// kvFlush sends the step's events as one batch.
func (e *engine) kvFlush() {
	if e.kv == nil || len(e.kvPending) == 0 {
		return
	}
	e.kv.send(e.kvPending)
	e.kvPending = nil
}

// resetCache drops every cached block when none is in use, and records
// AllBlocksCleared.
func (e *engine) resetCache() bool {
	if len(e.cache.blocks) != e.cache.idle {
		return false
	}
	for {
		if _, ok := e.cache.evict(); !ok {
			break
		}
		e.freeBlocks++
	}
	if e.kv != nil {
		e.kvPending = append(e.kvPending, kvEvent{kind: kvCleared})
	}
	return true
}

// tokenIDs are the n token ids /tokenize answers for r: each full block
// the prefix cache would name carries the ids its BlockStored event
// carries (blockTokenIDs), the rest are drawn from the last block's hash.
func (s *Server) tokenIDs(r *openai.Request, n int) []uint32 {
	bs := s.cfg.Engine.BlockSize
	out := make([]uint32, 0, n)
	var last uint64
	if bs > 0 {
		for _, h := range promptBlocks(s.tok, r, bs) {
			if len(out)+bs > n {
				break
			}
			out = blockTokenIDs(out, h, bs)
			last = h
		}
	}
	return blockTokenIDs(out, mix(last, 0x7a11), n-len(out))
}

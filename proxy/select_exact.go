package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/affinity/kvevents"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/openai"
)

// Exact mode of selection prefix: the backends' engines say what they
// hold, through their KV-cache events (vLLM's --kv-events-config, ZMQ),
// instead of the index guessing it from where prompts went. A request
// costs one /tokenize round trip to a backend before it is routed (the
// index matches blocks by token ids in the engine's tokenisation); when
// that fails, or any candidate's event stream is not synchronised (not
// connected yet, a gap no replay filled, a publisher gone), the request is
// routed by the approximate index, which keeps learning in exact mode so
// it is warm to fall back on.

// ExactConfig is prefix.exact. The zero value is off.
type ExactConfig struct {
	// Enabled turns exact mode on: the backends with kv_events are
	// followed, and prompts tokenised before routing. Default false.
	Enabled bool `yaml:"enabled"`
	// TokenizeTimeout bounds the /tokenize round trip; past it the
	// request is routed by the approximate index. Default 200ms.
	TokenizeTimeout time.Duration `yaml:"tokenize_timeout"`
	// MaxBlocks bounds the blocks indexed per backend, about 64 bytes
	// each (kvevents.BytesPerBlock). Default 131072 (8 MiB a backend).
	MaxBlocks int `yaml:"max_blocks"`
	// MaxFrameBytes bounds one event message; a larger one drops the
	// connection. Default 4 MiB.
	MaxFrameBytes int `yaml:"max_frame_bytes"`
	// Topic filters the engines' messages by topic prefix (vLLM's
	// kv-events-config topic). Default "": all.
	Topic string `yaml:"topic"`
}

func (e *ExactConfig) defaults() {
	setDefault(&e.TokenizeTimeout, 200*time.Millisecond)
	setDefault(&e.MaxBlocks, kvevents.DefaultMaxBlocks)
	setDefault(&e.MaxFrameBytes, 4<<20)
}

// validateExact checks prefix.exact and the backends' kv_events and
// kv_replay.
func (p PoolConfig) validateExact(at string) error {
	e := p.Prefix.Exact
	followed := 0
	for i, b := range p.Backends {
		bat := fmt.Sprintf("%s.backends[%d]", at, i)
		for _, f := range []struct{ name, ep string }{{"kv_events", b.KVEvents}, {"kv_replay", b.KVReplay}} {
			if f.ep != "" && !validTCPEndpoint(f.ep) {
				return fmt.Errorf("%s.%s: %q is not tcp://host:port", bat, f.name, f.ep)
			}
		}
		if b.KVReplay != "" && b.KVEvents == "" {
			return fmt.Errorf("%s.kv_replay: needs kv_events", bat)
		}
		if b.KVEvents != "" {
			followed++
		}
	}
	switch {
	case !e.Enabled && followed > 0:
		return fmt.Errorf("%s.backends: kv_events set but %s.prefix.exact.enabled is false", at, at)
	case !e.Enabled:
		return nil
	case p.Selection != PrefixPolicy:
		return fmt.Errorf("%s.prefix.exact: needs selection prefix, not %q", at, p.Selection)
	case followed == 0:
		return fmt.Errorf("%s.prefix.exact: no backend has kv_events", at)
	case e.TokenizeTimeout <= 0 || e.MaxBlocks < 64 || e.MaxBlocks > 1<<26 || e.MaxFrameBytes < 1024:
		return fmt.Errorf("%s.prefix.exact: tokenize_timeout must be positive, max_blocks between 64 and 67108864, max_frame_bytes at least 1024", at)
	}
	return nil
}

func validTCPEndpoint(ep string) bool {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return false
	}
	host, port, ok := strings.Cut(rest, ":")
	return ok && host != "" && host != "*" && port != ""
}

// exactIndex is a pool's exact mode: the index its backends' events
// fill, and the subscriber following them.
type exactIndex struct {
	cfg   ExactConfig
	idx   *kvevents.Index
	sub   *kvevents.Subscriber
	names []string      // by pool position: the backend's name in idx, "" when not followed
	rr    atomic.Uint64 // spreads the tokenize calls
	// Counts for /admin and the closing note: requests matched exactly,
	// and those that fell back (by cause).
	matched, noTokens, unsynced atomic.Int64
	// A backend's /tokenize that fails (no such route, a timeout) is not
	// asked again before skipUntil (unix ns): a request does not wait
	// out a failing round trip only to be routed approximately anyway.
	skipUntil atomic.Int64
	lastWarn  atomic.Int64
	log       *slog.Logger
}

// tokenizeBackoff is how long exact mode routes approximately, without
// asking, after a /tokenize failed.
const tokenizeBackoff = time.Second

// newExactIndex starts following the backends of pc that have
// kv_events; nil when exact mode is off.
func newExactIndex(pc PoolConfig, log *slog.Logger) (*exactIndex, error) {
	e := pc.Prefix.Exact
	if !e.Enabled {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x := &exactIndex{cfg: e, idx: kvevents.NewIndex(e.MaxBlocks), names: make([]string, len(pc.Backends)), log: log}
	x.sub = kvevents.NewSubscriber(x.idx, kvevents.Config{Limits: kvevents.Limits{MaxFrameBytes: e.MaxFrameBytes}}, log)
	for i, b := range pc.Backends {
		if b.KVEvents == "" {
			continue
		}
		x.names[i] = b.URL
		if err := x.sub.Add(kvevents.Source{Backend: b.URL, Endpoint: b.KVEvents, Replay: b.KVReplay, Topic: e.Topic}); err != nil {
			x.sub.Close()
			return nil, fmt.Errorf("backends[%d].kv_events: %w", i, err)
		}
	}
	return x, nil
}

func (x *exactIndex) close() {
	if x != nil {
		x.sub.Close()
	}
}

var (
	errNoTokens        = errors.New("proxy: no token ids from /tokenize")
	errTokenizeBackend = errors.New("proxy: /tokenize failed")
)

// tokenize asks an available backend of p for body's token ids and
// writes the prompt's blocks, as the index names them, into k. Any
// failure leaves k without them: the request is routed approximately.
func (x *exactIndex) tokenize(p *pool, body []byte, k *affinity.Key) {
	k.Exact = nil
	bs := 0
	for _, name := range x.names {
		if name != "" {
			if bs = x.idx.BlockSize(name); bs > 0 {
				break
			}
		}
	}
	if bs == 0 {
		x.noTokens.Add(1)
		return // no engine has said its block size yet
	}
	now := time.Now()
	if now.UnixNano() < x.skipUntil.Load() {
		x.noTokens.Add(1)
		return
	}
	ids, err := x.tokenIDs(p, body)
	if err != nil {
		x.noTokens.Add(1)
		if errors.Is(err, errTokenizeBackend) {
			x.skipUntil.Store(now.Add(tokenizeBackoff).UnixNano())
			warnEvery(&x.lastWarn, now, x.log, "exact routing: /tokenize failed; routing by the approximate index", "err", err)
		}
		return
	}
	pr := kvevents.NewPrompt(ids, bs)
	k.Exact = &affinity.ExactBlocks{BlockSize: bs, Hashes: pr.Hashes}
}

// tokenIDs posts the request's prompt to /tokenize (vLLM's and SGLang's
// form; the simulator answers it alike) on the next available backend.
func (x *exactIndex) tokenIDs(p *pool, body []byte) ([]uint32, error) {
	var req struct {
		Model    string          `json:"model"`
		Messages json.RawMessage `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
		Prompt   json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	tb := openai.AppendJSONString([]byte(`{"model":`), req.Model)
	switch {
	case len(req.Messages) > 0:
		tb = append(append(tb, `,"add_generation_prompt":true,"messages":`...), req.Messages...)
		if len(req.Tools) > 0 {
			tb = append(append(tb, `,"tools":`...), req.Tools...)
		}
	case len(req.Prompt) > 0:
		tb = append(append(tb, `,"prompt":`...), req.Prompt...)
	default:
		return nil, errNoTokens
	}
	tb = append(tb, '}')
	now := time.Now()
	n := len(p.backends)
	start := int(x.rr.Add(1))
	for i := range n {
		b := p.backends[(start+i)%n]
		if !b.Available(now) {
			continue
		}
		var r struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := b.countCall("/tokenize", tb, x.cfg.TokenizeTimeout, &r); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errTokenizeBackend, b.name, err)
		}
		if len(r.Tokens) == 0 {
			return nil, fmt.Errorf("%w: %s: %w", errTokenizeBackend, b.name, errNoTokens)
		}
		return r.Tokens, nil
	}
	return nil, ErrNoBackend
}

// match fills s.matched from the exact index: true when the request has
// token blocks and every candidate's stream is synchronised; false, and
// s.matched untouched, to use the approximate index.
func (x *exactIndex) match(s *pick) bool {
	k := s.key
	if k == nil || k.Exact == nil || len(k.Exact.Hashes) == 0 {
		return false
	}
	p := kvevents.Prompt{BlockSize: k.Exact.BlockSize, Hashes: k.Exact.Hashes}
	var m [affinity.MaxBackends]int
	for _, i := range s.pos {
		name := x.names[i]
		if name == "" {
			x.unsynced.Add(1)
			return false
		}
		n, ok := x.idx.Match(name, &p)
		if !ok {
			x.unsynced.Add(1)
			return false
		}
		m[i%affinity.MaxBackends] = n
	}
	s.matched = m
	x.matched.Add(1)
	return true
}

// matchExact is the exact index's match for s when it covers the pick.
func (x *prefixSelector) matchExact(s *pick) bool {
	return x.exact != nil && x.exact.match(s)
}

// warmAny fills s.matched, from the exact index when it covers the pick
// (else the approximate one), and reports whether any candidate holds a
// block of k.
func (x *prefixSelector) warmAny(s *pick, k *affinity.Key) bool {
	if !x.matchExact(s) {
		return x.index.Match(k, s.candidateSet(), &s.matched) != 0
	}
	for _, i := range s.pos {
		if s.matched[i%affinity.MaxBackends] > 0 {
			return true
		}
	}
	return false
}

// state is backend name's event stream for /admin/stats; nil when exact
// mode is off or does not follow it.
func (x *exactIndex) state(name string) *adminapi.BackendExact {
	if x == nil {
		return nil
	}
	st, ok := x.sub.Stats(name)
	if !ok {
		return nil
	}
	return &adminapi.BackendExact{Synced: x.idx.Synced(name), Blocks: x.idx.Blocks(name), Batches: st.Batches, Gaps: st.Gaps,
		Replayed: st.Replayed, Cleared: st.Cleared, Rejected: st.Rejected, Restarts: st.Restarts, Connects: st.Connects, LastSeq: st.LastSeq}
}

package proxy

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/affinity/share"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// prefixSelector is selection prefix: a request that names its
// conversation goes to the backend that served it last (the session
// table), a prompt to the backend expected to hold the longest part of
// it in its prefix cache (by the index of where earlier prompts went),
// either unless that backend is saturated (the spill guard, then by
// load); a new session, and a prompt no backend holds, go where a
// rendezvous hash of its key or its first block says among the backends
// not overloaded (place); a request without a prompt as selection load.
type prefixSelector struct {
	loadSelector
	cfg      PrefixConfig
	index    *affinity.Index
	sessions *affinity.Sessions // nil: prefix.sessions -1
	// bus, when it holds one, shares what the index and the session
	// table learn with the other replicas (share.go); poolID names the
	// pool there.
	bus    *atomic.Pointer[share.Bus]
	poolID uint64
	// exact, when set, is the engines' own account of their caches
	// (select_exact.go), preferred to the index when it covers a pick.
	exact *exactIndex
}

func newPrefixSelector(name string, pc PoolConfig) *prefixSelector {
	x := &prefixSelector{loadSelector: loadSelector{cfg: pc.Load}, cfg: pc.Prefix, index: affinity.NewIndex(pc.Prefix.IndexEntries),
		poolID: share.PoolID(name, pc.Prefix.BlockBytes)}
	if pc.Prefix.Sessions > 0 {
		x.sessions = affinity.NewSessions(pc.Prefix.Sessions)
	}
	return x
}

// Sessions is the pool's session table, nil when sessions are off: what
// another gateway replica's records are learnt into.
func (x *prefixSelector) Sessions() *affinity.Sessions { return x.sessions }

// key writes the prefix key of a request into k: its prompt's blocks
// and the session it names (by its body, or a header of hdr).
func (x *prefixSelector) key(hdr *fasthttp.RequestHeader, body []byte, env *openai.Envelope, k *affinity.Key) {
	var h affinity.Hasher
	h.Reset(k, x.cfg.BlockBytes, x.cfg.MaxPrefixBytes/x.cfg.BlockBytes)
	h.Request(body, env)
	if x.sessions == nil {
		return
	}
	var vals [8][]byte // prefix.session_headers has at most 8
	opt := affinity.SessionOptions{Headers: vals[:0], User: x.cfg.SessionUser}
	if hdr != nil {
		for _, name := range x.cfg.SessionHeaders {
			opt.Headers = append(opt.Headers, hdr.Peek(name))
		}
	}
	k.Session = affinity.SessionOf(body, env, opt)
}

// Select implements selector.
func (x *prefixSelector) Select(s *pick) (int, reason) {
	x.estimate(s)
	s.blocks = 0
	s.matched = [affinity.MaxBackends]int{}
	k := s.key
	if k == nil {
		return cheapest(s, x.rr.Add(1), false), reasonLoad
	}
	ses := k.Session
	if x.sessions == nil {
		ses = affinity.Session{}
	}
	if ses.Key != 0 {
		c, why, known := x.session(s, ses)
		switch {
		case why == reasonSessionSticky:
			return c, why
		case !known:
			// A new session is placed by its key, not by the index:
			// conversations that share a system prompt spread over the
			// fleet (the index would send them all to the prompt's
			// home until the guard trips), and every replica places it
			// alike without talking.
			c = x.place(s, ses.Key, -1)
			x.blocksOf(s, c)
			return c, reasonSessionNew
		}
		// Its backend is saturated (c) or out of selection (-1): the
		// next its key ranks within the bound, which every replica that
		// moves it picks alike.
		c = x.place(s, ses.Key, c)
		x.blocksOf(s, c)
		return c, reasonSessionMoved
	}
	if k.Len() == 0 {
		return cheapest(s, x.rr.Add(1), false), reasonLoad
	}
	why := reasonCold
	if x.warmAny(s, k) {
		warm, m := -1, 0
		for c, i := range s.pos {
			n := s.matched[i%affinity.MaxBackends]
			if n > m || (n == m && n > 0 && s.loadOf(c) < s.loadOf(warm)) {
				warm, m = c, n
			}
		}
		if why = x.spill(s, warm); why == reasonWarm {
			s.blocks = m
			return warm, why
		}
	}
	var c int
	if why == reasonCold {
		c = x.place(s, k.First(), -1)
	} else { // a spill: by load
		c = cheapest(s, k.First(), true)
	}
	s.blocks = s.matched[s.pos[c]%affinity.MaxBackends]
	return c, why
}

// candidateSet is the pick's candidates as the index's bit set.
func (s *pick) candidateSet() uint64 {
	var set uint64
	for _, i := range s.pos {
		set |= 1 << (uint(i) % affinity.MaxBackends)
	}
	return set
}

// find returns the candidate whose id (its URL's hash) is id, -1 when
// none is: the backend is out of selection or already tried.
func (s *pick) find(id uint64) int {
	for c, b := range s.cands {
		if b.nameHash == id {
			return c
		}
	}
	return -1
}

// session picks for a session the table knows: reasonSessionSticky and
// its backend, unless that backend is out of the candidates (known, c
// -1) or the spill guard trips (known, c the saturated candidate), and
// the caller places it anew. A continued stored response
// (previous_response_id) stays with the backend that wrote it whatever
// its load: no other backend has it.
func (x *prefixSelector) session(s *pick, ses affinity.Session) (c int, why reason, known bool) {
	if ses.Response != 0 && ses.Response != ses.Key {
		if id, ok := x.sessions.Lookup(ses.Response); ok {
			if c = s.find(id); c >= 0 {
				x.blocksOf(s, c)
				return c, reasonSessionSticky, true
			}
		}
	}
	id, ok := x.sessions.Lookup(ses.Key)
	if !ok {
		return -1, 0, false
	}
	if c = s.find(id); c < 0 {
		return -1, 0, true
	}
	if ses.Source != affinity.SessionPreviousResponse && x.spill(s, c) != reasonWarm {
		return c, 0, true
	}
	x.blocksOf(s, c)
	return c, reasonSessionSticky, true
}

// learnResponse records that backend b stored the Responses answer
// whose id's xxhash is sum: a request continuing it
// (previous_response_id) goes there.
func (x *prefixSelector) learnResponse(sum uint64, b *backend) {
	if x.sessions != nil {
		h := affinity.ResponseSession(sum)
		x.sessions.Learn(h, b.nameHash)
		if x.bus != nil {
			x.share(b, h, nil)
		}
	}
}

// responseIDSum is the xxhash of a Responses body's id, 0 for none.
func responseIDSum(body []byte) uint64 {
	if id := openai.ResponseID(body); id != nil {
		return xxhash.Sum64(id)
	}
	return 0
}

// blocksOf sets s.blocks to the prompt's blocks the index expects
// candidate c to hold.
func (x *prefixSelector) blocksOf(s *pick, c int) {
	if x.exact != nil && x.exact.match(s) {
		s.blocks = s.matched[s.pos[c]%affinity.MaxBackends]
		return
	}
	if k := s.key; k.Len() > 0 {
		i := s.pos[c]
		x.index.Match(k, 1<<(uint(i)%affinity.MaxBackends), &s.matched)
		s.blocks = s.matched[i%affinity.MaxBackends]
	}
}

// spill is the guard on the warm candidate: reasonWarm to take it, else
// why not. A spill costs a whole prefill elsewhere: only worth it when
// another backend is clearly better off, or a fleet that is queueing
// everywhere thrashes every cache at once.
func (x *prefixSelector) spill(s *pick, warm int) reason {
	minLoad, minWaiting, minKV := math.Inf(1), math.Inf(1), math.Inf(1)
	for c, e := range s.est {
		minLoad = min(minLoad, s.loadOf(c))
		if !math.IsNaN(e.waiting) {
			minWaiting = min(minWaiting, e.waiting)
		}
		if !math.IsNaN(e.kv) {
			minKV = min(minKV, e.kv)
		}
	}
	e, g := s.est[warm], &x.cfg
	switch {
	case e.waiting >= g.SpillWaiting && e.waiting-minWaiting >= g.SpillWaiting:
		return reasonSpillQueue
	case e.kv >= g.SpillKVUsage && minKV < g.SpillKVUsage:
		return reasonSpillKV
	case s.loadOf(warm)-minLoad >= float64(g.SpillImbalance) && g.SpillImbalance > 0:
		return reasonSpillImbalance
	}
	return reasonWarm
}

// placed implements placer: the index learns that the prompt went to
// candidate c, the session table that its session did (so a session
// that moved stays), and c's counts the blocks routed to it and those it
// was expected to hold. What this taught the index or the table (c was
// not expected to hold the whole prompt; the session is new here or
// moved) is offered to the other replicas: a record copied onto the
// bus's queue, no call to Redis, no allocation.
func (x *prefixSelector) placed(s *pick, c int, why reason) {
	k := s.key
	if k == nil {
		return
	}
	b := s.cands[c]
	if k.Blocks > 0 {
		x.index.Add(k, s.pos[c])
		b.promptBlocks.Add(int64(k.Blocks))
		b.expectedBlocks.Add(int64(s.blocks))
	}
	var ses uint64
	if x.sessions != nil && k.Session.Key != 0 {
		x.sessions.Learn(k.Session.Key, b.nameHash)
		ses = k.Session.Key
	}
	if x.bus == nil {
		return
	}
	prefixNews := k.Len() > 0 && s.blocks < k.BlocksAt(k.Len()-1)
	if prefixNews || (ses != 0 && why != reasonSessionSticky) {
		x.share(b, ses, k.Hashes())
	}
}

// share offers the other replicas a record: the session ses (0: none)
// and the checkpoints hashes went to b. Nothing when no bus runs.
func (x *prefixSelector) share(b *backend, ses uint64, hashes []uint64) {
	if bus := x.bus.Load(); bus != nil {
		r := share.Record{Pool: x.poolID, Backend: b.nameHash, Session: ses}
		r.Set(hashes)
		bus.Offer(&r)
	}
}

// learn applies another replica's record on backend b, at position i
// here: its checkpoints to the index, its session to the table.
func (x *prefixSelector) learn(r *share.Record, b *backend, i int) {
	x.index.AddHashes(r.Checkpoints(), i)
	if r.Session != 0 && x.sessions != nil {
		x.sessions.Learn(r.Session, b.nameHash)
	}
}

// state fills in what selection prefix knows of b, for /admin/stats.
func (x *prefixSelector) state(b *backend, last *loadReading, bs *adminapi.BackendState) {
	bs.Selection = PrefixPolicy
	p := &adminapi.BackendPrefix{RoutedBlocks: b.promptBlocks.Load(), ExpectedBlocks: b.expectedBlocks.Load(),
		PromptTokens: b.usagePrompt.Load(), CachedTokens: b.usageCached.Load()}
	p.ExpectedRatio = ratio(p.ExpectedBlocks, p.RoutedBlocks)
	p.ReportedRatio = ratio(p.CachedTokens, p.PromptTokens)
	if last != nil && last.prefixQueries > 0 {
		r := last.prefHit / last.prefixQueries
		p.BackendRatio = &r
	}
	bs.Prefix = p
	p.Exact = x.exact.state(b.name)
}

func ratio(a, b int64) *float64 {
	if b <= 0 {
		return nil
	}
	r := float64(a) / float64(b)
	return &r
}

// observePrefix registers, for the pools of selection prefix, each
// backend's prompt blocks routed and expected, and its cached tokens.
func (g *Gateway) observePrefix(meter metric.Meter) error {
	in := instruments{meter: meter}
	blocks := in.counter("infergate.prefix.blocks", "{block}", "Prompt blocks routed to each backend by selection prefix (kind routed), and those the index expected it to hold (kind expected).")
	usage := in.counter("infergate.backend.usage_prompt_tokens", "{token}", "Prompt tokens of each backend's answers that reported cached tokens (kind prompt), and those cached (kind cached): the hit ratio the backend reports.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		for _, p := range g.state.Load().pools {
			if p.prefix == nil {
				continue
			}
			for _, b := range p.backends {
				kind := func(k string) metric.ObserveOption { return backendAttrs(p, b, attribute.String("kind", k)) }
				o.ObserveInt64(blocks, b.promptBlocks.Load(), kind("routed"))
				o.ObserveInt64(blocks, b.expectedBlocks.Load(), kind("expected"))
				o.ObserveInt64(usage, b.usagePrompt.Load(), kind("prompt"))
				o.ObserveInt64(usage, b.usageCached.Load(), kind("cached"))
			}
		}
		return nil
	})
}

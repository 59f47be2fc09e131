package proxy

import (
	"context"
	"math"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// prefixSelector is selection prefix: a prompt goes to the backend
// expected to hold the longest part of it in its prefix cache (by the
// index of where earlier prompts went), unless that backend is saturated
// (the spill guard); otherwise, and for a request without a prompt, as
// selection load.
type prefixSelector struct {
	loadSelector
	cfg   PrefixConfig
	index *affinity.Index
}

func newPrefixSelector(pc PoolConfig) *prefixSelector {
	return &prefixSelector{loadSelector: loadSelector{cfg: pc.Load}, cfg: pc.Prefix, index: affinity.NewIndex(pc.Prefix.IndexEntries)}
}

// key writes the prefix key of a request body into k.
func (x *prefixSelector) key(body []byte, env *openai.Envelope, k *affinity.Key) {
	var h affinity.Hasher
	h.Reset(k, x.cfg.BlockBytes, x.cfg.MaxPrefixBytes/x.cfg.BlockBytes)
	h.Request(body, env)
}

// Select implements selector.
func (x *prefixSelector) Select(s *pick) (int, reason) {
	x.estimate(s)
	s.blocks = 0
	k := s.key
	if k == nil || k.Len() == 0 {
		return cheapest(s, x.rr.Add(1), false), reasonLoad
	}
	var set uint64
	for _, i := range s.pos {
		set |= 1 << (uint(i) % affinity.MaxBackends)
	}
	s.matched = [affinity.MaxBackends]int{}
	why := reasonCold
	if x.index.Match(k, set, &s.matched) != 0 {
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
	c := cheapest(s, k.First(), true)
	s.blocks = s.matched[s.pos[c]%affinity.MaxBackends]
	return c, why
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
// candidate c, and c's counts the blocks routed to it and those it was
// expected to hold.
func (x *prefixSelector) placed(s *pick, c int) {
	if k := s.key; k != nil && k.Blocks > 0 {
		x.index.Add(k, s.pos[c])
		b := s.cands[c]
		b.promptBlocks.Add(int64(k.Blocks))
		b.expectedBlocks.Add(int64(s.blocks))
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

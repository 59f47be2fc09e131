package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// Mirroring (DESIGN: the request path): after the primary was admitted, a
// sampled copy goes to a candidate pool on its own connections and under
// its own cap; the candidate's answer is read in full on its own
// goroutine, timed the same way, and the two answers make a pair
// (pairs.go). The primary never waits for the copy and nothing the
// candidate does reaches it: a full cap drops the copy, a slow, failing or
// silent candidate only makes its half of the pair late or failed.

var defaultRefusals = []string{"i can't help", "i cannot help", "i can't assist", "i cannot assist", "i'm sorry, but", "i am sorry, but", "i'm unable to", "i am unable to", "as an ai"}

func (m *MirrorConfig) defaults() {
	for i := range m.Rules {
		r := &m.Rules[i]
		setDefault(&r.Name, fmt.Sprintf("mirror-%d", i))
		setDefault(&r.Sample, 1)
		setDefault(&r.MaxInFlight, 64)
	}
	rec := &m.Record
	setDefault(&rec.MaxBytes, 64<<20)
	setDefault(&rec.Keep, 3)
	setDefault(&rec.Output, "full")
	setDefault(&rec.MaxOutputBytes, 16<<10)
	setDefault(&rec.Recent, 1000)
	if rec.RefusalPatterns == nil {
		rec.RefusalPatterns = defaultRefusals
	}
}

func (m *MirrorConfig) validate(pools map[string]PoolConfig) error {
	names := map[string]bool{}
	for i, r := range m.Rules {
		at := fmt.Sprintf("mirror.rules[%d]", i)
		if _, ok := pools[r.Pool]; !ok {
			return fmt.Errorf("%s.pool: no pool named %q", at, r.Pool)
		}
		if r.Sample < 0 || r.Sample > 1 || math.IsNaN(r.Sample) {
			return fmt.Errorf("%s.sample: %v is not in [0, 1]", at, r.Sample)
		}
		if r.MaxInFlight < 1 {
			return fmt.Errorf("%s.max_in_flight: must be positive", at)
		}
		if names[r.Name] {
			return fmt.Errorf("%s.name: %q is used twice", at, r.Name)
		}
		names[r.Name] = true
		for k, v := range r.Overrides.Fields {
			if k == "model" {
				return fmt.Errorf("%s.overrides.fields.model: use overrides.model", at)
			}
			if _, err := json.Marshal(v); err != nil {
				return fmt.Errorf("%s.overrides.fields.%s: %w", at, k, err)
			}
		}
	}
	if sp := m.Split; sp != nil {
		if _, ok := pools[sp.Pool]; !ok {
			return fmt.Errorf("mirror.split.pool: no pool named %q", sp.Pool)
		}
		if sp.Weight < 0 || sp.Weight > 1 || math.IsNaN(sp.Weight) {
			return fmt.Errorf("mirror.split.weight: %v is not in [0, 1]", sp.Weight)
		}
		if h, ok := strings.CutPrefix(sp.Sticky, "header:"); sp.Sticky != "" && sp.Sticky != "tenant" && (!ok || h == "") {
			return fmt.Errorf("mirror.split.sticky: %q is not tenant or header:NAME", sp.Sticky)
		}
	}
	rec := m.Record
	switch rec.Output {
	case "full", "hash", "none":
	default:
		return fmt.Errorf("mirror.record.output: %q is not full, hash or none", rec.Output)
	}
	if rec.MaxBytes < 1 || rec.Keep < 0 || rec.MaxOutputBytes < 0 || rec.Recent < 0 {
		return errors.New("mirror.record: max_bytes must be positive; keep, max_output_bytes and recent not negative")
	}
	return nil
}

// mirrorRule is a rule made live.
type mirrorRule struct {
	name      string
	pool      *Pool
	threshold uint64 // a request is sampled when the hash of its id is below
	all       bool   // sample 1
	models    []string
	tenants   []string
	paths     []string
	headers   [][2]string
	overrides []member // applied to the copy, in order
	applied   map[string]any
	aa        bool // also the A/A copy to the primary's pool
	sem       chan struct{}
}

type member struct {
	name  string
	value []byte
}

func newMirrorRule(r MirrorRule, pool *Pool) *mirrorRule {
	m := &mirrorRule{name: r.Name, pool: pool, all: r.Sample >= 1, models: sorted(r.Match.Models), tenants: sorted(r.Match.Tenants),
		paths: sorted(r.Match.Paths), sem: make(chan struct{}, r.MaxInFlight), applied: map[string]any{}, aa: r.AA}
	m.threshold = uint64(r.Sample * math.MaxUint64)
	for k, v := range r.Match.Headers {
		m.headers = append(m.headers, [2]string{k, v})
	}
	if r.Overrides.Model != "" {
		q, _ := json.Marshal(r.Overrides.Model)
		m.overrides = append(m.overrides, member{"model", q})
		m.applied["model"] = r.Overrides.Model
	}
	for _, k := range slices.Sorted(maps.Keys(r.Overrides.Fields)) {
		q, _ := json.Marshal(r.Overrides.Fields[k]) // validate checked it
		m.overrides = append(m.overrides, member{k, q})
		m.applied[k] = r.Overrides.Fields[k]
	}
	return m
}

func sorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Sorted(slices.Values(s))
}

func in(s []string, v string) bool {
	if s == nil {
		return true
	}
	_, ok := slices.BinarySearch(s, v)
	return ok
}

// fnv is FNV-1a of s, its bits then mixed (MurmurHash3's finalizer) so
// that keys differing in their last byte ("user-1", "user-2") spread
// over the whole range the thresholds cut: the same on every replica and
// in every run.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// splitRule is the canary made live.
type splitRule struct {
	pool      *Pool
	threshold uint64
	header    string // sticky by this header's value
	tenant    bool   // sticky by tenant
	model     string
	match     mirrorRule // its match fields only
}

func newSplitRule(r *SplitRule, pool *Pool) *splitRule {
	s := &splitRule{pool: pool, threshold: uint64(r.Weight * math.MaxUint64), model: r.Model,
		match: mirrorRule{models: sorted(r.Match.Models), tenants: sorted(r.Match.Tenants), paths: sorted(r.Match.Paths)}}
	if r.Weight >= 1 {
		s.threshold = math.MaxUint64
	}
	for k, v := range r.Match.Headers {
		s.match.headers = append(s.match.headers, [2]string{k, v})
	}
	s.tenant = r.Sticky == "tenant"
	s.header, _ = strings.CutPrefix(r.Sticky, "header:")
	return s
}

// arm tells which arm serves the request: true for the candidate. A
// request without the sticky key falls back to its id.
func (s *splitRule) candidate(x *exchange, rc *fasthttp.RequestCtx) bool {
	key := x.id
	switch {
	case s.tenant:
		key = x.tenant
	case s.header != "":
		if v := rc.Request.Header.Peek(s.header); len(v) > 0 {
			key = string(v)
		}
	}
	return fnv(key) < s.threshold
}

// split routes a request of the canary's match to one arm, and marks it
// to be recorded. It runs before admission, so the candidate's caps
// hold for the requests it serves.
func (x *exchange) split(rc *fasthttp.RequestCtx) {
	s := x.st.split
	if s == nil || !s.match.matches(x, rc) {
		return
	}
	p := &pair{Pair: Pair{Time: time.Now().UTC(), ID: x.id, Rule: "split", Model: x.model, Path: x.path, Tenant: x.tenant, Stream: x.stream, Split: "primary"},
		maxOutput: x.st.cfg.Server.MaxResponseBytes}
	if s.candidate(x, rc) {
		p.Split = "candidate"
		x.route = &route{pool: s.pool, upstreamModel: s.model}
		if s.model != "" {
			p.Overrides = map[string]any{"model": s.model}
		}
	}
	p.pending.Store(1)
	x.pair = p
}

// sampled reports whether request id falls in the rule's sample, by a
// hash of the id that does not change between runs (FNV-1a), so a replay
// that sends the same ids copies the same requests.
func (m *mirrorRule) sampled(id string) bool {
	return m.all || fnv(id) < m.threshold
}

func (m *mirrorRule) matches(x *exchange, rc *fasthttp.RequestCtx) bool {
	if !in(m.models, x.model) || !in(m.tenants, x.tenant) || !in(m.paths, x.path) {
		return false
	}
	for _, h := range m.headers {
		if string(rc.Request.Header.Peek(h[0])) != h[1] {
			return false
		}
	}
	return true
}

// copyBody is the body the candidate gets: the primary's with the rule's
// overrides.
func (m *mirrorRule) copyBody(body []byte) []byte {
	if len(m.overrides) == 0 {
		return bytes.Clone(body)
	}
	out := body
	for _, o := range m.overrides {
		out = openai.SetMember(out, o.name, o.value)
	}
	return out
}

// mirror starts the copy of an admitted request, when a rule takes it.
// body is what the primary's backend gets.
func (x *exchange) mirror(rc *fasthttp.RequestCtx, body []byte) {
	if x.pair != nil {
		return // a canary request: recorded as one arm, not mirrored
	}
	for _, m := range x.st.mirrors {
		if !m.matches(x, rc) || !m.sampled(x.id) {
			continue
		}
		select {
		case m.sem <- struct{}{}:
		default:
			x.g.pairs.dropped(m.name, "cap_full")
			return
		}
		p := newPair(x, m)
		p.JSONAsked = asksJSON(body)
		if p.JSONAsked {
			p.schema = schemaOf(body)
		}
		p.prompt = lastUserText(body)
		x.pair = p
		path := x.rawPath + x.query
		t := x.st.cfg.Timeouts
		// The copies' context: timeouts.total, and ended with the primary
		// when its client goes away (pairs.go, primaryDone).
		p.ctx, p.stop = context.WithTimeout(x.g.base, t.Total)
		if m.aa {
			// The noise floor: the primary's own request once more, to its
			// own pool, when the rule's cap has room for it too.
			select {
			case m.sem <- struct{}{}:
				p.Noise = &Arm{}
				p.pending.Add(1)
				go x.g.runArm(p, p.Noise, m, x.route.pool, x.copyRequest(bytes.Clone(body)), path, t)
			default:
				x.g.pairs.dropped(m.name, "aa_cap_full")
			}
		}
		go x.g.runArm(p, &p.Candidate, m, m.pool, x.copyRequest(m.copyBody(body)), path, t)
		return
	}
}

// copyRequest is a request for a mirrored copy with body.
func (x *exchange) copyRequest(body []byte) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Request-Id", x.id)
	req.SetBody(body)
	return req
}

// runArm sends a copy to a pool (the candidate's, or the primary's for
// the A/A arm) and reads its answer in full into a, on its own goroutine.
func (g *Gateway) runArm(p *pair, a *Arm, m *mirrorRule, pool *Pool, req *fasthttp.Request, path string, t Timeouts) {
	defer func() { <-m.sem }()
	defer fasthttp.ReleaseRequest(req)
	defer func() {
		if v := recover(); v != nil {
			g.recovered(panicMirror, v, p.ID)
			a.Error = fmt.Sprint("panic: ", v)
			p.done(g)
		}
	}()
	ctx := p.ctx
	b, done, err := pool.pick(nil, time.Now())
	if err != nil {
		a.Error = err.Error()
		p.done(g)
		return
	}
	b.outstanding.Add(1)
	defer b.outstanding.Add(-1)
	a.Backend = b.name
	b.target(req, path, "")
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	ok := readArm(ctx, b, req, p.Stream, t, a, p.maxOutput)
	b.settle(done, ok)
	p.done(g)
}

// asksJSON reports whether a request's response_format asks for JSON
// (json_object, or json_schema).
func asksJSON(body []byte) bool {
	asked := false
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if !openai.KeyIs(key, "response_format") {
			return true
		}
		v := f.Of(body)
		openai.EachMember(v, func(k []byte, tf openai.Field) bool {
			if openai.KeyIs(k, "type") {
				t, _ := openai.Unquote(tf.Of(v))
				asked = t == "json_object" || t == "json_schema"
			}
			return true
		})
		return true
	})
	return asked
}

// lastUserText is the text of a chat request's last user message (its
// text parts joined), for the judge.
func lastUserText(body []byte) []byte {
	var text []byte
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if !openai.KeyIs(key, "messages") {
			return true
		}
		arr := f.Of(body)
		openai.EachElement(arr, func(sp openai.Span) bool {
			m := arr[sp.Start:sp.End]
			user := false
			var content []byte
			openai.EachMember(m, func(k []byte, mf openai.Field) bool {
				switch {
				case openai.KeyIs(k, "role"):
					user = string(mf.Of(m)) == `"user"`
				case openai.KeyIs(k, "content"):
					content = mf.Of(m)
				}
				return true
			})
			if user && len(content) > 0 {
				text = text[:0]
				if content[0] == '"' {
					s, _ := openai.Unquote(content)
					text = append(text, s...)
				} else {
					text = openai.AppendContent(text, content) // the parts' text
				}
			}
			return true
		})
		return false
	})
	return text
}

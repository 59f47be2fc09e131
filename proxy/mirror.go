package proxy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The mirror tap (DESIGN: the request path). After the primary was
// admitted, the live rules (package mirror) say whether a sampled copy
// goes to a candidate pool; the tap starts a flight and one goroutine
// for the copy, and returns. On the primary's goroutine it does only
// what decides: match, sample, the rule's cap. The copy's body is cloned
// and rewritten on the copy's goroutine, from the upstream request the
// primary already built (held until both have read it), and the request
// is parsed and the answers judged on the recorder's. The primary never
// waits for the copy and nothing the candidate does reaches it: a full
// cap drops the copy, a slow, failing or silent candidate only makes its
// half of the pair late or failed.

// tapRule is a mirror rule made live, with its candidate pool.
type tapRule struct {
	rule *mirror.LiveRule
	pool *pool
}

// tapSplit is the canary made live, with its candidate pool.
type tapSplit struct {
	split *mirror.LiveSplit
	pool  *pool
}

// heldRequest is the primary's upstream request while a copy still
// reads its body: whichever of the two lets go last releases it.
type heldRequest struct {
	req  *fasthttp.Request
	refs atomic.Int32
	// The copy to start once the primary's request is sent: its pair
	// and rule, set by mirror, and started, which the first startCopy
	// takes.
	flight  *mirror.Flight
	tap     tapRule
	started atomic.Bool
}

func (h *heldRequest) release() {
	if h.refs.Add(-1) == 0 {
		fasthttp.ReleaseRequest(h.req)
	}
}

func (x *exchange) mirrorRequest(rc *fasthttp.RequestCtx) mirror.Request {
	return mirror.Request{ID: x.id, Model: x.model, Tenant: x.tenant, Path: x.path, Header: func(name string) []byte { return rc.Request.Header.Peek(name) }}
}

func (x *exchange) meta() mirror.Meta {
	return mirror.Meta{ID: x.id, Model: x.model, Path: x.path, Tenant: x.tenant, Stream: x.stream}
}

// split routes a request of the canary's match to one arm, and marks it
// to be recorded. It runs before admission, so the candidate's caps
// hold for the requests it serves.
func (x *exchange) split(rc *fasthttp.RequestCtx) {
	s := x.st.split
	r := x.mirrorRequest(rc)
	if !s.split.Matches(&r) {
		return
	}
	cand := s.split.Candidate(&r)
	x.pair = x.g.pairs.StartSplit(cand, s.split.Model(), x.meta())
	if cand {
		x.route = &route{pool: s.pool, upstreamModel: s.split.Model()}
	}
}

// mirror starts the copy of an admitted request, when a rule takes it.
func (x *exchange) mirror(rc *fasthttp.RequestCtx) {
	if x.pair != nil {
		return // a canary request: recorded as one arm, not mirrored
	}
	r := x.mirrorRequest(rc)
	for _, t := range x.st.mirrors {
		if !t.rule.Takes(&r) {
			continue
		}
		if !t.rule.Acquire() {
			x.g.pairs.Dropped(t.rule.Name(), "cap_full")
			return
		}
		f := x.g.pairs.Start(t.rule, x.meta())
		// The copies' context: timeouts.total, and ended with the primary
		// when its client goes away (primaryDone).
		f.Ctx, f.Stop = context.WithTimeout(x.g.base, x.st.cfg.Timeouts.Total)
		x.pair = f
		x.held = &heldRequest{req: x.ureq, flight: f, tap: t}
		x.held.refs.Store(2)
		// The copy starts once the primary's request is on its way to its
		// backend (startCopy): a goroutine started here would wake a
		// thread and run beside the primary, on a small machine in its
		// place, before the primary's bytes left.
		return
	}
}

// startCopy starts the request's mirrored copy, when one waits: once
// the primary's request is written to its backend (Sent), or as the
// request finishes when it never was (no backend, a refused connection),
// so a copy is made whatever becomes of the primary, as before. Only the
// first call starts it.
func (x *exchange) startCopy() {
	h := x.held
	if h == nil || !h.started.CompareAndSwap(false, true) {
		return
	}
	go x.g.runCopies(h.flight, h.tap, x.route.pool, h, x.rawPath+x.query, x.st.cfg.Timeouts, x.st.cfg.Server.MaxResponseBytes)
}

// runCopies makes the copy's body from the primary's and sends it to the
// candidate (and, with the rule's aa, once more to the primary's pool).
func (g *Gateway) runCopies(f *mirror.Flight, t tapRule, primary *pool, held *heldRequest, path string, to Timeouts, maxBody int) {
	f.Body = bytes.Clone(held.req.Body())
	held.release()
	if t.rule.AA() {
		// The noise floor: the primary's own request once more, to its
		// own pool, when the rule's cap has room for it too.
		if t.rule.Acquire() {
			n := f.AddNoise()
			go g.runArm(f, n, t.rule, primary, f.Body, path, to, maxBody)
		} else {
			g.pairs.Dropped(t.rule.Name(), "aa_cap_full")
		}
	}
	g.runArm(f, &f.Candidate, t.rule, t.pool, t.rule.Copy(f.Body), path, to, maxBody)
}

// runArm sends body to a pool (the candidate's, or the primary's for
// the A/A arm) and reads its answer in full into a.
func (g *Gateway) runArm(f *mirror.Flight, a *mirror.Answer, rule *mirror.LiveRule, pool *pool, body []byte, path string, t Timeouts, maxBody int) {
	defer rule.Release()
	defer func() {
		if v := recover(); v != nil {
			g.recovered(panicMirror, v, f.Meta().ID)
			a.Error = fmt.Sprint("panic: ", v)
			f.Done()
		}
	}()
	b, done, _, _, err := pool.pick(nil, time.Now(), nil)
	if err != nil {
		a.Error = err.Error()
		f.Done()
		return
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Request-Id", f.Meta().ID)
	req.SetBodyRaw(body)
	b.outstanding.Add(1)
	defer b.outstanding.Add(-1)
	a.Backend = b.name
	b.target(req, path, "")
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	ok := readArm(f.Ctx, b, req, f.Meta().Stream, path == openai.ResponsesPath, t, a, maxBody)
	b.settle(done, ok)
	f.Done()
}

// observeMirror registers the pairs recorded, the copies dropped or in
// flight, and the pairs the file lost.
func (g *Gateway) observeMirror(meter metric.Meter) error {
	in := instruments{meter: meter}
	pairs := in.counter("infergate.mirror.pairs", "{pair}", "Mirrored pairs (and canary records) recorded.")
	dropped := in.counter("infergate.mirror.dropped", "{copy}", "Mirrored copies dropped, by rule and reason (cap_full: the rule's max_in_flight; aa_cap_full: the A/A copy; lost: the recorder was behind).")
	fileLost := in.counter("infergate.mirror.file_lost", "{pair}", "Pairs the pairs file could not take (a write error: a full disk, the file removed); the file is reopened and recording goes on.")
	inFlight := in.gauge("infergate.mirror.in_flight", "{copy}", "Mirrored copies waiting for their answers.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		ps := g.pairs.Counts()
		o.ObserveInt64(fileLost, ps.FileLost)
		o.ObserveInt64(pairs, ps.Recorded)
		for k, n := range ps.Dropped {
			rule, why, _ := strings.Cut(k, " ")
			o.ObserveInt64(dropped, n, metric.WithAttributes(attribute.String("rule", rule), attribute.String("reason", why)))
		}
		if ps.Lost > 0 {
			o.ObserveInt64(dropped, ps.Lost, metric.WithAttributes(attribute.String("rule", ""), attribute.String("reason", "lost")))
		}
		o.ObserveInt64(inFlight, int64(g.MirrorsInFlight()))
		return nil
	})
}

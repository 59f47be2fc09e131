package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/infergate/infergate/shaping"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Admission: before a backend is picked, every request asks the limiter
// for a slot under the caps of its tenant, pool and model (DESIGN: the
// request path). It may wait in the limiter's queue; a client that leaves
// meanwhile cancels the wait through the request's context.

// tokenBudget is what a request may hold of a token cap: its prompt as
// the policy counted it, else estimated at 4 bytes of body per token
// (cl100k's average for English), plus the output it may ask for (the
// limit the backend gets, else the configured default). The prompt's
// count is kept for the backend's load (x.promptTokens).
func (x *exchange) tokenBudget(body []byte) int64 {
	out := int64(x.pol.MaxTokens)
	if out <= 0 {
		out = int64(x.askedOut)
	}
	if out <= 0 {
		out = x.st.cfg.Shaping.DefaultOutputTokens
	}
	in := int64(x.pol.InputTokens)
	if in == 0 {
		in = int64(len(body) / 4)
	}
	x.promptTokens = in
	return in + out
}

// admit waits for the request's slot. On success the permit is the
// exchange's until finishWith releases it.
func (x *exchange) admit(rc *fasthttp.RequestCtx, body []byte) error {
	g := x.g
	r := shaping.Request{Tenant: x.tenant, Pool: x.route.pool.name, Model: x.model, Tokens: x.tokenBudget(body), Class: x.cls.class}
	x.tl.Asked = time.Now()
	p, err := g.lim.Acquire(&x.ctx, r)
	x.tl.Admitted = time.Now()
	if err != nil {
		if errors.Is(err, shaping.ErrQueueFull) || errors.Is(err, shaping.ErrQueueTimeout) || errors.Is(err, shaping.ErrSharedDown) || errors.Is(err, shaping.ErrShed) {
			return fmt.Errorf("%w: %w", errShed, err)
		}
		// The wait ended with the request: the client left, or the total
		// timeout passed.
		if c := x.ctx.Cause(); c != nil {
			return c
		}
		return err
	}
	x.permit = p
	if x.cls.on {
		x.armPreempt()
	}
	return nil
}

// observeShaping registers the limiter's queue, slots, caps and refusals.
func (g *Gateway) observeShaping(meter metric.Meter) error {
	in := instruments{meter: meter}
	queued := in.gauge("infergate.queue.depth", "{request}", "Requests waiting for a slot.")
	inFlight := in.gauge("infergate.shaping.in_flight", "", "Requests and tokens holding a slot, by cap (level, name, unit).")
	limits := in.gauge("infergate.shaping.limit", "", "Each cap's limit, by cap (level, name, unit); 0 when that unit is not capped.")
	rejected := in.counter("infergate.shaping.rejections", "{request}", "Requests refused by admission control, by reason.")
	admitted := in.counter("infergate.shaping.admitted", "{request}", "Requests given a slot.")
	abandoned := in.counter("infergate.shaping.queue_abandoned", "{request}", "Requests whose client left while they waited.")
	redisUp := in.gauge("infergate.shaping.redis_up", "", "1 while the shared caps' Redis answers (only with shaping.redis).")
	redisDown := in.counter("infergate.shaping.redis_down", "", "Times Redis was found down and the caps fell back (on_failure).")
	reason := func(r string) metric.ObserveOption {
		return metric.WithAttributes(attribute.String("reason", r))
	}
	return in.register(func(_ context.Context, o metric.Observer) error {
		s := g.lim.Stats()
		o.ObserveInt64(queued, int64(s.Waiting))
		o.ObserveInt64(admitted, s.Admitted)
		o.ObserveInt64(abandoned, s.Cancelled)
		o.ObserveInt64(rejected, s.RejectedFull-s.RejectedFullTenant, reason("queue_full"))
		o.ObserveInt64(rejected, s.RejectedTimeout-s.RejectedTimeoutTenant, reason("queue_timeout"))
		o.ObserveInt64(rejected, s.RejectedFullTenant, reason("tenant_queue_full"))
		o.ObserveInt64(rejected, s.RejectedTimeoutTenant, reason("tenant_queue_timeout"))
		if s.Shared {
			up := int64(0)
			if s.SharedUp {
				up = 1
			}
			o.ObserveInt64(redisUp, up)
			o.ObserveInt64(redisDown, s.SharedDownTransitions)
			o.ObserveInt64(rejected, s.RejectedShared, reason("redis_down"))
		}
		for _, cp := range g.lim.Caps() {
			at := func(unit string) metric.ObserveOption {
				return metric.WithAttributes(attribute.String("level", cp.Level), attribute.String("name", cp.Name), attribute.String("unit", unit))
			}
			o.ObserveInt64(inFlight, cp.Requests, at("requests"))
			o.ObserveInt64(inFlight, cp.Tokens, at("tokens"))
			o.ObserveInt64(limits, cp.MaxRequests, at("requests"))
			o.ObserveInt64(limits, cp.MaxTokens, at("tokens"))
		}
		return nil
	})
}

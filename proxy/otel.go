package proxy

import (
	"context"
	"strings"

	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Option changes how New builds a gateway.
type Option func(*Gateway)

// WithSpanProcessor hands the gateway's spans to sp too, besides the
// exporter tracing: in the configuration names (tests record spans with
// an in-memory one). The gateway shuts it down with its tracer.
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return func(g *Gateway) { g.spanProcessors = append(g.spanProcessors, sp) }
}

var traceContext = propagation.TraceContext{}

// headerCarrier lets the W3C propagator read and write fasthttp headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// beginSpan decides the request's span context at its receipt,
// continuing the client's traceparent; the span itself is built when the
// request has ended (endSpan). Only with a tracer.
func (x *exchange) beginSpan(rc *fasthttp.RequestCtx) {
	tr := x.g.tracer
	if tr == nil {
		return
	}
	// Most requests carry no traceparent: the propagator runs only for
	// those that do.
	if len(rc.Request.Header.Peek("Traceparent")) > 0 {
		x.parent = trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier{&rc.Request.Header}))
	}
	x.sc = tr.Begin(x.parent)
}

// injectSpan puts the request's span into the upstream request's
// traceparent, so the backend's spans nest under it.
func (x *exchange) injectSpan(h *fasthttp.RequestHeader) {
	if !x.sc.IsValid() {
		return
	}
	// The client's own traceparent (in whatever case it came) gives way
	// to ours, which continues it.
	var drop []string
	for k := range h.All() {
		if strings.EqualFold(string(k), "traceparent") || strings.EqualFold(string(k), "tracestate") {
			drop = append(drop, string(k))
		}
	}
	for _, k := range drop {
		h.Del(k)
	}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), x.sc), headerCarrier{h})
}

// operation is gen_ai.operation.name of the request.
func (x *exchange) operation() string {
	if x.path == completionsPath {
		return "text_completion"
	}
	return "chat"
}

// endSpan builds the request's spans from its timeline.
func (x *exchange) endSpan() {
	if !x.sc.IsValid() {
		return
	}
	r := tracing.RequestSpans{Operation: x.operation(), Model: x.model, Status: x.status, Outcome: x.outcome, Stream: x.stream}
	if x.route != nil {
		r.UpstreamModel = x.route.upstreamModel
	}
	if x.backend != nil {
		r.Backend = x.backend.host
	}
	if x.routeWhy != "" {
		r.Route = x.routeWhy
	}
	x.g.tracer.End(x.parent, x.sc, &x.tl, r)
}

package proxy

import (
	"context"
	"strings"

	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Option changes how New builds a gateway.
type Option func(*Gateway)

// WithTracerProvider sends the gateway's spans to tp instead of the
// provider tracing: in the configuration describes (tests use an
// in-memory one). The caller shuts tp down.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(g *Gateway) { g.tracer = tp.Tracer("github.com/infergate/infergate/proxy") }
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

// startSpan opens the request's span at its receipt, continuing the
// client's traceparent. Only with a tracer.
func (x *exchange) startSpan(ctx *fasthttp.RequestCtx) {
	tr := x.g.tracer
	if tr == nil {
		return
	}
	parent := traceContext.Extract(context.Background(), headerCarrier{&ctx.Request.Header})
	_, x.span = tr.Start(parent, x.operation(), trace.WithTimestamp(x.tl.Received), trace.WithSpanKind(trace.SpanKindServer))
}

// injectSpan puts the request's span into the upstream request's
// traceparent, so the backend's spans nest under it.
func (x *exchange) injectSpan(h *fasthttp.RequestHeader) {
	if x.span == nil || !x.span.SpanContext().IsValid() {
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
	traceContext.Inject(trace.ContextWithSpan(context.Background(), x.span), headerCarrier{h})
}

// operation is gen_ai.operation.name of the request.
func (x *exchange) operation() string {
	if x.path == "/v1/completions" {
		return "text_completion"
	}
	return "chat"
}

// endSpan closes the request's span from its timeline.
func (x *exchange) endSpan() {
	if x.span == nil {
		return
	}
	r := tracing.RequestSpans{Operation: x.operation(), Model: x.model, Status: x.status, Outcome: x.outcome, Stream: x.stream}
	if x.route != nil {
		r.UpstreamModel = x.route.upstreamModel
	}
	if x.backend != nil {
		r.Backend = x.backend.host
	}
	tracing.EndSpans(x.g.tracer, x.span, &x.tl, r)
	x.span = nil
}

package tracing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TraceConfig sends a span per request to an OpenTelemetry collector. The
// zero value sends nothing.
type TraceConfig struct {
	// Exporter is "none" (default), "stdout" (for debugging), "otlp-http"
	// or "otlp-grpc".
	Exporter string `yaml:"exporter"`
	// Endpoint is the collector's host:port; empty takes the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.
	Endpoint string `yaml:"endpoint"`
	// Insecure sends OTLP without TLS.
	Insecure bool `yaml:"insecure"`
	// SampleRatio is the share of new traces recorded; a request that
	// arrives with a traceparent follows its parent's decision. Default 1.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is service.name of the spans. Default "infergate".
	ServiceName string `yaml:"service_name"`
}

// Defaults fills in zero values.
func (c *TraceConfig) Defaults() {
	if c.Exporter == "" {
		c.Exporter = "none"
	}
	if c.SampleRatio == 0 {
		c.SampleRatio = 1
	}
	if c.ServiceName == "" {
		c.ServiceName = "infergate"
	}
}

// Validate names the first invalid field.
func (c *TraceConfig) Validate() error {
	switch c.Exporter {
	case "none", "stdout", "otlp-http", "otlp-grpc":
	default:
		return fmt.Errorf("tracing.exporter %q: want none, stdout, otlp-http or otlp-grpc", c.Exporter)
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return errors.New("tracing.sample_ratio: must be within 0 and 1")
	}
	return nil
}

// Tracer sends a span per request. The request path only decides the
// request's span context (Begin: new IDs, the sampling decision) and
// passes it upstream; the spans are built when the request has ended
// (End), off the request path, with the IDs decided at its start,
// straight from the timeline as finished spans (no live span is kept for
// a request, so none of the SDK's span machinery runs), and exported in
// batches through the SDK's exporters. Safe for concurrent use.
type Tracer struct {
	ratio float64 // of new traces sampled
	res   *resource.Resource
	scope instrumentation.Scope
	batch *spanBatcher // nil without an exporter
	extra []sdktrace.SpanProcessor
}

// NewTracer builds the tracer cfg describes, exporting in batches, with
// extra span processors besides (tests record spans so). It returns nil,
// and no error, when there is nothing to send to. Shutdown flushes.
func NewTracer(ctx context.Context, cfg TraceConfig, extra ...sdktrace.SpanProcessor) (*Tracer, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Exporter {
	case "none":
		if len(extra) == 0 {
			return nil, nil
		}
	case "stdout":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
	case "otlp-http":
		exp, err = otlptracehttp.New(ctx, otlpOptions(cfg.Endpoint, cfg.Insecure, otlptracehttp.WithEndpoint, otlptracehttp.WithInsecure)...)
	case "otlp-grpc":
		exp, err = otlptracegrpc.New(ctx, otlpOptions(cfg.Endpoint, cfg.Insecure, otlptracegrpc.WithEndpoint, otlptracegrpc.WithInsecure)...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %s exporter: %w", cfg.Exporter, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	t := &Tracer{ratio: cfg.SampleRatio, res: res, extra: extra,
		scope: instrumentation.Scope{Name: "github.com/infergate/infergate/proxy"}}
	if exp != nil {
		t.batch = newSpanBatcher(exp)
	}
	return t, nil
}

// Shutdown flushes the spans still batched and stops the exporter and the
// extra processors.
func (t *Tracer) Shutdown(ctx context.Context) error {
	var errs []error
	if t.batch != nil {
		errs = append(errs, t.batch.shutdown(ctx))
	}
	for _, sp := range t.extra {
		errs = append(errs, sp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Dropped counts spans dropped because the exporter was behind.
func (t *Tracer) Dropped() int64 {
	if t.batch == nil {
		return 0
	}
	return t.batch.dropped.Load()
}

// Begin decides a request's span context at its receipt: a child of
// parent (the client's traceparent; invalid for none) or a new trace, with
// the sampler's decision, which End's real span will repeat.
func (t *Tracer) Begin(parent trace.SpanContext) trace.SpanContext {
	tid := parent.TraceID()
	if !parent.IsValid() {
		tid = randomTraceID()
	}
	// The provider's sampler, ParentBased(TraceIDRatioBased(ratio)),
	// decided here as it decides (sdk/trace/sampling.go), without its
	// call chain on the request path; TestBeginDecidesWhatEndBuilds holds
	// the two together.
	var flags trace.TraceFlags
	switch {
	case parent.IsValid():
		flags = parent.TraceFlags() & trace.FlagsSampled
	case t.ratio >= 1 || t.ratio > 0 && binary.BigEndian.Uint64(tid[8:16])>>1 < uint64(t.ratio*(1<<63)):
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: randomSpanID(), TraceFlags: flags, TraceState: parent.TraceState()})
}

func randomTraceID() (id trace.TraceID) {
	binary.BigEndian.PutUint64(id[:8], rand.Uint64())
	binary.BigEndian.PutUint64(id[8:], rand.Uint64()|1) // never all zero
	return id
}

func randomSpanID() (id trace.SpanID) {
	binary.BigEndian.PutUint64(id[:], rand.Uint64()|1)
	return id
}

// RequestSpans are what a request's span reports, beyond its timeline.
type RequestSpans struct {
	Operation, Model, UpstreamModel string
	Backend                         string // host:port of the backend
	Status                          int
	Outcome                         string // "ok", or the error.type
	Stream                          bool
	// Route is why the backend was chosen (selection load and prefix:
	// "prefix_warm", "prefix_spill_queue", ...), "" for the others.
	Route string
}

// End builds the spans of a finished request begun as sc under parent:
// the root span from receipt to done with the GenAI attributes, a child
// span for the queue and one for the upstream call, an event at the first
// token. Nothing is built for a request that is not sampled.
func (t *Tracer) End(parent, sc trace.SpanContext, tl *Timeline, r RequestSpans) {
	if !sc.IsSampled() {
		return
	}
	name := r.Operation
	if r.Model != "" {
		name += " " + r.Model
	}
	// Room for every attribute below: the slice never grows.
	attrs := make([]attribute.KeyValue, 0, 32)
	attrs = append(attrs,
		attribute.String("gen_ai.operation.name", r.Operation),
		attribute.String("gen_ai.request.model", r.Model),
		attribute.Int("http.response.status_code", r.Status),
		attribute.Bool("infergate.stream", r.Stream),
	)
	if r.UpstreamModel != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", r.UpstreamModel))
	}
	if r.Backend != "" {
		attrs = append(attrs, attribute.String("server.address", r.Backend))
	}
	if r.Route != "" {
		attrs = append(attrs, attribute.String("infergate.route.reason", r.Route))
	}
	if tl.PromptTokens > 0 || tl.OutputTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", tl.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", tl.OutputTokens))
	}
	if tl.CachedReported {
		attrs = append(attrs, attribute.Int("gen_ai.usage.cache_read.input_tokens", tl.CachedTokens))
	}
	if tl.FinishReason != "" {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{tl.FinishReason}))
	}
	if p := tl.Policy; p != (PolicyNote{}) {
		attrs = append(attrs, attribute.Int("infergate.policy.input_tokens", p.InputTokens),
			attribute.Int("infergate.policy.trimmed_tokens", p.TrimmedTokens),
			attribute.Int("infergate.policy.trimmed_messages", p.TrimmedMessages))
		if p.MaxTokens > 0 {
			attrs = append(attrs, attribute.Int("infergate.policy.max_tokens", p.MaxTokens),
				attribute.Int("infergate.policy.requested_max_tokens", p.RequestedMaxTokens),
				attribute.Bool("infergate.policy.length_by_policy", tl.LengthByPolicy()))
		}
	}
	var status sdktrace.Status
	if r.Outcome != "" && r.Outcome != "ok" {
		attrs = append(attrs, attribute.String("error.type", r.Outcome))
		status = sdktrace.Status{Code: codes.Error, Description: r.Outcome}
	}
	a := tl.Attribute(tl.Done)
	attrs = append(attrs, attribute.Float64("infergate.queue_ms", msOf(a.Queue)), attribute.Float64("infergate.gateway_ms", msOf(a.Gateway)),
		attribute.Float64("infergate.network_ms", msOf(a.Network)), attribute.Float64("infergate.model_ttft_ms", msOf(a.ModelTTFT)),
		attribute.Float64("infergate.decode_ms", msOf(a.Decode)))
	if b := a.Backend; b.Source != "" {
		attrs = append(attrs, attribute.String("infergate.backend.source", b.Source))
		for _, f := range [...]struct {
			key string
			d   time.Duration
		}{{"infergate.backend.queue_ms", b.Queue}, {"infergate.backend.prefill_ms", b.Prefill}, {"infergate.backend.decode_ms", b.Decode}} {
			if f.d >= 0 {
				attrs = append(attrs, attribute.Float64(f.key, msOf(f.d)))
			}
		}
	}
	root := &finishedSpan{name: name, spanContext: sc, parent: parent, spanKind: trace.SpanKindServer,
		start: tl.Received, end: tl.Done, attributes: attrs, status: status, resource: t.res, scope: t.scope}
	if !tl.FirstTokenOut.IsZero() {
		root.events = []sdktrace.Event{{Name: "gen_ai.first_token", Time: tl.FirstTokenOut}}
	}
	child := func(name string, kind trace.SpanKind, start, end time.Time, attrs []attribute.KeyValue) {
		root.childSpanCount++
		t.emit(&finishedSpan{name: name, spanContext: sc.WithSpanID(randomSpanID()).WithRemote(false), parent: sc, spanKind: kind,
			start: start, end: end, attributes: attrs, resource: t.res, scope: t.scope})
	}
	// A queue span only for a request that waited: a microsecond of
	// admission is no queue, and a span costs what the request did.
	if tl.QueueWait() >= 100*time.Microsecond {
		child("queue", trace.SpanKindInternal, tl.Admitted.Add(-tl.QueueWait()), tl.Admitted, nil)
	}
	if !tl.UpstreamStart.IsZero() {
		end := tl.LastTokenIn
		if end.IsZero() {
			end = tl.Done
		}
		child("upstream", trace.SpanKindClient, tl.UpstreamStart, end,
			[]attribute.KeyValue{attribute.String("server.address", r.Backend), attribute.Int("infergate.attempts", tl.Attempts)})
	}
	t.emit(root)
}

// emit hands a finished span to the exporter's batch and the processors.
func (t *Tracer) emit(ro sdktrace.ReadOnlySpan) {
	for _, sp := range t.extra {
		sp.OnEnd(ro)
	}
	if t.batch != nil {
		t.batch.add(ro)
	}
}

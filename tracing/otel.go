package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
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

// NewTracerProvider builds the provider cfg describes, exporting in
// batches; nil (and no error) for "none". Shut it down to flush.
func NewTracerProvider(ctx context.Context, cfg TraceConfig) (*sdktrace.TracerProvider, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Exporter {
	case "none":
		return nil, nil
	case "stdout":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
	case "otlp-http":
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case "otlp-grpc":
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %s exporter: %w", cfg.Exporter, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	), nil
}

// RequestSpans are what a request's span reports, beyond its timeline.
type RequestSpans struct {
	Operation, Model, UpstreamModel string
	Backend                         string // host:port of the backend
	Status                          int
	Outcome                         string // "ok", or the error.type
	Stream                          bool
}

// EndSpans finishes span, a request's root span started at its receipt,
// from the timeline: the GenAI attributes, a child span for the queue and
// one for the upstream call, an event at the first token. Nothing is built
// when the span is not recording.
func EndSpans(tr trace.Tracer, span trace.Span, tl *Timeline, r RequestSpans) {
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(tl.Done))
		return
	}
	if r.Model != "" {
		span.SetName(r.Operation + " " + r.Model)
	}
	// Room for every attribute below: the slice never grows.
	attrs := make([]attribute.KeyValue, 0, 24)
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
	if tl.PromptTokens > 0 || tl.OutputTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", tl.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", tl.OutputTokens))
	}
	if r.Outcome != "" && r.Outcome != "ok" {
		attrs = append(attrs, attribute.String("error.type", r.Outcome))
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
	span.SetAttributes(attrs...)
	ctx := trace.ContextWithSpan(context.Background(), span)
	// A queue span only for a request that waited: a microsecond of
	// admission is no queue, and a span costs what the request did.
	if tl.QueueWait() >= 100*time.Microsecond {
		_, q := tr.Start(ctx, "queue", trace.WithTimestamp(tl.Received), trace.WithSpanKind(trace.SpanKindInternal))
		q.End(trace.WithTimestamp(tl.Admitted))
	}
	if !tl.UpstreamStart.IsZero() {
		_, u := tr.Start(ctx, "upstream", trace.WithTimestamp(tl.UpstreamStart), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("server.address", r.Backend), attribute.Int("infergate.attempts", tl.Attempts)))
		end := tl.LastTokenIn
		if end.IsZero() {
			end = tl.Done
		}
		u.End(trace.WithTimestamp(end))
	}
	if !tl.FirstTokenOut.IsZero() {
		span.AddEvent("gen_ai.first_token", trace.WithTimestamp(tl.FirstTokenOut))
	}
	span.End(trace.WithTimestamp(tl.Done))
}

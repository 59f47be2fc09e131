package tracing

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// finishedSpan is a span built whole after its request ended, in the form
// the SDK's exporters and processors take (sdktrace.ReadOnlySpan). The SDK
// lets only its own types implement that interface (an unexported method),
// so the interface is embedded, nil, for that method alone, as the SDK's
// own tracetest.SpanStub does; every method an exporter calls is below.
type finishedSpan struct {
	sdktrace.ReadOnlySpan

	name           string
	spanContext    trace.SpanContext
	parent         trace.SpanContext
	spanKind       trace.SpanKind
	start, end     time.Time
	attributes     []attribute.KeyValue
	events         []sdktrace.Event
	status         sdktrace.Status
	childSpanCount int
	resource       *resource.Resource
	scope          instrumentation.Scope
}

func (s *finishedSpan) Name() string                                { return s.name }
func (s *finishedSpan) SpanContext() trace.SpanContext              { return s.spanContext }
func (s *finishedSpan) Parent() trace.SpanContext                   { return s.parent }
func (s *finishedSpan) SpanKind() trace.SpanKind                    { return s.spanKind }
func (s *finishedSpan) StartTime() time.Time                        { return s.start }
func (s *finishedSpan) EndTime() time.Time                          { return s.end }
func (s *finishedSpan) Attributes() []attribute.KeyValue            { return s.attributes }
func (s *finishedSpan) Links() []sdktrace.Link                      { return nil }
func (s *finishedSpan) Events() []sdktrace.Event                    { return s.events }
func (s *finishedSpan) Status() sdktrace.Status                     { return s.status }
func (s *finishedSpan) DroppedAttributes() int                      { return 0 }
func (s *finishedSpan) DroppedLinks() int                           { return 0 }
func (s *finishedSpan) DroppedEvents() int                          { return 0 }
func (s *finishedSpan) ChildSpanCount() int                         { return s.childSpanCount }
func (s *finishedSpan) Resource() *resource.Resource                { return s.resource }
func (s *finishedSpan) InstrumentationScope() instrumentation.Scope { return s.scope }

//nolint:staticcheck // part of sdktrace.ReadOnlySpan for older exporters
func (s *finishedSpan) InstrumentationLibrary() instrumentation.Library { return s.scope }

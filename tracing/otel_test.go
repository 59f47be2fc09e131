package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The span context decided at a request's receipt is the one its spans
// get when they are built at its end: same IDs, same sampling decision,
// the client's span as parent.
func TestBeginDecidesWhatEndBuilds(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr, err := NewTracer(context.Background(), TraceConfig{SampleRatio: 0.5}, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampledClient := client.WithTraceFlags(0)
	tl := streamTimeline()
	sampled := 0
	for i := range 400 {
		parent := trace.SpanContext{}
		switch i % 4 {
		case 1:
			parent = client
		case 2:
			parent = unsampledClient
		}
		sc := tr.Begin(parent)
		before := len(rec.Ended())
		tr.End(parent, sc, &tl, RequestSpans{Operation: "chat", Model: "m", Status: 200, Outcome: "ok"})
		ended := rec.Ended()[before:]
		if !sc.IsSampled() {
			if len(ended) != 0 {
				t.Fatalf("unsampled request %d built %d spans", i, len(ended))
			}
			continue
		}
		sampled++
		var root trace.SpanContext
		var rootParent trace.SpanContext
		for _, s := range ended {
			if s.Name() == "chat m" {
				root, rootParent = s.SpanContext(), s.Parent()
			}
		}
		if root.SpanID() != sc.SpanID() || root.TraceID() != sc.TraceID() {
			t.Fatalf("request %d: root span %v, decided %v", i, root, sc)
		}
		if parent.IsValid() && (rootParent.SpanID() != parent.SpanID() || sc.TraceID() != parent.TraceID()) {
			t.Fatalf("request %d: parent %v, want the client's %v", i, rootParent, parent)
		}
		if !parent.IsValid() && rootParent.IsValid() {
			t.Fatalf("request %d: a new trace got parent %v", i, rootParent)
		}
		if parent.IsValid() && !parent.IsSampled() {
			t.Fatal("a client's unsampled trace was sampled")
		}
	}
	// Half of the 200 new traces, all 100 sampled clients, no unsampled one.
	if sampled < 100+70 || sampled > 100+130 {
		t.Errorf("%d of 400 sampled at ratio 0.5 (100 parents sampled, 100 not)", sampled)
	}
}

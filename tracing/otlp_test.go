package tracing

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Spans built from a timeline reach an OTLP/HTTP receiver in batches, as
// a collector decodes them: names, IDs, parents, kinds, the service.
func TestSpansReachAnOTLPReceiver(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // span name → "traceID parentSpanID spanID"
	var service string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("receiver: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					got[s.Name] = hex.EncodeToString(s.TraceId) + " " + hex.EncodeToString(s.ParentSpanId) + " " + hex.EncodeToString(s.SpanId)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	tr, err := NewTracer(context.Background(), TraceConfig{Exporter: "otlp-http", Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true, ServiceName: "gw-test"})
	if err != nil {
		t.Fatal(err)
	}
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled, Remote: true})
	sc := tr.Begin(client)
	tl := streamTimeline()
	tr.End(client, sc, &tl, RequestSpans{Operation: "chat", Model: "m", Backend: "b:1", Status: 200, Outcome: "ok"})
	if err := tr.Shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	tid, root := sc.TraceID().String(), sc.SpanID().String()
	if want := tid + " " + client.SpanID().String() + " " + root; got["chat m"] != want {
		t.Errorf("root span %q, want %q", got["chat m"], want)
	}
	for _, name := range []string{"queue", "upstream"} {
		if f := strings.Fields(got[name]); len(f) != 3 || f[0] != tid || f[1] != root || f[2] == root {
			t.Errorf("%s span %q: want a child of %s in trace %s", name, got[name], root, tid)
		}
	}
	if service != "gw-test" {
		t.Errorf("service.name %q", service)
	}
}

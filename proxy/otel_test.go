package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/policy"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestSpansFollowGenAIConventions(t *testing.T) {
	t.Parallel()
	script := chunk("a") + chunk("b") + finishEvent + usageEvent + doneEvent
	var seen string
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get("Traceparent")
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(script))
	})
	rec := tracetest.NewSpanRecorder()
	gw := startGateway(t, testConfig(b.URL), WithSpanProcessor(rec))
	g := gw.Gateway
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	post(t, gw.URL, "/v1/chat/completions", streamBody, "Traceparent", "00-"+traceID+"-"+parentID+"-01")

	g.syncTelemetry() // spans are built off the request path
	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	root := byName["chat m"]
	if root == nil {
		t.Fatalf("no span %q among %d", "chat m", len(spans))
	}
	if root.SpanContext().TraceID().String() != traceID || root.Parent().SpanID().String() != parentID {
		t.Errorf("root span trace %s parent %s: the client's traceparent was not continued", root.SpanContext().TraceID(), root.Parent().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range root.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": "3",
		"gen_ai.usage.output_tokens": "2", "http.response.status_code": "200",
		"gen_ai.response.finish_reasons": `["stop"]`} {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}
	if !strings.HasPrefix(attrs["server.address"], "127.0.0.1:") {
		t.Errorf("server.address %q", attrs["server.address"])
	}
	up := byName["upstream"]
	if up == nil || up.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("no upstream child span under the root: %v", up)
	}
	if len(root.Events()) == 0 || root.Events()[0].Name != "gen_ai.first_token" {
		t.Errorf("events %v, want gen_ai.first_token", root.Events())
	}
	// The backend got our span as its parent, in the client's trace.
	if want := "00-" + traceID + "-" + root.SpanContext().SpanID().String() + "-01"; seen != want {
		t.Errorf("backend traceparent %q, want %q", seen, want)
	}
}

// TestSpanCarriesThePolicy: a clamped request's span says what the
// policy did and that its length finish was the policy's.
func TestSpanCarriesThePolicy(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	})
	cfg := testConfig(b.URL)
	cfg.Policy = policy.Config{Limits: policy.Limits{MaxOutputTokens: 2}}
	rec := tracetest.NewSpanRecorder()
	gw := startGateway(t, cfg, WithSpanProcessor(rec))
	post(t, gw.URL, "/v1/chat/completions", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, "Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	gw.syncTelemetry()
	for _, s := range rec.Ended() {
		if s.Name() != "chat m" {
			continue
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		for k, v := range map[string]string{"infergate.policy.max_tokens": "2", "infergate.policy.requested_max_tokens": "50",
			"infergate.policy.length_by_policy": "true"} {
			if attrs[k] != v {
				t.Errorf("%s = %q, want %q", k, attrs[k], v)
			}
		}
		return
	}
	t.Fatal("no root span")
}

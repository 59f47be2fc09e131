//go:build !race

package tracing

import "testing"

// Recording a request whose attribute combination was seen before
// allocates nothing: it runs once per request on the gateway.
func TestMetricsRecordAllocatesNothing(t *testing.T) {
	m, _ := newTestMetrics(t, MetricsConfig{})
	tl := streamTimeline()
	r := RequestMetrics{Operation: "chat", Model: "m", Backend: "10.0.0.1:8000", Outcome: "ok"}
	m.Record(&tl, r)
	if n := testing.AllocsPerRun(100, func() { m.Record(&tl, r) }); n != 0 {
		t.Errorf("Record allocates %v times per request", n)
	}
}

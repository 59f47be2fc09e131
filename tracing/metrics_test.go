package tracing

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// newTestMetrics returns metrics on a fresh provider and a scrape of it,
// parsed from the Prometheus text format as a scraper would.
func newTestMetrics(t testing.TB, cfg MetricsConfig) (*Metrics, func() map[string]*dto.MetricFamily) {
	t.Helper()
	mp, err := NewMeterProvider(context.Background(), cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := NewMetrics(mp, "test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, func() map[string]*dto.MetricFamily {
		t.Helper()
		mfs, err := mp.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		parsed, err := parser.TextToMetricFamilies(&buf)
		if err != nil {
			t.Fatalf("scrape does not parse: %v\n%s", err, buf.String())
		}
		return parsed
	}
}

// streamTimeline is a stream of 11 tokens: 2 ms queue, 1 ms connect, 47
// ms to the first token, 50 ms of decode.
func streamTimeline() Timeline {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	return Timeline{Received: at(0), Admitted: at(2), UpstreamStart: at(2), Connected: at(3), Sent: at(3), Headers: at(4),
		FirstTokenIn: at(50), FirstTokenOut: at(50.1), LastTokenIn: at(100), Done: at(101), NewConn: true,
		UpstreamRTT: 200 * time.Microsecond, PromptTokens: 5, OutputTokens: 11, ContentEvents: 11, Relay: 100 * time.Microsecond, RelayMax: 30 * time.Microsecond}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestMetricsFollowGenAIConventions(t *testing.T) {
	m, scrape := newTestMetrics(t, MetricsConfig{})
	tl := streamTimeline()
	m.Record(&tl, RequestMetrics{Operation: "chat", Model: "m", Backend: "10.0.0.1:8000", Outcome: "ok"})
	failed := Timeline{Received: tl.Received, Admitted: tl.Admitted, Done: tl.Received.Add(time.Second)}
	m.Record(&failed, RequestMetrics{Operation: "chat", Model: "m", Outcome: "timeout"})
	mfs := scrape()

	// name → the sum one successful request puts there, in its unit.
	want := map[string]float64{
		"gen_ai_client_operation_duration_seconds":              0.098,
		"gen_ai_client_operation_time_to_first_chunk_seconds":   0.047,
		"gen_ai_client_operation_time_per_output_chunk_seconds": 0.005,
		"gen_ai_server_time_to_first_token_seconds":             0.0501,
		"gen_ai_server_time_per_output_token_seconds":           0.005,
		"gen_ai_server_request_duration_seconds":                0.101,
		"infergate_upstream_connect_seconds":                    0.001,
		"infergate_upstream_rtt_seconds":                        0.0002,
		"infergate_model_time_to_first_token_seconds":           0.0468,
		"infergate_gateway_processing_seconds":                  0.0011,
		"infergate_queue_wait_seconds":                          0.002,
		"infergate_model_decode_seconds":                        0.0499,
		"infergate_relay_max_seconds":                           0.00003,
	}
	for name, sum := range want {
		var ok []*dto.Metric
		for _, s := range mfs[name].GetMetric() {
			if labelsOf(s)["error_type"] == "" {
				ok = append(ok, s)
			}
		}
		if len(ok) != 1 {
			t.Errorf("%s: %d series of the ok request, want one", name, len(ok))
			continue
		}
		if got := ok[0].Histogram.GetSampleSum(); math.Abs(got-sum) > 1e-6 {
			t.Errorf("%s sum %v, want %v", name, got, sum)
		}
		l := labelsOf(ok[0])
		if l["gen_ai_operation_name"] != "chat" || l["gen_ai_request_model"] != "m" || l["server_address"] != "10.0.0.1:8000" {
			t.Errorf("%s labels %v", name, l)
		}
	}
	if l := labelsOf(mfs["infergate_upstream_connect_seconds"].Metric[0]); l["infergate_connection"] != "new" {
		t.Errorf("connect labels %v, want infergate_connection=new", l)
	}
	// The failed request: only the server-side duration, with error.type.
	dur := mfs["gen_ai_server_request_duration_seconds"]
	if dur == nil || len(dur.Metric) != 2 {
		t.Fatalf("request duration series: %v", dur)
	}
	var gotErr bool
	for _, s := range dur.Metric {
		if labelsOf(s)["error_type"] == "timeout" {
			gotErr = true
			// Buckets go past ten minutes: a queued request can wait that long.
			b := s.Histogram.Bucket
			last := b[len(b)-1].GetUpperBound()
			if math.IsInf(last, 1) {
				last = b[len(b)-2].GetUpperBound()
			}
			if last < 600 {
				t.Errorf("largest finite bucket %v s, want past 600 s", last)
			}
		}
	}
	if !gotErr {
		t.Error("no series with error_type=timeout")
	}
	tokens := mfs["gen_ai_client_token_usage"]
	if tokens == nil || len(tokens.Metric) != 2 {
		t.Fatalf("token usage: %v", tokens)
	}
	for _, s := range tokens.Metric {
		l := labelsOf(s)
		if want := map[string]float64{"input": 5, "output": 11}[l["gen_ai_token_type"]]; s.Histogram.GetSampleSum() != want {
			t.Errorf("tokens %v: sum %v, want %v", l, s.Histogram.GetSampleSum(), want)
		}
	}
	reqs := mfs["infergate_requests_total"]
	if reqs == nil || len(reqs.Metric) != 2 {
		t.Fatalf("requests: %v", reqs)
	}
}

func TestMetricsCountDisconnectsByPhase(t *testing.T) {
	m, scrape := newTestMetrics(t, MetricsConfig{Off: true})
	t0 := time.Unix(1000, 0)
	queued := Timeline{Received: t0, Done: t0.Add(time.Second)}
	prefill := Timeline{Received: t0, Admitted: t0, Sent: t0, Done: t0.Add(time.Second)}
	streaming := streamTimeline()
	for _, tl := range []*Timeline{&queued, &prefill, &streaming, &streaming} {
		m.Record(tl, RequestMetrics{Operation: "chat", Model: "m", Outcome: "client_gone", ClientGone: true})
	}
	m.Record(&streaming, RequestMetrics{Operation: "chat", Model: "m", Outcome: "upstream_error", Truncated: true})
	mfs := scrape()
	got := map[string]float64{}
	for _, s := range mfs["infergate_client_disconnects_total"].GetMetric() {
		got[labelsOf(s)["infergate_phase"]] = s.Counter.GetValue()
	}
	if got["queued"] != 1 || got["before_first_token"] != 1 || got["streaming"] != 2 {
		t.Errorf("disconnects by phase %v, want queued 1, before_first_token 1, streaming 2", got)
	}
	if tr := mfs["infergate_upstream_truncated_total"]; tr == nil || tr.Metric[0].Counter.GetValue() != 1 {
		t.Errorf("truncated: %v", tr)
	}
	// Off: counters only, no histograms.
	if mfs["gen_ai_server_request_duration_seconds"] != nil {
		t.Error("histograms recorded with metrics.off")
	}
}

func BenchmarkMetricsRecord(b *testing.B) {
	m, _ := newTestMetrics(b, MetricsConfig{})
	tl := streamTimeline()
	r := RequestMetrics{Operation: "chat", Model: "m", Backend: "10.0.0.1:8000", Outcome: "ok"}
	b.ReportAllocs()
	for b.Loop() {
		m.Record(&tl, r)
	}
}

package tracing

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// A value on a bucket's upper bound counts in that bucket (le is
// inclusive), the next value up in the next one; NaN and infinities are
// dropped; count is the +Inf bucket.
func TestHistogramBuckets(t *testing.T) {
	m, scrape := newTestMetrics(t, MetricsConfig{})
	t0 := time.Unix(1000, 0)
	for _, d := range []time.Duration{time.Millisecond, time.Millisecond + time.Nanosecond, 30 * time.Minute} {
		tl := Timeline{Received: t0, Done: t0.Add(d)}
		m.Record(&tl, RequestMetrics{Operation: "chat", Model: "m", Outcome: "timeout"})
	}
	s := scrape()["gen_ai_server_request_duration_seconds"].GetMetric()
	if len(s) != 1 {
		t.Fatalf("%d series, want 1", len(s))
	}
	h := s[0].GetHistogram()
	le := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		le[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if le[0.0005] != 0 || le[0.001] != 1 || le[0.0025] != 2 || le[1310.72] != 2 || le[math.Inf(1)] != 3 {
		t.Errorf("cumulative buckets %v: want le=0.001 → 1, le=0.0025 → 2, le=1310.72 → 2, +Inf → 3", le)
	}
	if h.GetSampleCount() != 3 {
		t.Errorf("count %d, want 3", h.GetSampleCount())
	}
	if want := 0.002 + 1e-9 + 1800; math.Abs(h.GetSampleSum()-want) > 1e-9 {
		t.Errorf("sum %v, want %v", h.GetSampleSum(), want)
	}
}

// Many goroutines recording into the same series lose nothing.
func TestHistogramConcurrent(t *testing.T) {
	m, scrape := newTestMetrics(t, MetricsConfig{})
	tl := streamTimeline()
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				m.Record(&tl, RequestMetrics{Operation: "chat", Model: "m", Backend: "b:1", Outcome: "ok"})
			}
		})
	}
	// Scrapes while recording must parse and never show _count above
	// the +Inf bucket.
	for range 20 {
		for _, s := range scrape()["infergate_model_decode_seconds"].GetMetric() {
			h := s.GetHistogram()
			b := h.GetBucket()
			if n := b[len(b)-1].GetCumulativeCount(); h.GetSampleCount() != n {
				t.Fatalf("count %d, +Inf bucket %d", h.GetSampleCount(), n)
			}
		}
	}
	wg.Wait()
	mfs := scrape()
	h := mfs["infergate_model_decode_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != workers*each {
		t.Errorf("count %d, want %d", h.GetSampleCount(), workers*each)
	}
	if want := 0.0499 * workers * each; math.Abs(h.GetSampleSum()-want) > 1e-6 {
		t.Errorf("sum %v, want %v", h.GetSampleSum(), want)
	}
	if got := mfs["infergate_requests_total"].GetMetric()[0].GetCounter().GetValue(); got != workers*each {
		t.Errorf("requests %v, want %d", got, workers*each)
	}
}

// Past maxAttrSets combinations, requests still count, in one overflow
// series, and the series do not grow.
func TestMetricsOverflow(t *testing.T) {
	m, scrape := newTestMetrics(t, MetricsConfig{})
	t0 := time.Unix(1000, 0)
	tl := Timeline{Received: t0, Done: t0.Add(time.Second)}
	const n = maxAttrSets + 100
	for i := range n {
		m.Record(&tl, RequestMetrics{Operation: "chat", Model: "m", Backend: fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256), Outcome: "timeout"})
	}
	series := scrape()["gen_ai_server_request_duration_seconds"].GetMetric()
	if len(series) != maxAttrSets+1 {
		t.Fatalf("%d series, want %d and one overflow", len(series), maxAttrSets)
	}
	var total uint64
	var over bool
	for _, s := range series {
		total += s.GetHistogram().GetSampleCount()
		if labelsOf(s)["otel_metric_overflow"] == "true" {
			over = true
			if c := s.GetHistogram().GetSampleCount(); c != 100 {
				t.Errorf("overflow series count %d, want 100", c)
			}
		}
	}
	if !over || total != n {
		t.Errorf("overflow series %v, total count %d, want %d", over, total, n)
	}
}

// The histograms reach an OTLP/HTTP receiver too, with their buckets,
// count, sum, minimum and maximum, alongside the SDK's own counters.
func TestMetricsReachAnOTLPReceiver(t *testing.T) {
	var mu sync.Mutex
	got := map[string]*metricspb.Metric{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("receiver: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					got[m.Name] = m
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	cfg := MetricsConfig{Exporter: "otlp-http", Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true, Interval: time.Hour}
	mp, err := NewMeterProvider(context.Background(), cfg, "gw-test")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(mp, "test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	for _, d := range []time.Duration{2 * time.Millisecond, 5 * time.Millisecond} {
		tl := streamTimeline()
		tl.Done = t0.Add(d)
		tl.Received = t0
		m.Record(&tl, RequestMetrics{Operation: "chat", Model: "m", Outcome: "client_gone", ClientGone: true})
	}
	if err := mp.Shutdown(context.Background()); err != nil { // the last push
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	dur := got["gen_ai.server.request.duration"]
	if dur == nil {
		t.Fatalf("no request duration among %d metrics", len(got))
	}
	h := dur.GetHistogram()
	if h.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE || len(h.DataPoints) != 1 {
		t.Fatalf("request duration: %v", h)
	}
	p := h.DataPoints[0]
	if p.GetCount() != 2 || math.Abs(p.GetSum()-0.007) > 1e-9 || math.Abs(p.GetMin()-0.002) > 1e-9 || math.Abs(p.GetMax()-0.005) > 1e-9 {
		t.Errorf("point count %d sum %v min %v max %v, want 2, 0.007, 0.002, 0.005", p.GetCount(), p.GetSum(), p.GetMin(), p.GetMax())
	}
	if len(p.ExplicitBounds) != len(latencyBuckets) || len(p.BucketCounts) != len(latencyBuckets)+1 || p.BucketCounts[2] != 1 || p.BucketCounts[3] != 1 {
		t.Errorf("bounds %v counts %v: want 2 ms in (1 ms, 2.5 ms] and 5 ms in (2.5 ms, 5 ms]", p.ExplicitBounds, p.BucketCounts)
	}
	if p.GetStartTimeUnixNano() == 0 || p.GetStartTimeUnixNano() > p.GetTimeUnixNano() {
		t.Errorf("start %d, time %d", p.GetStartTimeUnixNano(), p.GetTimeUnixNano())
	}
	if tok := got["gen_ai.client.token.usage"]; tok == nil || len(tok.GetHistogram().GetDataPoints()) != 2 {
		t.Errorf("token usage: %v", tok)
	}
	if req := got["infergate.requests"]; req == nil || !req.GetSum().GetIsMonotonic() || req.GetSum().DataPoints[0].GetAsInt() != 2 {
		t.Errorf("requests: %v", req)
	}
	// An SDK counter, each phase at zero from the start: 2 in all.
	d := got["infergate.client.disconnects"]
	var total int64
	for _, p := range d.GetSum().GetDataPoints() {
		total += p.GetAsInt()
	}
	if d == nil || len(d.GetSum().GetDataPoints()) != 3 || total != 2 {
		t.Errorf("disconnects (an SDK counter): %v", d)
	}
	if r := got["infergate.retries"]; r == nil || len(r.GetSum().GetDataPoints()) != 1 || r.GetSum().DataPoints[0].GetAsInt() != 0 {
		t.Errorf("retries, never made: %v, want one point at 0", r)
	}
}

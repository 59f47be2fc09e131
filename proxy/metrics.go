package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gatewayMetrics are the data path's own counters. The full set of
// timeline metrics (OpenTelemetry, GenAI conventions) belongs to tracing.
type gatewayMetrics struct {
	// models seen as labels; past maxModelLabels, new names count as
	// "other", so clients cannot grow the series without bound (in the
	// quick start any model name is routed).
	mu     sync.Mutex
	models map[string]struct{}

	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	retries  prometheus.Counter
	ttft     prometheus.Observer
}

func newGatewayMetrics() *gatewayMetrics {
	m := &gatewayMetrics{reg: prometheus.NewRegistry(), models: map[string]struct{}{}}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "infergate_requests_total",
		Help: "Requests by model and outcome (ok, client_gone, timeout, upstream_error, no_backend, rejected, backend_4xx, backend_5xx, shutdown).",
	}, []string{"model", "outcome"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "infergate_retries_total", Help: "Upstream attempts beyond the first (failover before the first byte).",
	})
	ttft := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "infergate_time_to_first_token_seconds", Help: "Gateway-side TTFT: request read to first content event flushed.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80},
	})
	m.ttft = ttft
	m.reg.MustRegister(m.requests, m.retries, ttft)
	return m
}

const maxModelLabels = 64

func (m *gatewayMetrics) record(model, outcome string, ttft time.Duration) {
	m.mu.Lock()
	if _, ok := m.models[model]; !ok {
		if len(m.models) < maxModelLabels {
			m.models[model] = struct{}{}
		} else {
			model = "other"
		}
	}
	m.mu.Unlock()
	m.requests.WithLabelValues(model, outcome).Inc()
	if ttft > 0 {
		m.ttft.Observe(ttft.Seconds())
	}
}

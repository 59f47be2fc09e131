package proxy

import (
	"github.com/infergate/infergate/shaping"
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

	queueWait prometheus.Observer
}

func newGatewayMetrics(lim *shaping.Limiter) *gatewayMetrics {
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
	wait := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "infergate_queue_wait_seconds", Help: "Time admitted requests waited for a slot under the shaping caps.",
		Buckets: []float64{0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	})
	m.queueWait = wait
	m.reg.MustRegister(wait, shapingCollector{lim})
	return m
}

// shapingCollector reads the limiter's counters at scrape time.
type shapingCollector struct{ lim *shaping.Limiter }

var (
	descQueued    = prometheus.NewDesc("infergate_queue_depth", "Requests waiting for a slot.", nil, nil)
	descInFlight  = prometheus.NewDesc("infergate_shaping_in_flight", "Requests and tokens holding a slot, by cap.", []string{"level", "name", "unit"}, nil)
	descRejected  = prometheus.NewDesc("infergate_shaping_rejections_total", "Requests refused by admission control, by reason.", []string{"reason"}, nil)
	descAdmitted  = prometheus.NewDesc("infergate_shaping_admitted_total", "Requests given a slot.", nil, nil)
	descCancelled = prometheus.NewDesc("infergate_shaping_queue_abandoned_total", "Requests whose client left while they waited.", nil, nil)
	descRedisUp   = prometheus.NewDesc("infergate_shaping_redis_up", "1 while the shared caps' Redis answers (only with shaping.redis).", nil, nil)
	descRedisDown = prometheus.NewDesc("infergate_shaping_redis_down_total", "Times Redis was found down and the caps fell back (on_failure).", nil, nil)
)

func (shapingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descInFlight, descRejected, descAdmitted, descCancelled, descRedisUp, descRedisDown} {
		ch <- d
	}
}

func (c shapingCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.lim.Stats()
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstMetric(descAdmitted, prometheus.CounterValue, float64(s.Admitted))
	ch <- prometheus.MustNewConstMetric(descCancelled, prometheus.CounterValue, float64(s.Cancelled))
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.RejectedFull-s.RejectedFullTenant), "queue_full")
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.RejectedTimeout-s.RejectedTimeoutTenant), "queue_timeout")
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.RejectedFullTenant), "tenant_queue_full")
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.RejectedTimeoutTenant), "tenant_queue_timeout")
	if s.Shared {
		up := 0.0
		if s.SharedUp {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, up)
		ch <- prometheus.MustNewConstMetric(descRedisDown, prometheus.CounterValue, float64(s.SharedDownTransitions))
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.RejectedShared), "redis_down")
	}
	for _, cp := range c.lim.Caps() {
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(cp.Requests), cp.Level, cp.Name, "requests")
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(cp.Tokens), cp.Level, cp.Name, "tokens")
	}
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

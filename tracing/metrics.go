package tracing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

// MetricsConfig is how the gateway's metrics leave it: always as
// Prometheus text at /metrics on the admin listener, and optionally pushed
// by OTLP. The zero value records everything and pushes nothing.
type MetricsConfig struct {
	// Off stops the per-request histograms (the GenAI durations, TTFT,
	// token usage and the timeline's parts); counters and gauges stay.
	Off bool `yaml:"off"`
	// Exporter pushes metrics besides /metrics: "none" (default),
	// "otlp-http" or "otlp-grpc".
	Exporter string `yaml:"exporter"`
	// Endpoint is the collector's host:port; empty takes the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_METRICS_ENDPOINT.
	Endpoint string `yaml:"endpoint"`
	// Insecure pushes OTLP without TLS.
	Insecure bool `yaml:"insecure"`
	// Interval between pushes. Default 30s.
	Interval time.Duration `yaml:"interval"`
}

// Defaults fills in zero values.
func (c *MetricsConfig) Defaults() {
	if c.Exporter == "" {
		c.Exporter = "none"
	}
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
}

// Validate names the first invalid field.
func (c *MetricsConfig) Validate() error {
	switch c.Exporter {
	case "none", "otlp-http", "otlp-grpc":
	default:
		return fmt.Errorf("metrics.exporter %q: want none, otlp-http or otlp-grpc", c.Exporter)
	}
	if c.Interval < 0 {
		return errors.New("metrics.interval: must not be negative")
	}
	return nil
}

// MeterProvider is the OpenTelemetry meter provider of a gateway with the
// Prometheus registry its /metrics serves. Shutdown flushes a push
// exporter.
type MeterProvider struct {
	*sdkmetric.MeterProvider
	// Registry holds what /metrics serves.
	Registry *prometheus.Registry
	// prod gives both readers the series Metrics aggregates itself.
	prod *producer
}

// NewMeterProvider builds the provider cfg describes. service is the
// service.name of pushed metrics.
func NewMeterProvider(ctx context.Context, cfg MetricsConfig, service string) (*MeterProvider, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	prod := &producer{}
	// No otel_scope_* labels on every series: one scope is all there is.
	prom, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithProducer(prod))
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	// No exemplars: requests are recorded when they end, outside their
	// span, and the filter's check would run on every measurement.
	opts := []sdkmetric.Option{sdkmetric.WithReader(prom), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", service)))}
	var exp sdkmetric.Exporter
	switch cfg.Exporter {
	case "otlp-http":
		exp, err = otlpmetrichttp.New(ctx, otlpOptions(cfg.Endpoint, cfg.Insecure, otlpmetrichttp.WithEndpoint, otlpmetrichttp.WithInsecure)...)
	case "otlp-grpc":
		exp, err = otlpmetricgrpc.New(ctx, otlpOptions(cfg.Endpoint, cfg.Insecure, otlpmetricgrpc.WithEndpoint, otlpmetricgrpc.WithInsecure)...)
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %s exporter: %w", cfg.Exporter, err)
	}
	if exp != nil {
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval), sdkmetric.WithProducer(prod))))
	}
	return &MeterProvider{MeterProvider: sdkmetric.NewMeterProvider(opts...), Registry: reg, prod: prod}, nil
}

// otlpOptions are an OTLP exporter's endpoint and TLS options, for any of
// the four exporters (traces and metrics, over HTTP and gRPC).
func otlpOptions[O any](endpoint string, insecure bool, withEndpoint func(string) O, withInsecure func() O) []O {
	var o []O
	if endpoint != "" {
		o = append(o, withEndpoint(endpoint))
	}
	if insecure {
		o = append(o, withInsecure())
	}
	return o
}

// Bucket boundaries for LLM latencies, in seconds. The GenAI conventions
// advise up to 81.92 s; a request queued behind a full batch waits
// minutes, so these go to 20 minutes.
var (
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
		5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68, 655.36, 1310.72}
	// Per-token and per-event times: microseconds (the gateway's relay)
	// to seconds (a stalled decode).
	tokenTimeBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
		0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5}
	// Token counts, as the GenAI conventions advise.
	tokenBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304}
)

// Metrics records each finished request's timeline: the GenAI semantic
// conventions' client metrics (the gateway is the backend's client) and
// server metrics (for the gateway's own endpoint), and the gateway's own
// split of the time. It is safe for concurrent use; Record allocates
// nothing once a request's attribute combination has been seen.
type Metrics struct {
	off bool

	disconnects, retries metric.Int64Counter   // rare: left to the SDK
	phases               [3][]metric.AddOption // client disconnects by phase

	mu       sync.RWMutex
	sets     map[setKey]*attrSets
	overflow *attrSets // every combination past maxAttrSets
}

// histID names a histogram recorded on a combination's base attributes.
type histID int

const (
	hOpDuration histID = iota
	hTTFC
	hTPOC
	hSrvDuration
	hSrvTTFT
	hSrvTPOT
	hQueue
	hGateway
	hRelayMax
	hRTT
	hModel
	hDecode
	hBackendQueue
	hPrefill
	hSrvTTFO
	hReasoning
	numHists
)

// instrument describes one exported metric.
type instrument struct {
	name, unit, desc string
	bounds           []float64
}

var hists = [numHists]instrument{
	hOpDuration:   {"gen_ai.client.operation.duration", "s", "Gateway → backend: request sent to response complete.", latencyBuckets},
	hTTFC:         {"gen_ai.client.operation.time_to_first_chunk", "s", "Gateway → backend: request sent to the first content chunk in.", latencyBuckets},
	hTPOC:         {"gen_ai.client.operation.time_per_output_chunk", "s", "Gateway → backend: mean time between content chunks, one value per stream.", tokenTimeBuckets},
	hSrvDuration:  {"gen_ai.server.request.duration", "s", "The gateway's endpoint: request read to response complete.", latencyBuckets},
	hSrvTTFT:      {"gen_ai.server.time_to_first_token", "s", "The gateway's endpoint: request read to the first content event flushed to the client.", latencyBuckets},
	hSrvTPOT:      {"gen_ai.server.time_per_output_token", "s", "The gateway's endpoint: (last − first content event) / (output tokens − 1).", tokenTimeBuckets},
	hQueue:        {"infergate.queue.wait", "s", "Time admitted requests waited for a slot under the shaping caps.", latencyBuckets},
	hGateway:      {"infergate.gateway.processing", "s", "The gateway's own time per request (choosing a backend, writing the request, relaying every event).", tokenTimeBuckets},
	hRelayMax:     {"infergate.relay.max", "s", "Per stream, the longest time one read of events took from the backend to the client.", tokenTimeBuckets},
	hRTT:          {"infergate.upstream.rtt", "s", "Round trip to the backend: the kernel's minimum RTT of the connection (TCP_INFO).", tokenTimeBuckets},
	hModel:        {"infergate.model.time_to_first_token", "s", "The backend's own time to the first token: sent → first token in, less the round trip.", latencyBuckets},
	hDecode:       {"infergate.model.decode", "s", "The backend's decode: first to last token, less the gateway's relay time.", latencyBuckets},
	hBackendQueue: {"infergate.backend.queue", "s", "The backend's own scheduler queue, as it reports it (vLLM per-request metrics, TGI x-queue-time).", latencyBuckets},
	hPrefill:      {"infergate.backend.prefill", "s", "The backend's own scheduling → first token, as it reports it (vLLM per-request metrics, llama.cpp timings).", latencyBuckets},
	hSrvTTFO:      {"infergate.server.time_to_first_output_token", "s", "Reasoning models: request read to the first content event that is not thinking flushed to the client.", latencyBuckets},
	hReasoning:    {"infergate.model.reasoning", "s", "Reasoning models: the model's thinking, first token to first output token.", latencyBuckets},
}

var (
	connectHist = instrument{"infergate.upstream.connect", "s", "Time to get a backend connection, by infergate.connection (new or pooled).", latencyBuckets}
	tokenHist   = instrument{"gen_ai.client.token.usage", "{token}", "Tokens per request as the backend's usage reports them, by gen_ai.token.type.", tokenBuckets}
	requestsSum = instrument{name: "infergate.requests", unit: "{request}",
		desc: "Requests by model and outcome (ok, client_gone, timeout, upstream_error, no_backend, rejected, shed, backend_4xx, backend_5xx, shutdown)."}
	truncatedSum = instrument{name: "infergate.upstream.truncated", unit: "{stream}", desc: "Backend streams that ended without finish_reason and [DONE], or were reset."}
)

// setKey names one combination of a request's attributes.
type setKey struct{ op, model, backend, outcome string }

// attrSets are a combination's attribute sets, made once, and its series.
type attrSets struct {
	base, input, output, newConn, pooled, request attribute.Set

	h                                  [numHists]series
	connNew, connPooled, tokIn, tokOut series
	requests, truncated                counter
}

// maxAttrSets bounds the combinations; past it requests share one set of
// series marked otel.metric.overflow, as the SDK marks its own overflow.
const maxAttrSets = 4096

// NewMetrics creates the instruments on mp, in the instrumentation scope
// named scope.
func NewMetrics(mp *MeterProvider, scope string, cfg MetricsConfig) (*Metrics, error) {
	m := mp.Meter(scope)
	over := attribute.NewSet(attribute.Bool("otel.metric.overflow", true))
	x := &Metrics{off: cfg.Off, sets: map[setKey]*attrSets{}, overflow: &attrSets{base: over, input: over, output: over,
		newConn: over, pooled: over, request: over, requests: counter{start: time.Now()}, truncated: counter{start: time.Now()}}}
	var errs []error
	count := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	x.disconnects = count("infergate.client.disconnects", "{request}", "Clients that left before their response was complete, by infergate.phase (queued, before_first_token, streaming).")
	x.retries = count("infergate.retries", "{attempt}", "Upstream attempts beyond the first (failover before the first byte).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	for i, p := range [...]string{"queued", "before_first_token", "streaming"} {
		x.phases[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("infergate.phase", p)))}
	}
	// Rare counters start at zero rather than at their first event, so a
	// rate() over them has data (dashboards and alerts) from the start.
	x.retries.Add(context.Background(), 0)
	for i := range x.phases {
		x.disconnects.Add(context.Background(), 0, x.phases[i]...)
	}
	mp.prod.add(scope, x.collect)
	return x, nil
}

// RequestMetrics is what a request's metrics carry beyond its timeline.
type RequestMetrics struct {
	Operation string // gen_ai.operation.name: chat or text_completion
	Model     string // the model asked for ("" when none; "other" past the label cap)
	Backend   string // server.address of the backend, "" when none was called
	Outcome   string // "ok" or what went wrong (error.type)
	// ClientGone and Truncated count the request among client disconnects
	// and truncated upstream streams.
	ClientGone, Truncated bool
}

// Record adds a finished request.
func (m *Metrics) Record(tl *Timeline, r RequestMetrics) {
	s := m.attrs(setKey{r.Operation, r.Model, r.Backend, r.Outcome})
	s.requests.n.Add(1)
	if r.ClientGone {
		phase := 0
		switch {
		case !tl.FirstTokenOut.IsZero():
			phase = 2
		case !tl.Admitted.IsZero():
			phase = 1
		}
		m.disconnects.Add(context.Background(), 1, m.phases[phase]...)
	}
	if r.Truncated {
		s.truncated.n.Add(1)
	}
	if m.off {
		return
	}
	rec := func(id histID, d time.Duration) { s.h[id].record(hists[id].bounds, d.Seconds()) }
	rec(hSrvDuration, tl.Duration())
	if w := tl.QueueWait(); w > 0 {
		rec(hQueue, w)
	}
	if tl.Sent.IsZero() {
		return // never reached a backend
	}
	a := tl.Attribute(tl.Done)
	rec(hGateway, a.Gateway)
	conn := &s.connPooled
	if tl.NewConn {
		conn = &s.connNew
	}
	conn.record(connectHist.bounds, a.Connect.Seconds())
	if tl.UpstreamRTT > 0 {
		rec(hRTT, tl.UpstreamRTT)
	}
	rec(hModel, a.ModelTTFT)
	rec(hOpDuration, since(tl.Sent, tl.Done))
	if ttft := tl.TTFT(); ttft > 0 {
		rec(hSrvTTFT, ttft)
		rec(hTTFC, tl.ModelTTFT())
		rec(hDecode, a.Decode)
		rec(hRelayMax, tl.RelayMax)
		span := since(tl.FirstTokenIn, tl.LastTokenIn)
		if tl.ContentEvents > 1 {
			s.h[hTPOC].record(hists[hTPOC].bounds, span.Seconds()/float64(tl.ContentEvents-1))
		}
		if tl.OutputTokens > 1 {
			s.h[hSrvTPOT].record(hists[hSrvTPOT].bounds, span.Seconds()/float64(tl.OutputTokens-1))
		}
		if a.Reasoning > 0 {
			rec(hReasoning, a.Reasoning)
			if a.TTFO > 0 {
				rec(hSrvTTFO, a.TTFO)
			}
		}
	}
	if b := a.Backend; b.Source != "" {
		if b.Queue >= 0 {
			rec(hBackendQueue, b.Queue)
		}
		if b.Prefill >= 0 {
			rec(hPrefill, b.Prefill)
		}
	}
	if tl.PromptTokens > 0 || tl.OutputTokens > 0 {
		s.tokIn.record(tokenHist.bounds, float64(tl.PromptTokens))
		s.tokOut.record(tokenHist.bounds, float64(tl.OutputTokens))
	}
}

// collect returns every series recorded so far.
func (m *Metrics) collect(now time.Time) []metricdata.Metrics {
	m.mu.RLock()
	sets := make([]*attrSets, 0, len(m.sets)+1)
	for _, s := range m.sets {
		sets = append(sets, s)
	}
	m.mu.RUnlock()
	sets = append(sets, m.overflow)

	// points returns in's non-empty series: each calls add once per series
	// of a combination.
	points := func(in instrument, each func(s *attrSets, add func(*series, attribute.Set))) []metricdata.HistogramDataPoint[float64] {
		var dps []metricdata.HistogramDataPoint[float64]
		for _, s := range sets {
			each(s, func(se *series, attrs attribute.Set) {
				if h := se.p.Load(); h != nil {
					if p, ok := h.point(attrs, in.bounds, now); ok {
						dps = append(dps, p)
					}
				}
			})
		}
		return dps
	}
	var out []metricdata.Metrics
	histogram := func(in instrument, each func(s *attrSets, add func(*series, attribute.Set))) {
		if dps := points(in, each); len(dps) > 0 {
			out = append(out, metricdata.Metrics{Name: in.name, Description: in.desc, Unit: in.unit,
				Data: metricdata.Histogram[float64]{DataPoints: dps, Temporality: metricdata.CumulativeTemporality}})
		}
	}
	for id := range numHists {
		histogram(hists[id], func(s *attrSets, add func(*series, attribute.Set)) { add(&s.h[id], s.base) })
	}
	histogram(connectHist, func(s *attrSets, add func(*series, attribute.Set)) {
		add(&s.connNew, s.newConn)
		add(&s.connPooled, s.pooled)
	})
	// Token counts are integers: an Int64 histogram, as the SDK made it.
	if dps := points(tokenHist, func(s *attrSets, add func(*series, attribute.Set)) {
		add(&s.tokIn, s.input)
		add(&s.tokOut, s.output)
	}); len(dps) > 0 {
		tok := make([]metricdata.HistogramDataPoint[int64], len(dps))
		for i, p := range dps {
			tok[i] = intPoint(p)
		}
		out = append(out, metricdata.Metrics{Name: tokenHist.name, Description: tokenHist.desc, Unit: tokenHist.unit,
			Data: metricdata.Histogram[int64]{DataPoints: tok, Temporality: metricdata.CumulativeTemporality}})
	}
	for _, c := range []struct {
		in  instrument
		get func(*attrSets) *counter
	}{{requestsSum, func(s *attrSets) *counter { return &s.requests }}, {truncatedSum, func(s *attrSets) *counter { return &s.truncated }}} {
		// Combinations differing only in operation or backend share a
		// model and outcome: one series.
		var dps []metricdata.DataPoint[int64]
		at := map[attribute.Distinct]int{}
		for _, s := range sets {
			n := c.get(s)
			v := n.n.Load()
			if v == 0 {
				continue
			}
			if i, ok := at[s.request.Equivalent()]; ok {
				dps[i].Value += v
				if n.start.Before(dps[i].StartTime) {
					dps[i].StartTime = n.start
				}
				continue
			}
			at[s.request.Equivalent()] = len(dps)
			dps = append(dps, metricdata.DataPoint[int64]{Attributes: s.request, StartTime: n.start, Time: now, Value: v})
		}
		if len(dps) > 0 {
			out = append(out, metricdata.Metrics{Name: c.in.name, Description: c.in.desc, Unit: c.in.unit,
				Data: metricdata.Sum[int64]{DataPoints: dps, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}})
		}
	}
	return out
}

// Retry counts an upstream attempt beyond the first.
func (m *Metrics) Retry() { m.retries.Add(context.Background(), 1) }

// attrs returns the attribute sets of k, made on first use.
func (m *Metrics) attrs(k setKey) *attrSets {
	m.mu.RLock()
	s := m.sets[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sets[k]; s != nil {
		return s
	}
	if len(m.sets) >= maxAttrSets {
		return m.overflow
	}
	s = newAttrSets(k)
	m.sets[k] = s
	return s
}

func newAttrSets(k setKey) *attrSets {
	kv := []attribute.KeyValue{attribute.String("gen_ai.operation.name", k.op), attribute.String("gen_ai.request.model", k.model)}
	if k.backend != "" {
		kv = append(kv, attribute.String("server.address", k.backend))
	}
	if k.outcome != "ok" {
		kv = append(kv, attribute.String("error.type", k.outcome))
	}
	with := func(extra ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(kv[:len(kv):len(kv)], extra...)...)
	}
	now := time.Now()
	return &attrSets{
		base:   with(),
		input:  with(attribute.String("gen_ai.token.type", "input")),
		output: with(attribute.String("gen_ai.token.type", "output")),
		// "new" includes the dial and any TLS handshake.
		newConn:   with(attribute.String("infergate.connection", "new")),
		pooled:    with(attribute.String("infergate.connection", "pooled")),
		request:   attribute.NewSet(attribute.String("model", k.model), attribute.String("outcome", k.outcome)),
		requests:  counter{start: now},
		truncated: counter{start: now},
	}
}

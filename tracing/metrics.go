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
}

// NewMeterProvider builds the provider cfg describes. service is the
// service.name of pushed metrics.
func NewMeterProvider(ctx context.Context, cfg MetricsConfig, service string) (*MeterProvider, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	// No otel_scope_* labels on every series: one scope is all there is.
	prom, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
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
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval))))
	}
	return &MeterProvider{MeterProvider: sdkmetric.NewMeterProvider(opts...), Registry: reg}, nil
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

	opDuration, ttfc, tpoc, srvDuration, srvTTFT, srvTPOT metric.Float64Histogram
	tokens                                                metric.Int64Histogram
	queue, gateway, relayMax, connect, rtt, model, decode metric.Float64Histogram
	backendQueue, prefill                                 metric.Float64Histogram
	requests, disconnects, truncated, retries             metric.Int64Counter

	phases [3][]metric.AddOption // client disconnects by phase

	mu   sync.RWMutex
	sets map[setKey]*attrSets
}

// setKey names one combination of a request's attributes.
type setKey struct{ op, model, backend, outcome string }

// attrSets are a combination's attribute sets, made once.
type attrSets struct {
	base, input, output, newConn, pooled []metric.RecordOption
	request                              []metric.AddOption
}

// maxAttrSets bounds the cache; past it sets are built per request.
const maxAttrSets = 4096

// NewMetrics creates the instruments on m.
func NewMetrics(m metric.Meter, cfg MetricsConfig) (*Metrics, error) {
	x := &Metrics{off: cfg.Off, sets: map[setKey]*attrSets{}}
	var errs []error
	hist := func(name, unit, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	count := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	x.opDuration = hist("gen_ai.client.operation.duration", "s", "Gateway → backend: request sent to response complete.", latencyBuckets)
	x.ttfc = hist("gen_ai.client.operation.time_to_first_chunk", "s", "Gateway → backend: request sent to the first content chunk in.", latencyBuckets)
	x.tpoc = hist("gen_ai.client.operation.time_per_output_chunk", "s", "Gateway → backend: mean time between content chunks, one value per stream.", tokenTimeBuckets)
	x.srvDuration = hist("gen_ai.server.request.duration", "s", "The gateway's endpoint: request read to response complete.", latencyBuckets)
	x.srvTTFT = hist("gen_ai.server.time_to_first_token", "s", "The gateway's endpoint: request read to the first content event flushed to the client.", latencyBuckets)
	x.srvTPOT = hist("gen_ai.server.time_per_output_token", "s", "The gateway's endpoint: (last − first content event) / (output tokens − 1).", tokenTimeBuckets)
	tok, err := m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens per request as the backend's usage reports them, by gen_ai.token.type."), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	errs = append(errs, err)
	x.tokens = tok
	x.queue = hist("infergate.queue.wait", "s", "Time admitted requests waited for a slot under the shaping caps.", latencyBuckets)
	x.gateway = hist("infergate.gateway.processing", "s", "The gateway's own time per request (choosing a backend, writing the request, relaying every event).", tokenTimeBuckets)
	x.relayMax = hist("infergate.relay.max", "s", "Per stream, the longest time one read of events took from the backend to the client.", tokenTimeBuckets)
	x.connect = hist("infergate.upstream.connect", "s", "Time to get a backend connection, by infergate.connection (new or pooled).", latencyBuckets)
	x.rtt = hist("infergate.upstream.rtt", "s", "Round trip to the backend: the kernel's minimum RTT of the connection (TCP_INFO).", tokenTimeBuckets)
	x.model = hist("infergate.model.time_to_first_token", "s", "The backend's own time to the first token: sent → first token in, less the round trip.", latencyBuckets)
	x.decode = hist("infergate.model.decode", "s", "The backend's decode: first to last token, less the gateway's relay time.", latencyBuckets)
	x.backendQueue = hist("infergate.backend.queue", "s", "The backend's own scheduler queue, as it reports it (vLLM per-request metrics, TGI x-queue-time).", latencyBuckets)
	x.prefill = hist("infergate.backend.prefill", "s", "The backend's own scheduling → first token, as it reports it (vLLM per-request metrics, llama.cpp timings).", latencyBuckets)
	x.requests = count("infergate.requests", "{request}", "Requests by model and outcome (ok, client_gone, timeout, upstream_error, no_backend, rejected, shed, backend_4xx, backend_5xx, shutdown).")
	x.disconnects = count("infergate.client.disconnects", "{request}", "Clients that left before their response was complete, by infergate.phase (queued, before_first_token, streaming).")
	x.truncated = count("infergate.upstream.truncated", "{stream}", "Backend streams that ended without finish_reason and [DONE], or were reset.")
	x.retries = count("infergate.retries", "{attempt}", "Upstream attempts beyond the first (failover before the first byte).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	for i, p := range [...]string{"queued", "before_first_token", "streaming"} {
		x.phases[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("infergate.phase", p)))}
	}
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
	ctx := context.Background()
	m.requests.Add(ctx, 1, s.request...)
	if r.ClientGone {
		phase := 0
		switch {
		case !tl.FirstTokenOut.IsZero():
			phase = 2
		case !tl.Admitted.IsZero():
			phase = 1
		}
		m.disconnects.Add(ctx, 1, m.phases[phase]...)
	}
	if r.Truncated {
		m.truncated.Add(ctx, 1, s.request...)
	}
	if m.off {
		return
	}
	m.srvDuration.Record(ctx, tl.Duration().Seconds(), s.base...)
	if w := tl.QueueWait(); w > 0 {
		m.queue.Record(ctx, w.Seconds(), s.base...)
	}
	if tl.Sent.IsZero() {
		return // never reached a backend
	}
	a := tl.Attribute(tl.Done)
	m.gateway.Record(ctx, a.Gateway.Seconds(), s.base...)
	conn := s.pooled
	if tl.NewConn {
		conn = s.newConn
	}
	m.connect.Record(ctx, a.Connect.Seconds(), conn...)
	if tl.UpstreamRTT > 0 {
		m.rtt.Record(ctx, tl.UpstreamRTT.Seconds(), s.base...)
	}
	m.model.Record(ctx, a.ModelTTFT.Seconds(), s.base...)
	m.opDuration.Record(ctx, since(tl.Sent, tl.Done).Seconds(), s.base...)
	if ttft := tl.TTFT(); ttft > 0 {
		m.srvTTFT.Record(ctx, ttft.Seconds(), s.base...)
		m.ttfc.Record(ctx, tl.ModelTTFT().Seconds(), s.base...)
		m.decode.Record(ctx, a.Decode.Seconds(), s.base...)
		m.relayMax.Record(ctx, tl.RelayMax.Seconds(), s.base...)
		span := since(tl.FirstTokenIn, tl.LastTokenIn)
		if tl.ContentEvents > 1 {
			m.tpoc.Record(ctx, span.Seconds()/float64(tl.ContentEvents-1), s.base...)
		}
		if tl.OutputTokens > 1 {
			m.srvTPOT.Record(ctx, span.Seconds()/float64(tl.OutputTokens-1), s.base...)
		}
	}
	if b := a.Backend; b.Source != "" {
		if b.Queue >= 0 {
			m.backendQueue.Record(ctx, b.Queue.Seconds(), s.base...)
		}
		if b.Prefill >= 0 {
			m.prefill.Record(ctx, b.Prefill.Seconds(), s.base...)
		}
	}
	if tl.PromptTokens > 0 || tl.OutputTokens > 0 {
		m.tokens.Record(ctx, int64(tl.PromptTokens), s.input...)
		m.tokens.Record(ctx, int64(tl.OutputTokens), s.output...)
	}
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
	s = newAttrSets(k)
	m.mu.Lock()
	if len(m.sets) < maxAttrSets {
		m.sets[k] = s
	}
	m.mu.Unlock()
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
	with := func(extra ...attribute.KeyValue) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(kv[:len(kv):len(kv)], extra...)...))}
	}
	return &attrSets{
		base:   with(),
		input:  with(attribute.String("gen_ai.token.type", "input")),
		output: with(attribute.String("gen_ai.token.type", "output")),
		// "new" includes the dial and any TLS handshake.
		newConn: with(attribute.String("infergate.connection", "new")),
		pooled:  with(attribute.String("infergate.connection", "pooled")),
		request: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("model", k.model), attribute.String("outcome", k.outcome)))},
	}
}

package proxy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/infergate/infergate/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// gatewayMetrics are the gateway's OpenTelemetry metrics: the timeline's
// (tracing.Metrics, recorded as each request ends) and gauges and
// counters read at collection time (admission, backends, request log).
type gatewayMetrics struct {
	*tracing.Metrics
	mp *tracing.MeterProvider

	// models seen as labels; past maxModelLabels names or
	// maxModelLabelBytes bytes of them, and for a name longer than
	// maxLabelBytes, the label is "other", so clients cannot grow the
	// series, or the scrape, without bound (in the quick start any model
	// name is routed).
	mu         sync.Mutex
	models     map[string]struct{}
	modelBytes int
}

const (
	maxModelLabels     = 64
	maxLabelBytes      = 64
	maxModelLabelBytes = 2048
)

func newGatewayMetrics(g *Gateway, mp *tracing.MeterProvider, cfg tracing.MetricsConfig) (*gatewayMetrics, error) {
	const scope = "github.com/infergate/infergate/proxy"
	meter := mp.Meter(scope)
	tm, err := tracing.NewMetrics(mp, scope, cfg)
	if err != nil {
		return nil, err
	}
	m := &gatewayMetrics{Metrics: tm, mp: mp, models: map[string]struct{}{}}
	if err := observe(meter, g); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return m, nil
}

// label returns model as a metrics label: "other" once the set is full.
func (m *gatewayMetrics) label(model string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.models[model]; !ok {
		if len(m.models) >= maxModelLabels || len(model) > maxLabelBytes || m.modelBytes+len(model) > maxModelLabelBytes {
			return "other"
		}
		m.models[model] = struct{}{}
		m.modelBytes += len(model)
	}
	return model
}

// observe registers what is read when metrics are collected: each
// component's instruments, registered where its state lives, with a
// callback of its own.
func observe(meter metric.Meter, g *Gateway) error {
	return errors.Join(g.observeShaping(meter), g.observeBackends(meter), g.observeTokenCounts(meter),
		g.observeLoad(meter), g.observePrefix(meter), g.observeShare(meter), g.observeTelemetry(meter), g.observeConns(meter),
		g.observeMirror(meter), g.observePanics(meter), g.observeClasses(meter), observeProcess(meter))
}

// instruments makes a component's observable instruments and registers
// its callback for them.
type instruments struct {
	meter metric.Meter
	made  []metric.Observable
	errs  []error
}

func (in *instruments) gauge(name, unit, desc string) metric.Int64ObservableGauge {
	i, err := in.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.made, in.errs = append(in.made, i), append(in.errs, err)
	return i
}

func (in *instruments) counter(name, unit, desc string) metric.Int64ObservableCounter {
	i, err := in.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.made, in.errs = append(in.made, i), append(in.errs, err)
	return i
}

// register has f observe the instruments made.
func (in *instruments) register(f metric.Callback) error {
	if err := errors.Join(in.errs...); err != nil {
		return err
	}
	_, err := in.meter.RegisterCallback(f, in.made...)
	return err
}

// backendAttrs are the attributes of a backend's series, and more.
func backendAttrs(p *pool, b *backend, more ...attribute.KeyValue) metric.ObserveOption {
	return metric.WithAttributes(append([]attribute.KeyValue{attribute.String("pool", p.name), attribute.String("backend", b.name)}, more...)...)
}

// observeProcess registers the process's goroutine count.
func observeProcess(meter metric.Meter) error {
	in := instruments{meter: meter}
	goroutines := in.gauge("infergate.goroutines", "{goroutine}", "Goroutines of the gateway process (a leak shows here first).")
	return in.register(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(goroutines, int64(runtime.NumGoroutine()))
		return nil
	})
}

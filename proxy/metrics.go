package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/tracing"
	"github.com/sony/gobreaker/v2"
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

// observe registers what is read when metrics are collected: the
// limiter's counters, every backend's requests in flight and breaker
// state, and the request log's drops.
func observe(meter metric.Meter, g *Gateway) error {
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		i, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	queued := gauge("infergate.queue.depth", "{request}", "Requests waiting for a slot.")
	inFlight := gauge("infergate.shaping.in_flight", "", "Requests and tokens holding a slot, by cap (level, name, unit).")
	limits := gauge("infergate.shaping.limit", "", "Each cap's limit, by cap (level, name, unit); 0 when that unit is not capped.")
	rejected := counter("infergate.shaping.rejections", "{request}", "Requests refused by admission control, by reason.")
	admitted := counter("infergate.shaping.admitted", "{request}", "Requests given a slot.")
	abandoned := counter("infergate.shaping.queue_abandoned", "{request}", "Requests whose client left while they waited.")
	redisUp := gauge("infergate.shaping.redis_up", "", "1 while the shared caps' Redis answers (only with shaping.redis).")
	redisDown := counter("infergate.shaping.redis_down", "", "Times Redis was found down and the caps fell back (on_failure).")
	upstream := gauge("infergate.upstream.in_flight", "{request}", "Requests in flight to each backend.")
	breaker := gauge("infergate.breaker.state", "", "Each backend's circuit breaker: 0 closed, 1 half-open, 2 open.")
	routed := counter("infergate.route.decisions", "{request}", "Picks of each backend by selection load and prefix, by reason (load, prefix_warm, prefix_cold, prefix_spill_queue, prefix_spill_kv, prefix_spill_imbalance).")
	loadEst := gauge("infergate.backend.load", "{request}", "Requests in each backend's batch and queue as selection load and prefix count them; source metrics (its own reading, corrected by the gateway's since) or gateway (its scrape failed or is stale).")
	tokenCounts := counter("infergate.backend.token_counts", "{request}", "Prompts counted for tokenizer backend, by source: the backend's form that counted it (tokenize, input_tokens, apply_template) or estimate (no exact count: the policy's estimate was used).")
	scrapeFail := counter("infergate.backend.load_scrape_failures", "{scrape}", "Failed scrapes of each backend's metrics by selection load and prefix.")
	prefixBlocks := counter("infergate.prefix.blocks", "{block}", "Prompt blocks routed to each backend by selection prefix (kind routed), and those the index expected it to hold (kind expected).")
	usageTokens := counter("infergate.backend.usage_prompt_tokens", "{token}", "Prompt tokens of each backend's answers that reported cached tokens (kind prompt), and those cached (kind cached): the hit ratio the backend reports.")
	dropped := counter("infergate.request_log.dropped", "{line}", "Request-log lines dropped because the writer was behind (the request path never waits).")
	logLost := counter("infergate.request_log.lost", "{line}", "Request-log lines lost to write errors (the log reopens its file and carries on).")
	spansDropped := counter("infergate.spans.dropped", "{span}", "Spans dropped because the exporter was behind.")
	connsOpen := gauge("infergate.connections.open", "{connection}", "Client connections open on the API listener.")
	connsRefused := counter("infergate.connections.refused", "{connection}", "Client connections closed unread because server.max_connections were open.")
	goroutines := gauge("infergate.goroutines", "{goroutine}", "Goroutines of the gateway process (a leak shows here first).")
	mirrorPairs := counter("infergate.mirror.pairs", "{pair}", "Mirrored pairs (and canary records) recorded.")
	mirrorDropped := counter("infergate.mirror.dropped", "{copy}", "Mirrored copies dropped, by rule and reason (cap_full: the rule's max_in_flight; aa_cap_full: the A/A copy; lost: the recorder was behind).")
	mirrorFileLost := counter("infergate.mirror.file_lost", "{pair}", "Pairs the pairs file could not take (a write error: a full disk, the file removed); the file is reopened and recording goes on.")
	mirrorInFlight := gauge("infergate.mirror.in_flight", "{copy}", "Mirrored copies waiting for their answers.")
	panics := counter("infergate.panics", "{panic}", "Panics recovered, by where: a request, its stream, the keep-alive forwarder, telemetry, health checks, shaping, the hang-up watcher. Each ended one request or restarted one loop; the process carried on.")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	reason := func(r string) metric.ObserveOption {
		return metric.WithAttributes(attribute.String("reason", r))
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := g.lim.Stats()
		o.ObserveInt64(queued, int64(s.Waiting))
		o.ObserveInt64(admitted, s.Admitted)
		o.ObserveInt64(abandoned, s.Cancelled)
		o.ObserveInt64(rejected, s.RejectedFull-s.RejectedFullTenant, reason("queue_full"))
		o.ObserveInt64(rejected, s.RejectedTimeout-s.RejectedTimeoutTenant, reason("queue_timeout"))
		o.ObserveInt64(rejected, s.RejectedFullTenant, reason("tenant_queue_full"))
		o.ObserveInt64(rejected, s.RejectedTimeoutTenant, reason("tenant_queue_timeout"))
		if s.Shared {
			up := int64(0)
			if s.SharedUp {
				up = 1
			}
			o.ObserveInt64(redisUp, up)
			o.ObserveInt64(redisDown, s.SharedDownTransitions)
			o.ObserveInt64(rejected, s.RejectedShared, reason("redis_down"))
		}
		for _, cp := range g.lim.Caps() {
			at := func(unit string) metric.ObserveOption {
				return metric.WithAttributes(attribute.String("level", cp.Level), attribute.String("name", cp.Name), attribute.String("unit", unit))
			}
			o.ObserveInt64(inFlight, cp.Requests, at("requests"))
			o.ObserveInt64(inFlight, cp.Tokens, at("tokens"))
			o.ObserveInt64(limits, cp.MaxRequests, at("requests"))
			o.ObserveInt64(limits, cp.MaxTokens, at("tokens"))
		}
		for _, p := range g.state.Load().pools {
			for _, b := range p.backends {
				at := metric.WithAttributes(attribute.String("pool", p.name), attribute.String("backend", b.name))
				o.ObserveInt64(upstream, b.Outstanding(), at)
				o.ObserveInt64(breaker, breakerValue(b.BreakerState()), at)
				for f := formTokenize; f < numCountForms; f++ {
					if n := b.counts.by[f].Load(); n > 0 {
						o.ObserveInt64(tokenCounts, n, metric.WithAttributes(attribute.String("pool", p.name), attribute.String("backend", b.name), attribute.String("source", f.String())))
					}
				}
				if p.load == nil {
					continue
				}
				for r := range numReasons {
					if n := b.reasons[r].Load(); n > 0 {
						o.ObserveInt64(routed, n, metric.WithAttributes(attribute.String("pool", p.name), attribute.String("backend", b.name), attribute.String("reason", r.String())))
					}
				}
				e := b.estimate(time.Now(), p.load.cfg.StaleAfter)
				src := "gateway"
				if e.fromMetrics {
					src = "metrics"
				}
				o.ObserveInt64(loadEst, int64(math.Round(e.total)), metric.WithAttributes(attribute.String("pool", p.name), attribute.String("backend", b.name), attribute.String("source", src)))
				if st := b.load.Load(); st != nil {
					o.ObserveInt64(scrapeFail, st.failures, at)
				}
				if p.prefix != nil {
					kind := func(k string) metric.ObserveOption {
						return metric.WithAttributes(attribute.String("pool", p.name), attribute.String("backend", b.name), attribute.String("kind", k))
					}
					o.ObserveInt64(prefixBlocks, b.promptBlocks.Load(), kind("routed"))
					o.ObserveInt64(prefixBlocks, b.expectedBlocks.Load(), kind("expected"))
					o.ObserveInt64(usageTokens, b.usagePrompt.Load(), kind("prompt"))
					o.ObserveInt64(usageTokens, b.usageCached.Load(), kind("cached"))
				}
			}
		}
		if g.rlog != nil {
			o.ObserveInt64(dropped, g.rlog.Dropped())
			o.ObserveInt64(logLost, g.rlog.Lost())
		}
		if g.tracer != nil {
			o.ObserveInt64(spansDropped, g.tracer.Dropped())
		}
		if cl := g.conns.Load(); cl != nil {
			o.ObserveInt64(connsOpen, cl.open.Load())
			o.ObserveInt64(connsRefused, cl.refused.Load())
		}
		o.ObserveInt64(goroutines, int64(runtime.NumGoroutine()))
		ps := g.pairs.Counts()
		o.ObserveInt64(mirrorFileLost, ps.FileLost)
		o.ObserveInt64(mirrorPairs, ps.Recorded)
		for k, n := range ps.Dropped {
			rule, why, _ := strings.Cut(k, " ")
			o.ObserveInt64(mirrorDropped, n, metric.WithAttributes(attribute.String("rule", rule), attribute.String("reason", why)))
		}
		if ps.Lost > 0 {
			o.ObserveInt64(mirrorDropped, ps.Lost, metric.WithAttributes(attribute.String("rule", ""), attribute.String("reason", "lost")))
		}
		o.ObserveInt64(mirrorInFlight, int64(g.MirrorsInFlight()))
		var health, scrapes int64
		for _, p := range g.state.Load().pools {
			if p.health != nil {
				health += p.health.panics.Load()
			}
			if p.scraper != nil {
				scrapes += p.scraper.panics.Load()
			}
		}
		for _, w := range [...]struct {
			where string
			n     int64
		}{{panicRequest, g.panicsRequest.Load()}, {panicStream, g.panicsStream.Load()}, {panicForward, g.panicsForward.Load()}, {panicMirror, g.panicsMirror.Load()},
			{panicTelemetry, g.telem.Panics()}, {"health", health}, {"load_scrape", scrapes}, {"shaping", s.Panics}, {"hangup", g.watch.Panics()}} {
			o.ObserveInt64(panics, w.n, metric.WithAttributes(attribute.String("where", w.where)))
		}
		return nil
	}, queued, inFlight, limits, rejected, admitted, abandoned, redisUp, redisDown, upstream, breaker, routed, loadEst, scrapeFail, prefixBlocks, usageTokens, dropped, logLost, spansDropped, connsOpen, connsRefused, goroutines, panics, mirrorPairs, mirrorDropped, mirrorFileLost, mirrorInFlight)
	return err
}

func breakerValue(s gobreaker.State) int64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

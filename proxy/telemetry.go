package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/tracing"
	"go.opentelemetry.io/otel/metric"
)

// A finished request's log line, span, metrics, live-view sample and
// request-log entry are built off the request path, by one goroutine of
// the gateway's: a plain answer (the server writes it after the handler
// returns), a stream's last chunk and the connection's next request do
// not wait for them, and the goroutine's grown stack is not grown again
// for every request. When its queue is full the request builds its own, so
// nothing is lost under load and nothing waits long.

// telemetryQueue bounds the requests waiting for the telemetry goroutine.
const telemetryQueue = 4096

// handOffLinger is how long the telemetry goroutine waits for more
// finished requests before it parks: under load it then wakes about once
// per linger instead of once per request (docs/benchmarks-log.md,
// "2026-12-03: Request cost against nginx (issue 16)").
const handOffLinger = 2 * time.Millisecond

// startTelemetry starts the goroutine; stopTelemetry drains and stops it.
func (g *Gateway) startTelemetry() {
	g.telem = bgqueue.Start(bgqueue.Config[*exchange]{Size: telemetryQueue, Handle: (*exchange).emit, Linger: handOffLinger,
		OnPanic: func(v any, stack []byte) {
			g.log.Error("panic recovered in the telemetry goroutine; it carries on", "panic", fmt.Sprint(v), "stack", string(stack))
		}})
}

// stopTelemetry drains the queue and stops the goroutine; requests that
// finish later (past the drain's deadline) build their own.
func (g *Gateway) stopTelemetry() { g.telem.Close() }

// submit hands x over; x is not touched by the request path afterwards.
// When the queue is full the request builds its own.
func (g *Gateway) submit(x *exchange) {
	if !g.telem.Offer(x) {
		x.emit()
	}
}

// syncTelemetry returns once every request handed over before it has
// been recorded: a scrape then counts every request that ended before it.
func (g *Gateway) syncTelemetry() { g.telem.Sync() }

// emit builds the request's telemetry.
func (x *exchange) emit() {
	if b := x.backend; b != nil {
		if x.tl.CachedReported {
			b.usagePrompt.Add(int64(x.tl.PromptTokens))
			b.usageCached.Add(int64(x.tl.CachedTokens))
		}
		if tl := &x.tl; x.outcome == outcomeOK && tl.ContentEvents > 1 && tl.LastTokenIn.After(tl.FirstTokenIn) {
			b.observeTPOT(tl.LastTokenIn.Sub(tl.FirstTokenIn) / time.Duration(tl.ContentEvents-1))
		}
	}
	x.logLine()
	if x.logged {
		x.logEntry()
	}
	x.endSpan()
	x.record()
	if x.cls.on {
		x.recordClass()
	}
}

// logLine writes the request's line to the gateway's log, with the time
// the request ended rather than the time the line is written.
func (x *exchange) logLine() {
	tl := &x.tl
	lvl := slog.LevelInfo
	if x.outcome != outcomeOK && x.outcome != outcomeRejected && x.outcome != outcomeBackend4xx && x.outcome != outcomeClientGone && x.outcome != outcomeShed && x.outcome != outcomePreempted {
		lvl = slog.LevelWarn
	}
	if !x.g.log.Enabled(context.Background(), lvl) {
		return
	}
	attrs := []slog.Attr{
		slog.String("id", x.id), slog.String("method", x.method), slog.String("path", x.path),
		slog.String("model", x.model), slog.Int("status", x.status), slog.String("outcome", x.outcome),
		slog.Float64("duration_ms", ms(tl.Duration())),
	}
	if x.backend != nil {
		attrs = append(attrs, slog.String("backend", x.backend.name), slog.Int("attempts", tl.Attempts))
		if x.routeWhy != "" {
			attrs = append(attrs, slog.String("route", x.routeWhy))
		}
	}
	if tl.CachedReported {
		attrs = append(attrs, slog.Int("cached_tokens", tl.CachedTokens))
	}
	if w := tl.QueueWait(); w > time.Millisecond {
		attrs = append(attrs, slog.Float64("queue_ms", ms(w)))
	}
	if x.stream {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(tl.TTFT())), slog.Int("events", tl.Events))
	}
	if tl.ReasoningTokens > 0 {
		attrs = append(attrs, slog.Int("reasoning_tokens", tl.ReasoningTokens))
	}
	if tl.ReasoningEvents > 0 { // a stream's thinking, timed
		attrs = append(attrs, slog.Float64("reasoning_ms", ms(tl.Reasoning())), slog.Float64("ttfo_ms", ms(tl.TTFO())))
	}
	if p := tl.Policy; p != (tracing.PolicyNote{}) {
		attrs = append(attrs, slog.Group("policy", slog.Int("input_tokens", p.InputTokens), slog.Bool("estimated", p.Estimated),
			slog.Int("trimmed_tokens", p.TrimmedTokens), slog.Int("trimmed_messages", p.TrimmedMessages),
			slog.Int("max_tokens", p.MaxTokens), slog.Int("requested_max_tokens", p.RequestedMaxTokens), slog.Bool("unknown_history", p.UnknownHistory)))
		if tl.LengthByPolicy() {
			attrs = append(attrs, slog.Bool("length_by_policy", true))
		}
	}
	if x.tenant != "" && x.tenant != "anonymous" {
		attrs = append(attrs, slog.String("tenant", x.tenant))
	}
	if x.cls.on {
		attrs = append(attrs, slog.String("class", x.cls.class.String()))
		if x.cls.lowered {
			attrs = append(attrs, slog.String("class_requested", x.cls.asked.String()))
		}
	}
	if r := x.refusal(); r != "" {
		attrs = append(attrs, slog.String("refusal", r))
	}
	if x.err != nil {
		attrs = append(attrs, slog.String("err", x.err.Error()))
	}
	r := slog.NewRecord(tl.Done, lvl, "request", 0)
	r.AddAttrs(attrs...)
	_ = x.g.log.Handler().Handle(context.Background(), r)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logEntry hands the request's entry to the request log.
func (x *exchange) logEntry() {
	tl := &x.tl
	e := tracing.Entry{Time: tl.Received, ID: x.id, Path: x.path, Tenant: x.tenant, Model: x.model, Stream: x.stream, Status: x.status,
		Outcome: x.outcome, InputTokens: tl.PromptTokens, OutputTokens: tl.OutputTokens, Events: tl.Events, Attempts: tl.Attempts,
		TTFT: ms(tl.TTFT()), FinishReason: tl.FinishReason, LengthByPolicy: tl.LengthByPolicy(), Body: x.logBody, ReasoningTokens: tl.ReasoningTokens}
	if tl.Policy != (tracing.PolicyNote{}) {
		p := tl.Policy
		e.Policy = &p
	}
	if x.backend != nil {
		e.Backend = x.backend.name
		if x.routeWhy != "" {
			e.Route = x.routeWhy
		}
	}
	if tl.CachedReported {
		e.CachedTokens = &tl.CachedTokens
	}
	if !tl.Sent.IsZero() {
		e.Timing = tracing.NewTiming(tl.Attribute(time.Now()), tl.TTFT())
	}
	if x.err != nil {
		e.Error = x.err.Error()
	}
	if x.cls.on {
		e.Class = x.cls.class.String()
		if x.cls.lowered {
			e.ClassRequested = x.cls.asked.String()
		}
	}
	e.Refusal = x.refusal()
	x.g.rlog.Log(e)
}

// observeTelemetry registers the request log's and the tracer's drops.
func (g *Gateway) observeTelemetry(meter metric.Meter) error {
	in := instruments{meter: meter}
	dropped := in.counter("infergate.request_log.dropped", "{line}", "Request-log lines dropped because the writer was behind (the request path never waits).")
	lost := in.counter("infergate.request_log.lost", "{line}", "Request-log lines lost to write errors (the log reopens its file and carries on).")
	spansDropped := in.counter("infergate.spans.dropped", "{span}", "Spans dropped because the exporter was behind.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		if g.rlog != nil {
			o.ObserveInt64(dropped, g.rlog.Dropped())
			o.ObserveInt64(lost, g.rlog.Lost())
		}
		if g.tracer != nil {
			o.ObserveInt64(spansDropped, g.tracer.Dropped())
		}
		return nil
	})
}

package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/shaping"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Per-class figures: what the limiter counts (admitted, queued, shed,
// preempted, timed out, waiting, in flight) read at collection time, and
// what each request's end records (queue time, TTFT, attainment of the
// class's slo_ttft). Metric names (Prometheus form in docs/classes.md):
//
//	infergate.class.requests                                          counter, by class and outcome
//	infergate.class.admitted, .queued, .shed, .preempted, .timed_out  counters
//	infergate.class.waiting, .in_flight                               gauges
//	infergate.class.slo_judged, .slo_met                              counters
//	infergate.class.queue_time, .ttft                                 histograms (s)
//
// each with attribute class (priority, default, flex); cmd/infergate top
// (topclass.go) and the Grafana dashboard read them: keep the names.

// classMetrics are the instruments recorded as requests end, and the
// attainment counts /admin/stats shows.
type classMetrics struct {
	queueTime, ttft metric.Float64Histogram
	requests        metric.Int64Counter
	at              [shaping.NumClasses]metric.MeasurementOption
	judged, met     [shaping.NumClasses]atomic.Int64
}

// classBounds are the histograms' buckets (seconds): queue waits and
// first tokens from a millisecond to two minutes.
var classBounds = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// observeClasses makes the class instruments and registers the limiter's
// per-class counts; nothing is observed while classes are off.
func (g *Gateway) observeClasses(meter metric.Meter) error {
	cm := &classMetrics{}
	var err error
	if cm.requests, err = meter.Int64Counter("infergate.class.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests that ended, by service class and outcome (ok, shed, preempted, ...; bad requests are not counted).")); err != nil {
		return err
	}
	if cm.queueTime, err = meter.Float64Histogram("infergate.class.queue_time", metric.WithUnit("s"),
		metric.WithDescription("Time requests waited for an admission slot, by service class."), metric.WithExplicitBucketBoundaries(classBounds...)); err != nil {
		return err
	}
	if cm.ttft, err = meter.Float64Histogram("infergate.class.ttft", metric.WithUnit("s"),
		metric.WithDescription("Gateway-side time to first token (a plain answer: to the answer), by service class."), metric.WithExplicitBucketBoundaries(classBounds...)); err != nil {
		return err
	}
	for c := range cm.at {
		cm.at[c] = metric.WithAttributeSet(attribute.NewSet(attribute.String("class", shaping.Class(c).String())))
	}
	g.classm = cm
	in := instruments{meter: meter}
	admitted := in.counter("infergate.class.admitted", "{request}", "Requests given a slot, by service class.")
	queued := in.counter("infergate.class.queued", "{request}", "Requests that had to wait for a slot, by service class.")
	shed := in.counter("infergate.class.shed", "{request}", "Waiting requests taken out of a full queue for a higher class, by service class.")
	preempted := in.counter("infergate.class.preempted", "{request}", "Requests whose slot went to a higher class before their first byte, by service class.")
	timedOut := in.counter("infergate.class.timed_out", "{request}", "Requests that waited past their class's queue_timeout, by service class.")
	waiting := in.gauge("infergate.class.waiting", "{request}", "Requests waiting for a slot, by service class.")
	inFlight := in.gauge("infergate.class.in_flight", "{request}", "Requests holding a slot, by service class (this replica).")
	judged := in.counter("infergate.class.slo_judged", "{request}", "Requests judged against their class's slo_ttft (answered or refused; not bad requests).")
	met := in.counter("infergate.class.slo_met", "{request}", "Requests answered within their class's slo_ttft.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		if !g.state.Load().cfg.Classes.Enabled {
			return nil
		}
		s := g.lim.Stats()
		for c, cs := range s.Classes {
			at := metric.WithAttributes(attribute.String("class", shaping.Class(c).String()))
			o.ObserveInt64(admitted, cs.Admitted, at)
			o.ObserveInt64(queued, cs.Queued, at)
			o.ObserveInt64(shed, cs.Shed, at)
			o.ObserveInt64(preempted, cs.Preempted, at)
			o.ObserveInt64(timedOut, cs.TimedOut, at)
			o.ObserveInt64(waiting, int64(cs.Waiting), at)
			o.ObserveInt64(inFlight, cs.InFlightRequests, at)
			o.ObserveInt64(judged, cm.judged[c].Load(), at)
			o.ObserveInt64(met, cm.met[c].Load(), at)
		}
		return nil
	})
}

// recordClass records the request's class figures (telemetry goroutine).
func (x *exchange) recordClass() {
	cm := x.g.classm
	if cm == nil || x.outcome == outcomeRejected {
		return
	}
	c, tl := x.cls.class, &x.tl
	ctx := context.Background()
	cm.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("class", c.String()), attribute.String("outcome", x.outcome)))
	if !tl.Admitted.IsZero() {
		cm.queueTime.Record(ctx, tl.QueueWait().Seconds(), cm.at[c])
	}
	first := x.firstSeen()
	if first > 0 {
		cm.ttft.Record(ctx, first.Seconds(), cm.at[c])
	}
	if slo := x.st.cfg.Shaping.Classes.Of(c).SLOTTFT; slo > 0 {
		cm.judged[c].Add(1)
		if x.outcome == outcomeOK && first > 0 && first <= slo {
			cm.met[c].Add(1)
		}
	}
}

// refusal is why admission refused the request or took its slot back,
// "" otherwise: a stream evicted after its first byte has no header to
// say it, but its log entry does.
func (x *exchange) refusal() string {
	if x.cls.refusal == "" && x.outcome == outcomePreempted {
		return "preempted"
	}
	return x.cls.refusal
}

// firstSeen is when the client saw its first token: a stream's TTFT, a
// plain answer's whole time; 0 when it saw none.
func (x *exchange) firstSeen() time.Duration {
	if x.outcome != outcomeOK {
		return 0
	}
	if x.stream {
		return x.tl.TTFT()
	}
	return x.tl.Duration()
}

// classStates is /admin/stats' per-class block, nil with classes off.
func (g *Gateway) classStates(s shaping.Stats) []adminapi.ClassState {
	st := g.state.Load()
	if !st.cfg.Classes.Enabled {
		return nil
	}
	out := make([]adminapi.ClassState, 0, shaping.NumClasses)
	for _, c := range shaping.ClassesByRank {
		cs := s.Classes[c]
		e := adminapi.ClassState{Class: c.String(), Waiting: cs.Waiting, InFlight: cs.InFlightRequests, Admitted: cs.Admitted, Queued: cs.Queued,
			Shed: cs.Shed, Preempted: cs.Preempted, TimedOut: cs.TimedOut}
		if slo := st.cfg.Shaping.Classes.Of(c).SLOTTFT; slo > 0 {
			e.SLOTTFT = float64(slo.Microseconds()) / 1000
		}
		if cm := g.classm; cm != nil {
			e.Judged, e.SLOMet = cm.judged[c].Load(), cm.met[c].Load()
		}
		out = append(out, e)
	}
	return out
}

package proxy

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// A panic while serving one request ends that request and nothing else
// (DESIGN: nothing a client or backend sends can take the process down):
// before the first byte the client gets a 500 in OpenAI's error form,
// after it an SSE error event and the end of the stream; the request's
// slot, lease and backend connection are released through finishWith as
// on any other path; the panic is logged with its stack and counted in
// infergate_panics_total. Background goroutines are supervised the same
// way (internal/supervise, internal/bgqueue).

// errPanic ends a request whose serving panicked.
var errPanic = errors.New("proxy: internal error (a panic, recovered)")

// panicKind is where on the request path a panic was recovered; the
// gateway counts each kind (Gateway.panics). The loops beside it
// (telemetry, health checks, load scrapes, shaping, the hang-up watcher)
// count their own.
type panicKind uint8

const (
	panicRequest panicKind = iota // the handler, before the response was committed
	panicStream                   // a response written on the hijacked connection
	panicForward                  // the keep-alive path's forwarding goroutine
	panicMirror                   // a mirrored copy's goroutine
	numPanicKinds
)

// String is the kind as infergate_panics_total labels it.
func (k panicKind) String() string {
	return [numPanicKinds]string{"request", "stream", "forward", "mirror"}[k]
}

// recovered logs a recovered panic with its stack and counts it.
func (g *Gateway) recovered(where panicKind, v any, id string) {
	g.panics[where].Add(1)
	g.log.Error("panic recovered; the rest of the gateway carries on", "where", where.String(), "id", id,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// recoverRequest ends a request whose handler panicked.
func (x *exchange) recoverRequest(rc *fasthttp.RequestCtx, v any) {
	x.g.recovered(panicRequest, v, x.id)
	switch {
	case x.streamed || x.finished:
		// The hijacked connection owns the response, or the request was
		// already released: nothing is left to do here.
		return
	case !x.started:
		rc.Response.Reset()
		rc.Response.Header.Set("X-Request-Id", x.id)
		ce := errorResponse(errPanic)
		writeError(rc, ce.status, ce.typ, ce.code, ce.msg)
		x.status, x.outcome, x.err = ce.status, ce.outcome, errPanic
		x.model = ""
		x.tl.Done = time.Now()
		x.report()
	default:
		rc.Response.Reset()
		rc.Response.Header.Set("X-Request-Id", x.id)
		x.fail(rc, errPanic)
	}
}

// endAfterPanic ends a stream whose writer panicked: it tells the client
// (an SSE error event, written straight as one chunk) when the connection
// still takes writes, and releases the request.
func (x *exchange) endAfterPanic(s streamer, cw *chunkWriter, v any) {
	x.g.recovered(panicStream, v, x.id)
	if cw.err == nil {
		ce := errorResponse(errPanic)
		_, _ = cw.Write(x.errorEvent(ce))
		if !cw.raw && cw.err == nil {
			_, _ = cw.c.Write([]byte("0\r\n\r\n"))
		}
	}
	s.release(errPanic)
}

// forwardSafely is forward for the keep-alive path's goroutine: a panic
// there is reported as errPanic on res, so the stream still ends.
func (x *exchange) forwardSafely(res chan<- error) {
	defer func() {
		if v := recover(); v != nil {
			x.g.recovered(panicForward, v, x.id)
			res <- errPanic
		}
	}()
	res <- x.forward(true)
}

// failpoints, which only tests set, is called at named points of a
// request's life ("admitted", "attempt", "stream"), where a test makes it
// panic. A field rather than a build tag, so that the tests that use it
// run under the plain go test ./... CI runs; the price is one nil check
// at each point, three a request at most and none per event.
type failpoints func(point, id string)

// at calls f, when set.
func (f failpoints) at(point, id string) {
	if f != nil {
		f(point, id)
	}
}

// observePanics registers the panics recovered, by where: the request
// path's, and those of the loops that count their own.
func (g *Gateway) observePanics(meter metric.Meter) error {
	in := instruments{meter: meter}
	panics := in.counter("infergate.panics", "{panic}", "Panics recovered, by where: a request, its stream, the keep-alive forwarder, telemetry, health checks, shaping, the hang-up watcher. Each ended one request or restarted one loop; the process carried on.")
	where := func(w string) metric.ObserveOption { return metric.WithAttributes(attribute.String("where", w)) }
	return in.register(func(_ context.Context, o metric.Observer) error {
		for k := range numPanicKinds {
			o.ObserveInt64(panics, g.panics[k].Load(), where(k.String()))
		}
		var health, scrapes int64
		for _, p := range g.state.Load().pools {
			if p.health != nil {
				health += p.health.panics.Load()
			}
			if p.scraper != nil {
				scrapes += p.scraper.panics.Load()
			}
		}
		o.ObserveInt64(panics, g.telem.Panics(), where("telemetry"))
		o.ObserveInt64(panics, health, where("health"))
		o.ObserveInt64(panics, scrapes, where("load_scrape"))
		o.ObserveInt64(panics, g.lim.Stats().Panics, where("shaping"))
		o.ObserveInt64(panics, g.watch.Panics(), where("hangup"))
		return nil
	})
}

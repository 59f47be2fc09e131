package proxy

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/valyala/fasthttp"
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

// Where a panic was recovered, as infergate_panics_total labels it.
const (
	panicRequest   = "request"   // the handler, before the response was committed
	panicStream    = "stream"    // a response written on the hijacked connection
	panicForward   = "forward"   // the keep-alive path's forwarding goroutine
	panicMirror    = "mirror"    // a mirrored copy's goroutine
	panicTelemetry = "telemetry" // the telemetry goroutine (metrics, spans, request log)
)

// recovered logs a recovered panic with its stack and counts it.
func (g *Gateway) recovered(where string, v any, id string) {
	switch where {
	case panicRequest:
		g.panicsRequest.Add(1)
	case panicStream:
		g.panicsStream.Add(1)
	case panicForward:
		g.panicsForward.Add(1)
	case panicMirror:
		g.panicsMirror.Add(1)
	}
	g.log.Error("panic recovered; the rest of the gateway carries on", "where", where, "id", id,
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

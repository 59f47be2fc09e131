package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
	pathModels      = []byte("/v1/models")
	pathV1          = []byte("/v1/")
	eventStream     = []byte("text/event-stream")
	keepAliveLine   = []byte(": keep-alive\n\n")
)

func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	switch {
	case bytes.Equal(path, pathChat), bytes.Equal(path, pathCompletions):
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			writeError(ctx, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use POST for "+string(path))
			return
		}
		g.proxy(ctx, true)
	case bytes.Equal(path, pathModels) && g.state.Load().modelList != nil:
		if !ctx.IsGet() {
			ctx.Response.Header.Set("Allow", "GET")
			writeError(ctx, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use GET for /v1/models")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(g.state.Load().modelList)
	case bytes.HasPrefix(path, pathV1):
		g.proxy(ctx, false)
	case string(path) == "/healthz":
		ctx.Response.Header.Set("X-Infergate-Config-Hash", g.state.Load().configHash)
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("ok\n")
	case string(path) == "/readyz":
		ctx.SetContentType("text/plain")
		if g.Ready() {
			ctx.SetBodyString("ready\n")
		} else {
			ctx.SetStatusCode(http.StatusServiceUnavailable)
			ctx.SetBodyString("no healthy backend\n")
		}
	default:
		writeError(ctx, http.StatusNotFound, openai.TypeNotFound, "not_found", "no route for "+string(path))
	}
}

// readError answers requests fasthttp could not read: too large, or
// malformed at the HTTP level. It runs instead of handle.
func (g *Gateway) readError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
		return
	}
	var se interface{ Timeout() bool }
	if errors.As(err, &se) && se.Timeout() {
		writeError(ctx, http.StatusRequestTimeout, openai.TypeInvalidRequest, "request_timeout", "the request was not read in time")
		return
	}
	writeError(ctx, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request", "malformed HTTP request")
}

// writeError sets an OpenAI-style error response.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, code, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendError(nil, typ, code, msg))
}

// exchange is one proxied request, from the handler through the stream
// writer. It holds nothing of the RequestCtx.
type exchange struct {
	g      *Gateway
	st     *state
	id     string
	method string
	path   string
	query  string // "?..." or empty
	model  string
	stream bool
	tl     tracing.Timeline

	ctx    context.Context
	cancel context.CancelCauseFunc
	stopT  context.CancelFunc
	watch  *hangup.Handle

	ureq    *fasthttp.Request
	route   *route
	backend *Backend
	done    func(ok bool) // the breaker permit of backend
	up      *upstream
	reuse   bool                // the upstream body was read to its end
	er      *openai.EventReader // set once the first event was awaited
	permit  shaping.Permit      // the admission slot, released by finishWith
	timing  bool                // the client asked for X-Infergate-Timing
	tenant  string              // as admission named it
	logged  bool                // this request goes to the request log
	logBody []byte              // its body, copied, when the log keeps bodies
	// parent is the client's span (from its traceparent), sc the
	// request's own, decided at receipt; both invalid without a tracer.
	parent, sc trace.SpanContext

	status  int
	outcome string
	err     error
}

// requestID returns the client's X-Request-Id when it is sane, else a new one.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := ctx.Request.Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
		return string(id)
	}
	var b [32]byte
	hex := strconv.AppendUint(b[:0], rand.Uint64()|1<<63, 16)
	hex = strconv.AppendUint(hex, rand.Uint64()|1<<63, 16)
	return string(hex)
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// proxy routes and forwards a request. strict requests (the completion
// routes) must carry a JSON body with a string model; other /v1 paths are
// routed by their model when they have one, else to the default pool.
func (g *Gateway) proxy(ctx *fasthttp.RequestCtx, strict bool) {
	x := &exchange{g: g, st: g.state.Load(), method: string(ctx.Method()), path: string(ctx.Path())}
	x.tl.Received = time.Now() // fasthttp calls the handler once the whole request is read
	x.id = requestID(ctx)
	// Only a client that asks gets the timing (nothing changes for others).
	x.timing = len(ctx.Request.Header.Peek("X-Infergate-Timing")) > 0
	ctx.Response.Header.Set("X-Request-Id", x.id)
	if q := ctx.URI().QueryString(); len(q) > 0 {
		x.query = "?" + string(q)
	}

	body := ctx.PostBody()
	if rl := g.rlog; rl != nil && rl.Sample() {
		x.logged = true
		if n := rl.BodyBytes(); n > 0 && len(body) <= n && len(body) > 0 {
			x.logBody = bytes.Clone(body) // ctx's memory is not ours after the handler
		}
	}
	var env openai.Envelope
	var err error
	if strict || len(body) > 0 {
		env, err = openai.ScanRequest(body)
		if err != nil && (strict || x.st.def == nil) {
			x.reject(ctx, http.StatusBadRequest, openai.TypeInvalidRequest, scanErrorCode(err), strings.TrimPrefix(err.Error(), "openai: "))
			return
		}
	}
	x.model, x.stream = env.Model, env.Stream
	if err != nil {
		x.model = ""
	}
	x.route = x.st.lookup(x.model)
	if x.route == nil {
		msg := fmt.Sprintf("The model `%s` does not exist or is not served by this gateway.", x.model)
		if x.model == "" {
			msg = "this path needs a model in its JSON body"
		}
		x.reject(ctx, http.StatusNotFound, openai.TypeInvalidRequest, "model_not_found", msg)
		return
	}
	x.beginSpan(ctx)
	if x.route.upstreamModel != "" && err == nil && env.Model != "" {
		body = openai.RewriteModel(body, env, x.route.upstreamModel)
	}
	x.start(ctx, body)
	if err := x.admit(ctx, body); err != nil {
		x.fail(ctx, err)
		return
	}

	ka := x.st.cfg.KeepAlive
	if ka.Delay > 0 && x.stream {
		x.forwardWithKeepAlive(ctx, ka)
		return
	}
	if err := x.forward(false); err != nil {
		x.fail(ctx, err)
		return
	}
	x.commit(ctx)
}

func scanErrorCode(err error) string {
	if errors.Is(err, openai.ErrInvalidJSON) || errors.Is(err, openai.ErrNotObject) {
		return "invalid_json"
	}
	return "invalid_field"
}

// reject answers a request that never reaches a backend.
func (x *exchange) reject(ctx *fasthttp.RequestCtx, status int, typ, code, msg string) {
	writeError(ctx, status, typ, code, msg)
	x.status, x.outcome = status, outcomeRejected
	x.model = "" // an unknown or absent model is not a metrics label
	x.tl.Done = time.Now()
	x.report()
}

// start sets up the request's context, hang-up watch and upstream request.
func (x *exchange) start(ctx *fasthttp.RequestCtx, body []byte) {
	g, cfg := x.g, &x.st.cfg
	g.inflight.Add(1)
	c, cancel := context.WithCancelCause(g.base)
	x.ctx, x.stopT = context.WithTimeoutCause(c, cfg.Timeouts.Total, errTotalTimeout)
	x.cancel = cancel
	x.watch = g.watch.Watch(ctx.Conn(), func() { cancel(errClientGone) })

	r := fasthttp.AcquireRequest()
	r.Header.DisableNormalizing()
	r.Header.SetMethodBytes(ctx.Method())
	copyRequestHeaders(&r.Header, &ctx.Request.Header, cfg.Server.ForwardAuthorization)
	r.Header.Set("X-Request-Id", x.id)
	r.Header.Del("X-Infergate-Timing") // the gateway's own, not the backend's
	x.injectSpan(&r.Header)
	if x.stream {
		// The relay finds event boundaries in the bytes: ask for them
		// uncompressed.
		r.Header.Del("Accept-Encoding")
	}
	if ta, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		var buf [128]byte
		xff := buf[:0]
		if prior := ctx.Request.Header.Peek("X-Forwarded-For"); len(prior) > 0 {
			xff = append(append(xff, prior...), ", "...)
		}
		xff = ta.AddrPort().Addr().Unmap().AppendTo(xff)
		r.Header.SetBytesV("X-Forwarded-For", xff)
	}
	r.SetBody(body)
	x.ureq = r
}

// forward tries backends until one answers with headers that can go to the
// client: a connect error, a stale connection, a 5xx or a 429 moves on to
// another backend while retries and the budget allow; nothing has reached
// the client yet. With fill set, a streaming answer's first event is also
// awaited (the keep-alive path waits for it off the handler).
func (x *exchange) forward(fill bool) error {
	cfg := &x.st.cfg
	pool := x.route.pool
	x.st.budget.request(time.Now())
	var tried [8]*Backend
	nTried := 0
	for {
		b, done, err := pool.pick(tried[:nTried], time.Now())
		if err != nil {
			return err
		}
		b.outstanding.Add(1)
		x.prepare(b)
		x.tl.Attempts++
		up, err := b.roundTrip(x.ctx, x.ureq, &cfg.Timeouts, &x.tl)
		if err != nil {
			cause := context.Cause(x.ctx)
			// A client that left or a total timeout is not the backend's fault.
			done(cause != nil)
			b.outstanding.Add(-1)
			// Connect errors and resets before any response byte move on;
			// a first-byte timeout does not (it would double the wait).
			if cause == nil && (errors.Is(err, errConnect) || errors.Is(err, errUpstream)) && x.canRetry(pool, tried[:nTried], b) {
				tried[nTried] = b
				nTried++
				x.g.log.Warn("upstream attempt failed, trying another backend", "id", x.id, "backend", b.name, "err", err)
				continue
			}
			return err
		}
		status := up.resp.StatusCode()
		if status >= 500 || status == http.StatusTooManyRequests {
			if x.canRetry(pool, tried[:nTried], b) {
				up.finish(false)
				done(status == http.StatusTooManyRequests) // 429 is load, not failure
				b.outstanding.Add(-1)
				tried[nTried] = b
				nTried++
				x.g.log.Warn("backend answered with an error, trying another backend", "id", x.id, "backend", b.name, "status", status)
				continue
			}
		}
		x.backend, x.done, x.up = b, done, up
		if fill && bytes.HasPrefix(up.resp.Header.ContentType(), eventStream) {
			x.fillFirst()
		}
		return nil
	}
}

// canRetry reports whether another attempt is allowed and has somewhere to go.
func (x *exchange) canRetry(p *Pool, tried []*Backend, failed *Backend) bool {
	max := x.st.cfg.Retries.Max
	if max < 0 || x.tl.Attempts > max || len(tried)+1 >= 8 {
		return false
	}
	now := time.Now()
	other := false
	for _, b := range p.backends {
		if b != failed && !contains(tried, b) && b.Available(now) {
			other = true
			break
		}
	}
	if !other || !x.st.budget.retry(now) {
		return false
	}
	x.g.m.Retry()
	return true
}

// prepare points the upstream request at b.
func (x *exchange) prepare(b *Backend) {
	r := x.ureq
	r.SetRequestURI("http://" + b.host + b.prefix + x.path + x.query)
	r.Header.SetHost(b.host)
	if b.auth != "" {
		r.Header.Set("Authorization", b.auth)
	} else if !x.st.cfg.Server.ForwardAuthorization {
		r.Header.Del("Authorization")
	}
}

// commit sends the chosen backend's response: a stream is relayed event
// by event after the handler returns; any other body is read whole first.
func (x *exchange) commit(ctx *fasthttp.RequestCtx) {
	up := x.up
	x.status = up.resp.StatusCode()
	ctx.SetStatusCode(x.status)
	if st, ok := openai.ServerTimingOfHeaders(up.resp.Header.Peek); ok {
		x.tl.Server = st // TGI; a body's own account replaces it
	}
	copyResponseHeaders(&ctx.Response.Header, &up.resp.Header)
	if bytes.HasPrefix(up.resp.Header.ContentType(), eventStream) && x.status < 300 {
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
		x.g.streamResponse(ctx, x.ctx, x)
		return
	}
	body, err := x.readWhole()
	if err != nil {
		ctx.Response.Reset()
		ctx.Response.Header.Set("X-Request-Id", x.id)
		ce := errorResponse(err)
		x.err = err
		x.finishWith(ce.status, ce.outcome)
		if ce.status != 499 {
			writeError(ctx, ce.status, ce.typ, ce.code, ce.msg)
		}
		return
	}
	ctx.Response.SetBodyRaw(body) // ours, and not touched again: no copy
	if x.timing {
		a := x.tl.Attribute(time.Now())
		ctx.Response.Header.SetBytesV("Server-Timing", a.AppendServerTiming(nil))
	}
	x.finishWith(x.status, statusOutcome(x.status))
}

func statusOutcome(status int) string {
	switch {
	case status >= 500:
		return outcomeBackend5xx
	case status >= 400:
		return outcomeBackend4xx
	}
	return outcomeOK
}

// readWhole reads a non-streamed body, bounded in size and by the idle
// timeout between reads.
func (x *exchange) readWhole() ([]byte, error) {
	limit := x.st.cfg.Server.MaxResponseBytes
	idle := x.st.cfg.Timeouts.Idle
	buf := make([]byte, 0, 4096)
	if n := x.up.resp.Header.ContentLength(); n > 0 && n <= limit {
		buf = make([]byte, 0, n)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		_ = x.up.conn.SetReadDeadline(time.Now().Add(idle))
		n, err := x.up.body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errResponseTooLarge
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				x.reuse = true
				x.tl.Done = time.Now()
				if u, ok := openai.UsageOf(buf); ok {
					x.tl.PromptTokens, x.tl.OutputTokens = u.PromptTokens, u.CompletionTokens
				}
				if st, ok := openai.ServerTimingOf(buf); ok {
					x.tl.Server = st
				}
				if f := openai.FinishReason(buf); f != nil {
					x.tl.FinishReason = tracing.FinishReasonOf(f)
				}
				return buf, nil
			}
			return nil, x.readErr(err)
		}
	}
}

// readErr names why reading the backend's body stopped.
func (x *exchange) readErr(err error) error {
	if cause := context.Cause(x.ctx); cause != nil {
		return cause
	}
	if isTimeout(err) {
		return errIdleTimeout
	}
	return fmt.Errorf("%w: %w", errEndedEarly, err)
}

// body runs on the client connection once the handler has returned (see
// streamResponse): it relays the events, then ends the stream honestly.
func (x *exchange) body(w *bufio.Writer) { x.relayStream(w) }

// abandon releases a stream whose body will never run.
func (x *exchange) abandon() {
	x.err = fmt.Errorf("%w before its stream started", errClientGone)
	if x.er != nil {
		x.putReader(x.er)
	}
	x.finishWith(499, outcomeClientGone)
}

func (x *exchange) relayStream(w *bufio.Writer) {
	er := x.reader()
	cfg := &x.st.cfg
	out := relay(w, er, x.up.conn, cfg.Timeouts.FirstByte, cfg.Timeouts.Idle, &x.tl, x.timing)
	x.endStream(w, out)
	x.putReader(er)
}

// ready reports whether the stream's first event has fully arrived (with
// the headers, typically), reading nothing that is not there yet.
func (x *exchange) ready() bool {
	if x.er == nil {
		x.er = readerPool.Get().(*openai.EventReader)
		x.er.Reset(&x.up.body, nil, maxEventBytes)
	}
	return x.er.TryFill()
}

// endStream decides how a relayed stream ended and tells the client when
// it did not end well.
func (x *exchange) endStream(w *bufio.Writer, out relayOutcome) {
	var err error
	switch {
	case out.clientErr:
		err = errClientGone
	case context.Cause(x.ctx) != nil:
		err = context.Cause(x.ctx)
	case errors.Is(out.err, io.EOF) && (out.done || out.finish) && !out.backendError:
		x.reuse = true
	case errors.Is(out.err, io.EOF) && out.backendError:
		err = fmt.Errorf("%w: the backend sent an error event", errUpstream)
	case errors.Is(out.err, io.EOF):
		err = fmt.Errorf("%w: no finish_reason and no [DONE]", errEndedEarly)
	default:
		err = x.readErr(out.err)
	}
	x.tl.Done = time.Now()
	if err == nil {
		x.finishWith(x.status, outcomeOK)
		return
	}
	x.err = err
	ce := errorResponse(err)
	if ce.status != 499 && !out.backendError {
		// After the first byte the status is sent; the stream's last event
		// says what went wrong.
		_, _ = w.Write(openai.AppendSSEError(nil, ce.typ, ce.code, ce.msg))
		_ = w.Flush()
	}
	x.finishWith(ce.status, ce.outcome)
}

func (x *exchange) reader() *openai.EventReader {
	if x.er != nil {
		return x.er // made by ready or the keep-alive path
	}
	er := readerPool.Get().(*openai.EventReader)
	er.Reset(&x.up.body, nil, maxEventBytes)
	return er
}

func (x *exchange) putReader(er *openai.EventReader) {
	er.Reset(nil, nil, maxEventBytes)
	if er.Cap() <= 64<<10 {
		readerPool.Put(er)
	}
	x.er = nil
}

// fillFirst waits for the first event of a stream, keeping it buffered.
func (x *exchange) fillFirst() {
	x.er = readerPool.Get().(*openai.EventReader)
	x.er.Reset(&x.up.body, nil, maxEventBytes)
	_ = x.up.conn.SetReadDeadline(time.Now().Add(x.st.cfg.Timeouts.FirstByte))
	x.er.Fill()
}

// forwardWithKeepAlive forwards off the handler goroutine. If no first
// event arrives within the delay, it commits a 200 event stream and sends
// comment lines until the backend answers; failover is then over for this
// request, and any failure ends the stream with an SSE error event.
func (x *exchange) forwardWithKeepAlive(ctx *fasthttp.RequestCtx, ka KeepAlive) {
	res := make(chan error, 1)
	go func() { res <- x.forward(true) }()
	t := time.NewTimer(ka.Delay)
	select {
	case err := <-res:
		t.Stop()
		if err != nil {
			x.fail(ctx, err)
			return
		}
		x.commit(ctx)
		return
	case <-t.C:
	}
	x.status = http.StatusOK
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	x.g.streamResponse(ctx, x.ctx, &keepAliveStream{x: x, res: res, interval: ka.Interval})
}

// keepAliveStream is the body of a stream committed before its backend
// answered: comment lines until then, then the relay.
type keepAliveStream struct {
	x        *exchange
	res      chan error // forward's result
	interval time.Duration
}

func (k *keepAliveStream) ready() bool { return false }

func (k *keepAliveStream) body(w *bufio.Writer) {
	x := k.x
	tick := time.NewTicker(k.interval)
	defer tick.Stop()
	alive := true
	send := func() {
		if !alive {
			return
		}
		if _, err := w.Write(keepAliveLine); err != nil || w.Flush() != nil {
			alive = false
			x.cancel(errClientGone)
		}
	}
	send()
	for {
		select {
		case <-tick.C:
			send()
			continue
		case err := <-k.res:
			if err == nil && (x.up.resp.StatusCode() >= 300 || !bytes.HasPrefix(x.up.resp.Header.ContentType(), eventStream)) {
				err = fmt.Errorf("%w: status %d after the stream was committed", errUpstream, x.up.resp.StatusCode())
			}
			if err != nil || !alive {
				if err == nil {
					err = errClientGone
				}
				x.failStream(w, err)
				return
			}
			x.relayStream(w)
			return
		}
	}
}

// abandon ends the request when its body will never run: it waits for
// forward (which the cancelled context cuts short) and releases all.
func (k *keepAliveStream) abandon() {
	err := <-k.res
	if err == nil {
		err = errClientGone
	}
	k.x.failStream(nil, err)
}

// fail answers a request that got no usable backend response.
func (x *exchange) fail(ctx *fasthttp.RequestCtx, err error) {
	x.err = err
	ce := errorResponse(err)
	x.tl.Done = time.Now()
	if ce.status == 499 {
		ctx.SetConnectionClose()
	} else {
		if ra := x.retryAfter(err); ra != "" {
			ctx.Response.Header.Set("Retry-After", ra)
		}
		writeError(ctx, ce.status, ce.typ, ce.code, ce.msg)
	}
	x.finishWith(ce.status, ce.outcome)
}

func (x *exchange) retryAfter(err error) string {
	switch {
	case errors.Is(err, errShed):
		return strconv.Itoa(int(x.g.lim.RetryAfter() / time.Second))
	case errors.Is(err, ErrNoBackend) || errors.Is(err, errShutdown):
		return "1"
	}
	return ""
}

// failStream ends a committed stream that never got a backend stream; w
// is nil when nothing can be written.
func (x *exchange) failStream(w *bufio.Writer, err error) {
	x.err = err
	x.tl.Done = time.Now()
	ce := errorResponse(err)
	if ce.status != 499 && w != nil {
		_, _ = w.Write(openai.AppendSSEError(nil, ce.typ, ce.code, ce.msg))
		_ = w.Flush()
	}
	if x.er != nil {
		x.putReader(x.er)
	}
	x.finishWith(ce.status, ce.outcome)
}

// finishWith releases everything the request holds, exactly once, and
// reports it.
func (x *exchange) finishWith(status int, outcome string) {
	x.status, x.outcome = status, outcome
	x.watch.Stop()
	// The upstream connection goes back to its pool before the context is
	// cancelled: cancelling closes a connection still watched.
	if x.up != nil {
		x.up.finish(x.reuse)
		x.up = nil
	}
	x.stopT()
	x.cancel(nil)
	x.permit.Release()
	if x.backend != nil {
		ok := outcome == outcomeOK || outcome == outcomeClientGone || outcome == outcomeBackend4xx || status == http.StatusTooManyRequests
		x.done(ok)
		x.backend.outstanding.Add(-1)
	}
	fasthttp.ReleaseRequest(x.ureq)
	x.ureq = nil
	if x.tl.Done.IsZero() {
		x.tl.Done = time.Now()
	}
	x.report()
	x.g.inflight.Done()
}

// report writes the request's log line and hands the request to the
// telemetry goroutine (metrics, span, live view, request-log entry).
func (x *exchange) report() {
	x.logLine()
	x.g.submit(x)
}

// logLine writes the request's line to the gateway's log.
func (x *exchange) logLine() {
	tl := &x.tl
	lvl := slog.LevelInfo
	if x.outcome != outcomeOK && x.outcome != outcomeRejected && x.outcome != outcomeBackend4xx && x.outcome != outcomeClientGone && x.outcome != outcomeShed {
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
	}
	if w := tl.QueueWait(); w > time.Millisecond {
		attrs = append(attrs, slog.Float64("queue_ms", ms(w)))
	}
	if x.stream {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(tl.TTFT())), slog.Int("events", tl.Events))
	}
	if x.err != nil {
		attrs = append(attrs, slog.String("err", x.err.Error()))
	}
	x.g.log.LogAttrs(context.Background(), lvl, "request", attrs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logEntry hands the request's entry to the request log.
func (x *exchange) logEntry() {
	tl := &x.tl
	e := tracing.Entry{Time: tl.Received, ID: x.id, Path: x.path, Tenant: x.tenant, Model: x.model, Stream: x.stream, Status: x.status,
		Outcome: x.outcome, InputTokens: tl.PromptTokens, OutputTokens: tl.OutputTokens, Events: tl.Events, Attempts: tl.Attempts,
		TTFT: ms(tl.TTFT()), FinishReason: tl.FinishReason, Body: x.logBody}
	if x.backend != nil {
		e.Backend = x.backend.name
	}
	if !tl.Sent.IsZero() {
		e.Timing = tracing.NewTiming(tl.Attribute(time.Now()), tl.TTFT())
	}
	if x.err != nil {
		e.Error = x.err.Error()
	}
	x.g.rlog.Log(e)
}

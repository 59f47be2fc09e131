package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/reqctx"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// The exchange is one proxied request from the handler to its last byte:
// serveAPI reads and routes it, start sets up its context and upstream
// request, and finishWith is the one funnel that releases everything it
// holds and reports it.

// exchange is one proxied request, from the handler through the stream
// writer. It holds nothing of the RequestCtx.
type exchange struct {
	g       *Gateway
	st      *state
	id      string
	method  string
	path    string // decoded: what routes and logs name
	rawPath string // as the client sent it (handle checked it decodes to path): what the backend gets
	query   string // "?..." or empty
	model   string
	tl      tracing.Timeline

	// ctx ends when the client leaves, timeouts.total passes, the
	// gateway shuts down or finishWith runs, with that cause.
	ctx   reqctx.Ctx
	watch *hangup.Handle

	ureq    *fasthttp.Request
	route   *route
	backend *backend    // the attempt's backend, from its pick (forward) to finishWith
	done    func(error) // the breaker permit of backend (Backend.settle)
	up      *upstream
	upBuf   upstream            // what up points at: one attempt at a time, no allocation
	er      *openai.EventReader // set once the first event was awaited
	permit  shaping.Permit      // the admission slot, released by finishWith
	tenant  string              // as the policy named it
	// askedOut is the output the client asked for (max_completion_tokens,
	// else max_tokens; 0 for neither), read as the request was scanned.
	askedOut int
	// promptTokens is the prompt's size as admission counted it (the
	// policy's count, else 4 bytes of body a token); prefill is the
	// attempt's share of its backend's tokens to prefill (prefill.go).
	promptTokens int64
	prefill      prefillCharge
	pol          policy.Decision // what the policy made of the request
	cls          classNote       // its service class (class.go)
	att          *classAttempt   // with classes.preempt requeue: the attempt a preemption ends
	// key is the prompt's prefix, for a pool of selection prefix only
	// (nil otherwise: the key is half a KiB, which every other request
	// would carry for nothing); routeWhy is why the backend was picked.
	key      *affinity.Key
	routeWhy string
	pair     *mirror.Flight // the mirrored pair this request is the primary of, or nil
	// held is ureq while a mirrored copy reads its body, and the copy to
	// start once ureq is sent (startCopy); nil without a copy. Set
	// before the request is forwarded and never after.
	held *heldRequest
	// tally accounts a stream's events (relay.go); with a pair, it keeps
	// the primary's answer text too.
	tally   openai.Tally
	logBody []byte // its body, copied, when the log keeps bodies
	// parent is the client's span (from its traceparent), sc the
	// request's own, decided at receipt; both invalid without a tracer.
	parent, sc trace.SpanContext

	status  int
	outcome string
	err     error

	conn clientConn // the hijacked connection while a stream's body runs

	// The flags, together (each alone would take a word).
	stream   bool
	reuse    bool // the upstream body was read to its end
	timing   bool // the client asked for X-Infergate-Timing
	logged   bool // this request goes to the request log
	started  bool // start ran: the request holds a context, a watch, a request
	streamed bool // the hijacked connection owns the rest (streamResponse)
	finished bool // finishWith ran
	// claimed is taken, under conn.mu, by whichever comes first of a
	// stream's body and its abandonment (streamResponse, claim).
	claimed bool
}

// maxModelBytes bounds a model name: longer ones get 400 before they can
// become a log field, a label or a map key.
const maxModelBytes = 256

// requestID returns the client's X-Request-Id when it is sane, else a new one.
func requestID(rc *fasthttp.RequestCtx) string {
	if id := rc.Request.Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
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

// commonString returns b as a string, without a copy when it is a
// method or a path most requests have.
func commonString(b []byte) string {
	switch string(b) { // compared in place, not converted
	case "POST":
		return "POST"
	case "GET":
		return "GET"
	case chatPath:
		return chatPath
	case completionsPath:
		return completionsPath
	case openai.ResponsesPath:
		return openai.ResponsesPath
	case "/v1/embeddings":
		return "/v1/embeddings"
	}
	return string(b)
}

// apiRoute is the kind of /v1 route a request came in on.
type apiRoute uint8

const (
	// completionRoute: chat completions, completions and responses. The
	// request must carry a JSON body with a string model, and it is the
	// one kind mirrored.
	completionRoute apiRoute = iota
	// otherRoute: any other /v1 path, routed by its model when it has
	// one, else to the default pool.
	otherRoute
)

// serveAPI reads, routes, admits and forwards an API request that came in
// on a route of the given kind. A panic while serving it ends this
// request only (recoverRequest).
func (g *Gateway) serveAPI(rc *fasthttp.RequestCtx, kind apiRoute) {
	x := &exchange{g: g, st: g.state.Load(), method: commonString(rc.Method()), path: commonString(rc.Path())}
	if raw := rc.URI().PathOriginal(); string(raw) == x.path {
		x.rawPath = x.path // the common case: nothing was encoded, no copy
	} else {
		x.rawPath = string(raw)
	}
	defer func() {
		if v := recover(); v != nil {
			x.recoverRequest(rc, v)
		}
	}()
	x.id = requestID(rc)
	x.tally.Responses = x.path == openai.ResponsesPath
	// Only a client that asks gets the timing (nothing changes for others).
	x.timing = len(rc.Request.Header.Peek("X-Infergate-Timing")) > 0
	rc.Response.Header.Set("X-Request-Id", x.id)
	if q := rc.URI().QueryString(); len(q) > 0 {
		x.query = "?" + string(q)
	}
	if !x.identify(rc) {
		return
	}

	rb, err := g.readBody(rc)
	if err != nil {
		g.bodyError(rc, err)
		return
	}
	defer rb.release() // the upstream request holds its own copy
	body := rb.b
	x.tl.Received = time.Now() // the whole request is read
	if rl := g.rlog; rl != nil && rl.Sample() {
		x.logged = true
		if n := rl.BodyBytes(); n > 0 && len(body) <= n && len(body) > 0 {
			x.logBody = bytes.Clone(body) // rc's memory is not ours after the handler
		}
	}
	var env openai.Envelope
	strict := kind == completionRoute
	if strict || len(body) > 0 {
		env, err = openai.ScanRequest(body)
		// Broken JSON on any route is answered here: llama.cpp's server
		// answers it 500, which would count against the backend. A body
		// that is not JSON at all (a multipart upload) goes on.
		if err != nil && (strict || x.st.def == nil || errors.Is(err, openai.ErrInvalidJSON) && jsonBody(rc, body)) {
			x.reject(rc, http.StatusBadRequest, openai.TypeInvalidRequest, scanErrorCode(err), strings.TrimPrefix(err.Error(), "openai: "))
			return
		}
	}
	x.model, x.stream = env.Model, env.Stream
	if err != nil {
		x.model = ""
	} else {
		x.askedOut = env.MaxOutput(body)
	}
	if len(x.model) > maxModelBytes {
		n := len(x.model)
		x.reject(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "model_too_long",
			fmt.Sprintf("model: %d bytes; a model name has at most %d", n, maxModelBytes))
		return
	}
	x.route = x.st.lookup(x.model)
	if x.route == nil {
		msg := fmt.Sprintf("The model `%s` does not exist or is not served by this gateway.", x.model)
		if x.model == "" {
			msg = "this path needs a model in its JSON body"
		}
		x.reject(rc, http.StatusNotFound, openai.TypeInvalidRequest, "model_not_found", msg)
		return
	}
	x.beginSpan(rc)
	if x.st.split != nil {
		x.split(rc)
	}
	if err == nil && env.Model != "" {
		var ok bool
		if body, ok = x.applyPolicy(rc, body, env); !ok {
			return
		}
		prefix := x.route.pool.prefix
		if x.pol.Body != nil && (x.route.upstreamModel != "" || prefix != nil) {
			env, _ = openai.ScanRequest(body) // the policy rewrote it
		}
		if prefix != nil {
			// What the backend caches is what it is sent: the body after
			// the policy (the model's name is not part of the prefix).
			x.key = new(affinity.Key)
			prefix.key(&rc.Request.Header, body, &env, x.key)
		}
		if x.route.upstreamModel != "" {
			body = openai.RewriteModel(body, env, x.route.upstreamModel)
		}
		if prefix != nil && prefix.exact != nil {
			prefix.exact.tokenize(x.route.pool, body, x.key) // a round trip: exact mode's cost
		}
	}
	if x.st.cfg.Classes.Enabled {
		var ok bool
		if body, ok = x.classify(rc, body, err == nil && env.Model != ""); !ok {
			return
		}
	}
	x.start(rc, body)
	if err := x.admit(rc, body); err != nil {
		x.fail(rc, err)
		return
	}
	g.fail.at("admitted", x.id)
	if strict && len(x.st.mirrors) > 0 {
		// Only the completion routes are copied (always POSTs): the A/B
		// report compares answers, and nothing else (GET /v1/models, an
		// embedding) has one to compare. Re-sent as a POST, a GET also
		// drew a 404 from llama.cpp that counted against the candidate.
		x.mirror(rc)
	}

	ka := x.st.cfg.KeepAlive
	if ka.Delay > 0 && x.stream {
		x.forwardWithKeepAlive(rc, ka)
		return
	}
	// A preemptible stream awaits its first event before its headers go
	// out: until then it has sent nothing, and may be preempted.
	err = x.forward(x.cls.armed && x.stream)
	for x.att != nil { // classes.preempt requeue: back to the queue (class.go)
		var again bool
		if again, err = x.requeue(rc, body, err); !again {
			break
		}
		err = x.forward(x.cls.armed && x.stream)
	}
	if err != nil {
		x.fail(rc, err)
		return
	}
	x.commit(rc)
}

// jsonBody reports whether a request's body is meant as JSON: its
// Content-Type says so, or it opens as an object or an array does.
func jsonBody(rc *fasthttp.RequestCtx, body []byte) bool {
	ct := rc.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	if bytes.EqualFold(ct, []byte("application/json")) || bytes.HasSuffix(bytes.ToLower(ct), []byte("+json")) {
		return true
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func scanErrorCode(err error) string {
	if errors.Is(err, openai.ErrInvalidJSON) || errors.Is(err, openai.ErrNotObject) {
		return "invalid_json"
	}
	return "invalid_field"
}

// reject answers a request that never reaches a backend.
func (x *exchange) reject(rc *fasthttp.RequestCtx, status int, typ, code, msg string) {
	writeError(rc, status, typ, code, msg)
	x.status, x.outcome = status, outcomeRejected
	x.model = "" // an unknown or absent model is not a metrics label
	x.tl.Done = time.Now()
	x.report()
}

// start sets up the request's context, hang-up watch and upstream request.
func (x *exchange) start(rc *fasthttp.RequestCtx, body []byte) {
	g, cfg := x.g, &x.st.cfg
	g.inflight.Add(1)
	g.reqs.Start(&x.ctx, cfg.Timeouts.Total, errTotalTimeout)
	x.started = true // from here finishWith has something to release
	x.watch = g.watch.Watch(rc.Conn(), func() { x.ctx.Cancel(errClientGone) })

	r := fasthttp.AcquireRequest()
	r.Header.DisableNormalizing()
	r.Header.SetMethodBytes(rc.Method())
	var buf [128]byte
	xff := copyRequestHeaders(&r.Header, &rc.Request.Header,
		headerRules{forwardAuth: cfg.Server.ForwardAuthorization, forwardSimFault: cfg.Server.ForwardSimFault}, buf[:0])
	r.Header.Set("X-Request-Id", x.id)
	x.injectSpan(&r.Header)
	if x.stream {
		// The relay finds event boundaries in the bytes: ask for them
		// uncompressed.
		r.Header.Del("Accept-Encoding")
	}
	if ta, ok := rc.RemoteAddr().(*net.TCPAddr); ok {
		if len(xff) > 0 {
			xff = append(xff, ", "...)
		}
		xff = ta.AddrPort().Addr().Unmap().AppendTo(xff)
	}
	if len(xff) > 0 {
		r.Header.SetBytesKV(hdrForwardedFor, xff)
	}
	r.SetBody(body)
	x.ureq = r
}

// finishWith releases everything the request holds, exactly once, and
// reports it.
func (x *exchange) finishWith(status int, outcome string) {
	if x.finished {
		return
	}
	x.finished = true
	x.status, x.outcome = status, outcome
	x.watch.Stop()
	// The upstream connection goes back to its pool before the context is
	// cancelled: cancelling closes a connection still watched.
	if x.up != nil {
		x.up.finish(x.reuse)
		x.up = nil
	}
	x.conn.disarm()
	x.ctx.Cancel(nil)
	x.permit.Release()
	x.prefill.release()
	if x.backend != nil {
		// What the client's own request caused (it left, or its
		// generation outlasted timeouts.total) is not the backend failing:
		// it counts as a success for ejection and the breaker.
		ok := outcome == outcomeOK || outcome == outcomeClientGone || outcome == outcomeBackend4xx || status == http.StatusTooManyRequests ||
			errors.Is(x.err, errTotalTimeout)
		x.backend.settle(x.done, ok)
		x.backend.outstanding.Add(-1)
		if x.tally.ResponseID != 0 && x.key != nil && outcome == outcomeOK {
			x.route.pool.prefix.learnResponse(x.tally.ResponseID, x.backend)
		}
	}
	x.startCopy() // the primary was never sent: its copy still goes
	if x.held != nil {
		x.held.release() // the copy may still be reading its body
		x.ureq = nil
	} else if x.ureq != nil {
		fasthttp.ReleaseRequest(x.ureq)
		x.ureq = nil
	}
	if x.tl.Done.IsZero() {
		x.tl.Done = time.Now()
	}
	if x.pair != nil {
		x.primaryDone()
	}
	x.report()
	x.g.inflight.Done()
}

// report hands the request to the telemetry goroutine (log line,
// metrics, span, live view, request-log entry). A plain answer is written
// by the server only after the handler returns: none of that work may
// delay it, nor the next request on a keep-alive connection.
func (x *exchange) report() { x.g.submit(x) }

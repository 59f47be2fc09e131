package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/roundtrip"
	"github.com/valyala/fasthttp"
)

// Error classes of a failed request, as they appear in records.
const (
	ErrConnect   = "connect"          // no connection, or it failed before the request was written
	ErrTimeout   = "timeout"          // --timeout passed
	ErrReset     = "reset_mid_stream" // the connection failed after the response began
	ErrTruncated = "truncated"        // the stream ended without [DONE]
	ErrMalformed = "malformed_event"  // an event whose data is not JSON
	ErrEvent     = "error_event"      // the server sent an error object in the stream
	ErrBadBody   = "bad_body"         // a non-streaming body that is not a completion
	ErrCancelled = "cancelled"        // the run was interrupted
)

// Client sends requests to one endpoint over HTTP/1.1 keep-alive
// connections from fasthttp's pool, and reads each response itself so that
// every event is stamped the moment its read returns. A cancelled context
// closes the request's connection, which ends any wait at once. It is
// safe for concurrent use.
type Client struct {
	hc      *fasthttp.HostClient
	host    string
	path    string
	headers [][2]string
	connect time.Duration
	// responses: the endpoint is the Responses API's (its answers are
	// read as its events and bodies).
	responses bool
	overrides map[string]json.RawMessage
	// peer is what the server's answers said of its keep-alive
	// connections (internal/roundtrip).
	peer roundtrip.Peer
}

// ClientOptions configure a Client. The zero value works.
type ClientOptions struct {
	// Headers are added to every request (Authorization, for instance).
	Headers [][2]string
	// MaxConns caps open connections; default 16384.
	MaxConns int
	// ConnectTimeout bounds a dial and TLS handshake; default 10s.
	ConnectTimeout time.Duration
	// InsecureSkipVerify accepts any server certificate.
	InsecureSkipVerify bool
	// Overrides are top-level fields set in every request body.
	Overrides map[string]json.RawMessage
}

// NewClient returns a client for the endpoint URL, e.g.
// http://127.0.0.1:8080/v1/chat/completions.
func NewClient(endpoint string, o ClientOptions) (*Client, error) {
	u, err := httpurl.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("bench: url %w", err)
	}
	if o.MaxConns == 0 {
		o.MaxConns = 16384
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	var tlsConf *tls.Config
	if u.Scheme == "https" {
		tlsConf = &tls.Config{ServerName: u.Hostname(), InsecureSkipVerify: o.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	}
	path := u.EscapedPath()
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	for k, v := range o.Overrides {
		if !json.Valid(v) {
			return nil, fmt.Errorf("bench: override %q: %s is not JSON", k, v)
		}
	}
	c := &Client{host: u.Host, path: path, headers: o.Headers, connect: o.ConnectTimeout, overrides: o.Overrides,
		responses: strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/responses")}
	c.hc = &fasthttp.HostClient{
		Addr:                          addr,
		Dial:                          dial(o.ConnectTimeout, tlsConf),
		MaxConns:                      o.MaxConns,
		MaxIdleConnDuration:           90 * time.Second,
		DisableHeaderNamesNormalizing: true,
		NoDefaultUserAgentHeader:      true,
		ReadBufferSize:                4096,
		WriteBufferSize:               4096,
	}
	return c, nil
}

func dial(timeout time.Duration, tlsConf *tls.Config) fasthttp.DialFunc {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(addr string) (net.Conn, error) {
		// Dialing runs deep (resolver, socket setup): on the request's own
		// goroutine it would grow that stack to 8 KiB for the whole
		// stream; in a goroutine of its own it costs 4 KiB less per open
		// stream.
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := d.Dial("tcp", addr); ch <- res{c, err} }()
		rr := <-ch
		c, err := rr.c, rr.err
		if err != nil {
			return nil, err
		}
		if tlsConf == nil {
			return socketConn(c), nil
		}
		tc := tls.Client(c, tlsConf)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		_ = tc.SetDeadline(time.Time{})
		return socketConn(tc), nil
	}
}

// fdConn is a connection that knows its socket's descriptor from the
// dial on: the round trip polls a pooled connection for the server's
// hang-up before each reuse (hangup.Resting), and a lookup each time
// would allocate.
type fdConn struct {
	net.Conn
	hangup.FD
}

func socketConn(c net.Conn) net.Conn {
	if fd := hangup.FDOf(c); fd != (hangup.FD{}) {
		return &fdConn{Conn: c, FD: fd}
	}
	return c
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// do sends body (and header, when its name is not empty) and reads the
// answer into r, whose Sent it sets; the reader p is the client's
// per-goroutine state. It returns when the
// response is complete, failed, or ctx ended.
func (c *Client) do(ctx context.Context, body []byte, header [2]string, stream bool, p *parser, r *Result) {
	req := fasthttp.AcquireRequest()
	released := false
	release := func() {
		if !released {
			fasthttp.ReleaseRequest(req)
			released = true
		}
	}
	defer release()
	req.Header.DisableNormalizing()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(c.path)
	req.Header.SetHost(c.host)
	req.Header.SetContentType("application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	for _, h := range c.headers {
		req.Header.Set(h[0], h[1])
	}
	if header[0] != "" {
		req.Header.Set(header[0], header[1])
	}
	if len(c.overrides) > 0 {
		body = override(body, c.overrides)
	}
	req.SetBodyRaw(body)

	p.r = r
	trip, err := roundtrip.Do(ctx, c.hc, req, roundtrip.Options{Connect: c.connect, Peer: &c.peer}, p)
	p.r = nil
	if err != nil {
		var re *roundtrip.Error
		if errors.As(err, &re) && re.Stage == roundtrip.StageHeaders {
			err = fmt.Errorf("read response headers: %w", re.Err)
		}
		r.fail(ctx, ErrConnect, err)
		return
	}
	resp := trip.Resp
	r.TTFB = time.Since(r.Sent)
	r.Status = resp.StatusCode()
	refused := r.Status == fasthttp.StatusTooManyRequests || r.Status == fasthttp.StatusServiceUnavailable
	var preempted, refusal []byte
	if refused {
		r.RetryAfter = retryAfter(resp.Header.Peek("Retry-After"), time.Now())
		preempted = bytes.Clone(resp.Header.Peek(headerPreempted))
		refusal = bytes.Clone(resp.Header.Peek(headerRefusal))
	}
	r.ServedClass = servedClass(resp.Header.Peek(headerClass))
	if n := resp.Header.Peek(headerRequeued); len(n) > 0 && string(n) != "0" {
		r.Requeued = true
	}
	isSSE := stream && r.Status == 200 && bytes.HasPrefix(resp.Header.ContentType(), textEventStream)
	// Kept for an error's text: what came back when it was not a completion.
	p.contentType = append(p.contentType[:0], resp.Header.ContentType()...)
	// An infergate gateway says when its policy set the output limit.
	clamp := resp.Header.Peek("X-Infergate-Max-Tokens-Clamped")
	r.ClampedByGateway = len(clamp) > 0
	if c.responses {
		c.outputCap(r, clamp)
	}
	// Neither is needed while the body streams: a long stream holds
	// only its connection, the parser and its small reader.
	fasthttp.ReleaseResponse(resp)
	release()
	p.tally.Responses = c.responses
	p.read(ctx, &trip.Body, r, isSSE)
	if refused && r.ErrClass != ErrCancelled {
		r.ShedReason = refusalReason(r.Status, preempted, refusal, p.body)
	}
	// Finish pools the connection only if the body was read to its end
	// with nothing after it, and the server did not say it closes it.
	trip.Finish(true)
}

// outputCap sets the max_output_tokens a Responses answer is judged by
// (quality.Truncated): the gateway's clamp when it set one, else an
// override's when it is an integer, else the request's.
func (c *Client) outputCap(r *Result, clamp []byte) {
	if n, err := strconv.Atoi(string(clamp)); err == nil && n > 0 {
		r.Ask.MaxOutputTokens = n
		return
	}
	// Only an integer: another value (100.0, null) is not a limit the
	// answer can be judged by, and must not hide the request's own.
	if n, err := strconv.Atoi(strings.TrimSpace(string(c.overrides["max_output_tokens"]))); err == nil {
		r.Ask.MaxOutputTokens = max(n, 0)
		return
	}
	if r.Ask.MaxOutputTokens == 0 && r.MaxTokens > 0 {
		r.Ask.MaxOutputTokens = r.MaxTokens
	}
}

// fail records a failure of class, unless ctx ended first: then it is a
// timeout or a cancellation.
func (r *Result) fail(ctx context.Context, class string, err error) {
	switch {
	case ctx.Err() == nil:
	case errors.Is(context.Cause(ctx), errRequestTimeout):
		class, err = ErrTimeout, errRequestTimeout
	default:
		class, err = ErrCancelled, context.Cause(ctx)
	}
	if r.ErrClass == "" {
		r.ErrClass = class
		r.Err = err.Error()
	}
}

var textEventStream = []byte("text/event-stream")

var errRequestTimeout = errors.New("request exceeded --timeout")

// override returns body with each of fields set at its top level; a body
// that is not a JSON object goes as it is.
func override(body []byte, fields map[string]json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return body
	}
	maps.Copy(m, fields)
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// MaxRetryAfter bounds the hold one Retry-After can ask for.
const MaxRetryAfter = time.Minute

// retryAfter reads a Retry-After header (RFC 9110: delay-seconds or an
// HTTP-date), 0 when absent or unreadable, at most MaxRetryAfter.
func retryAfter(v []byte, now time.Time) time.Duration {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(s); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), MaxRetryAfter)
}

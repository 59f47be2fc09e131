package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/infergate/infergate/internal/roundtrip"
	"github.com/valyala/fasthttp"
)

// upstream is an in-flight backend response whose body is still to be
// read. finish (not the Trip's Finish, which it calls) must be called
// exactly once.
type upstream struct {
	roundtrip.Trip // Resp holds the headers; Conn the connection; Body the body
}

// finish releases the connection: back to the pool when reuse is set, the
// body was read to its end and the backend did not ask to close (the
// Trip's Finish sees to that); closed otherwise.
func (up *upstream) finish(reuse bool) {
	up.Finish(reuse)
	fasthttp.ReleaseResponse(up.Resp)
}

// SetReadDeadline sets the connection's read deadline, noting it so that
// the connection loses it before it is pooled again.
func (up *upstream) SetReadDeadline(t time.Time) error {
	up.DeadlineSet = true
	return up.Conn.SetReadDeadline(t)
}

// roundTrip sends x's request to b, its attempt's backend (x.backend),
// and waits for the response headers (internal/roundtrip). The
// connection is closed at once when ctx ends, which unblocks every read
// and tells the backend to stop.
func (b *backend) roundTrip(ctx context.Context, x *exchange, t *Timeouts) (*upstream, error) {
	// A stream's headers come before its first token; a plain answer's
	// come with the whole generation, which only timeouts.total bounds
	// (the request's context): timeouts.first_byte would cut a long
	// generation that is going well.
	wait := t.FirstByte
	if !x.stream {
		wait = 0
	}
	trip, err := roundtrip.Do(ctx, b.hc, x.ureq, roundtrip.Options{Connect: t.Connect, Deadline: wait, Peer: &b.peer}, x)
	if err != nil {
		var re *roundtrip.Error
		switch {
		case !errors.As(err, &re):
			return nil, err // the request's own end: its cause
		case re.Stage == roundtrip.StageConnect:
			return nil, fmt.Errorf("%w %s: %w", errConnect, b.name, re.Err)
		case re.Stage == roundtrip.StageWrite:
			return nil, fmt.Errorf("%w %s: write: %w", errConnect, b.name, re.Err)
		case isTimeout(re.Err):
			return nil, fmt.Errorf("%w (%s)", errFirstByteTimeout, b.name)
		}
		return nil, fmt.Errorf("%w %s: read headers: %w", errUpstream, b.name, re.Err)
	}
	x.tl.Headers = time.Now()
	up := &x.upBuf // the last attempt's, finished
	*up = upstream{Trip: trip}
	return up, nil
}

// The exchange observes its round trips (roundtrip.Observer): each step
// is a stamp of its timeline, and its reader is the backend pool's.

func (x *exchange) Starting() { x.tl.UpstreamStart = time.Now() }

func (x *exchange) Connected(conn net.Conn, reused bool) {
	tl := &x.tl
	tl.Connected = time.Now()
	tl.NewConn = !reused
	if dc, ok := conn.(*dialConn); ok && tl.NewConn {
		tl.TLSHandshake = dc.handshake
	}
}

func (x *exchange) Sent(conn net.Conn) {
	now := time.Now()
	x.tl.Sent = now
	if dc, ok := conn.(*dialConn); ok {
		if dc.rttAt.IsZero() || now.Sub(dc.rttAt) > rttFresh {
			dc.rtt, dc.rttAt = tcpRTT(conn), now
		}
		x.tl.UpstreamRTT = dc.rtt
	} else {
		x.tl.UpstreamRTT = tcpRTT(conn)
	}
	x.startCopy() // the primary's bytes are on their way: its copy may go
}

// Reader is the backend pool's reader; headers larger than it fail.
func (x *exchange) Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader {
	if last != nil {
		return nil
	}
	return x.backend.hc.AcquireReader(conn)
}

func (x *exchange) ReleaseReader(br *bufio.Reader) { x.backend.hc.ReleaseReader(br) }

var _ roundtrip.Observer = (*exchange)(nil)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}

// target points req at path (and query, "" or "?…") on b, in origin-form
// with b's Host: the request line a reverse proxy sends an origin server.
// The absolute form is for requests to a proxy, and some servers route it
// as a path (cpp-httplib, under llama.cpp's server, answers it 404).
// fasthttp writes a request line as set unless the URI was parsed.
func (b *backend) target(req *fasthttp.Request, path, query string) {
	req.SetRequestURI(b.prefix + path + query)
	req.Header.SetHost(b.host)
}

// get sends GET path to b through hc, with b's key, into resp.
func (b *backend) get(hc *fasthttp.HostClient, path string, timeout time.Duration, resp *fasthttp.Response) error {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	b.target(req, path, "")
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	return b.fetch(hc, req, resp, timeout)
}

// fetch sends req to b through hc (b.hc or b.mc) and reads the whole
// answer into resp, its body bounded by hc's MaxResponseBodySize: on a
// connection the backend has not closed, as a request's round trip is,
// where fasthttp's own Do would take a closed one and, for a POST, fail.
func (b *backend) fetch(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	return roundtrip.Fetch(hc, req, resp, timeout, hc.MaxResponseBodySize, &b.peer)
}

// probe runs one active health check: GET path must answer 2xx in time.
func (b *backend) probe(path string, timeout time.Duration) error {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := b.get(b.hc, path, timeout, resp); err != nil {
		return fmt.Errorf("health %s: %w", b.name, err)
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return fmt.Errorf("health %s: status %d", b.name, c)
	}
	return nil
}

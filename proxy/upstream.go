package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/httpbody"
	"github.com/infergate/infergate/tracing"
	"github.com/valyala/fasthttp"
)

// upstream is an in-flight backend response whose body is still to be
// read. finish must be called exactly once.
type upstream struct {
	resp *fasthttp.Response // headers only; the body is read by body
	body httpbody.Reader
	conn net.Conn
	// finish releases the connection: back to the pool when reuse is set
	// and the body was read to its end, closed otherwise.
	finish func(reuse bool)
}

// roundTrip sends req to b and waits for the response headers. The
// connection is closed at once when ctx ends, which unblocks every read
// and tells the backend to stop. A pooled connection that the backend had
// already closed is replaced once, silently, as every HTTP client does.
func (b *Backend) roundTrip(ctx context.Context, req *fasthttp.Request, t *Timeouts, tl *tracing.Timeline) (*upstream, error) {
	for try := 0; ; try++ {
		tl.UpstreamStart = time.Now()
		cc, err := b.hc.AcquireConn(t.Connect, false)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("%w %s: %w", errConnect, b.name, err)
		}
		conn := cc.Conn()
		tl.Connected = time.Now()
		tl.NewConn = !cc.CreatedTime().Before(tl.UpstreamStart)
		if dc, ok := conn.(*dialConn); ok && tl.NewConn {
			tl.TLSHandshake = dc.handshake
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		fail := func() {
			stop()
			b.hc.CloseConn(cc)
		}
		_ = conn.SetDeadline(time.Now().Add(t.FirstByte))
		bw := b.hc.AcquireWriter(conn)
		err = req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		b.hc.ReleaseWriter(bw)
		if err != nil {
			fail()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if !tl.NewConn && try == 0 {
				continue
			}
			return nil, fmt.Errorf("%w %s: write: %w", errConnect, b.name, err)
		}
		tl.Sent = time.Now()
		tl.UpstreamRTT = tcpRTT(conn)
		br := b.hc.AcquireReader(conn)
		resp := fasthttp.AcquireResponse()
		resp.SkipBody = true // headers only: httpbody.Reader reads the body
		if err := resp.ReadLimitBody(br, 0); err != nil {
			fasthttp.ReleaseResponse(resp)
			b.hc.ReleaseReader(br)
			fail()
			switch {
			case ctx.Err() != nil:
				return nil, context.Cause(ctx)
			case isTimeout(err):
				return nil, fmt.Errorf("%w (%s)", errFirstByteTimeout, b.name)
			case !tl.NewConn && try == 0 && isStale(err):
				continue
			}
			return nil, fmt.Errorf("%w %s: read headers: %w", errUpstream, b.name, err)
		}
		tl.Headers = time.Now()
		up := &upstream{resp: resp, conn: conn}
		up.body.Reset(br, httpbody.Mode(req, resp), int64(resp.Header.ContentLength()))
		up.finish = func(reuse bool) {
			// stop reports false once the close ran: never pool that conn.
			reuse = stop() && reuse && up.body.Complete() && !resp.ConnectionClose()
			b.hc.ReleaseReader(br)
			fasthttp.ReleaseResponse(resp)
			if reuse {
				_ = conn.SetDeadline(time.Time{})
				b.hc.ReleaseConn(cc)
			} else {
				b.hc.CloseConn(cc)
			}
		}
		return up, nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}

// isStale reports errors of a keep-alive connection the peer closed.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, fasthttp.ErrConnectionClosed)
}

// probe runs one active health check: GET path must answer 2xx in time.
func (b *Backend) probe(path string, timeout time.Duration) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + b.host + b.prefix + path)
	req.Header.SetHost(b.host)
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	if err := b.hc.DoTimeout(req, resp, timeout); err != nil {
		return fmt.Errorf("health %s: %w", b.name, err)
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return fmt.Errorf("health %s: status %d", b.name, c)
	}
	return nil
}

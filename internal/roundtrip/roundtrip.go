// Package roundtrip sends one HTTP/1.1 request on a connection of a
// fasthttp.HostClient's pool and reads the response headers, leaving the
// body to the caller, who reads it as it arrives (internal/httpbody). It
// is the one place the gateway (to its backends) and the load generator
// (to the server it measures) do this: a cancelled context closes the
// connection at once, which ends any wait; a pooled connection the server
// had already closed is replaced once, silently, as every HTTP client
// does.
package roundtrip

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/reqctx"
	"github.com/valyala/fasthttp"
)

// Conn is a connection of a HostClient's pool (fasthttp does not export
// its type; Do infers it).
type Conn interface {
	Conn() net.Conn
	CreatedTime() time.Time
}

// Pool is what a round trip needs of a *fasthttp.HostClient.
type Pool[C Conn] interface {
	AcquireConn(reqTimeout time.Duration, connectionClose bool) (C, error)
	ReleaseConn(C)
	CloseConn(C)
	AcquireWriter(net.Conn) *bufio.Writer
	ReleaseWriter(*bufio.Writer)
}

// Observer hears of each step of a round trip and supplies the reader the
// response is read through: the gateway stamps its timeline, the load
// generator its result. Its methods run on the caller's goroutine.
type Observer interface {
	// Starting: an attempt begins; the connection is not yet acquired.
	Starting()
	// Connected: conn is in hand; reused says it came from the pool.
	Connected(conn net.Conn, reused bool)
	// Sent: the request is written and flushed.
	Sent(conn net.Conn)
	// Reader gives the reader of the response. last is nil at first;
	// when the headers did not fit the reader it gave, it is asked again
	// with that reader, and may give a larger one holding what last
	// buffered, or nil to fail.
	Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader
	// ReleaseReader takes back a reader Reader gave, once the caller is
	// done with it.
	ReleaseReader(*bufio.Reader)
}

// Options bound a round trip. The zero value waits as long as ctx does.
type Options struct {
	// Connect bounds acquiring a connection (a dial and TLS handshake).
	Connect time.Duration
	// Deadline, when set, bounds writing the request and reading the
	// response headers, and stays on the connection for the caller.
	Deadline time.Duration
}

// Stage says where a round trip failed.
type Stage uint8

// The stages of a round trip.
const (
	StageConnect Stage = iota + 1 // no connection
	StageWrite                    // writing the request
	StageHeaders                  // reading the response headers
)

// Error is a failed round trip: where, and why.
type Error struct {
	Stage Stage
	Err   error
}

func (e *Error) Error() string {
	what := [...]string{"", "connect", "write request", "read response headers"}[e.Stage]
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Trip is a response whose headers are read and whose body is still on
// the connection. Finish must be called exactly once.
type Trip struct {
	// Resp holds the status and headers (SkipBody); the caller releases
	// it with fasthttp.ReleaseResponse when done with it.
	Resp *fasthttp.Response
	// Conn is the connection, Reader what the body is read through.
	Conn   net.Conn
	Reader *bufio.Reader
	// Reused says the connection came from the pool.
	Reused bool
	// DeadlineSet says the caller set a deadline on Conn, which Finish
	// then clears before the connection goes back to the pool (it clears
	// its own Options.Deadline regardless).
	DeadlineSet bool
	finish      func(reuse, deadline bool)
}

// Finish gives the reader back and the connection to its pool when reuse
// is set (the body was read to its end and the server did not ask to
// close) and the context did not close it; else it closes the connection.
func (t *Trip) Finish(reuse bool) { t.finish(reuse, t.DeadlineSet) }

// Do sends req on a connection of p and reads the response headers. When
// ctx ends first it returns context.Cause(ctx); otherwise a failure is an
// *Error.
func Do[C Conn](ctx context.Context, p Pool[C], req *fasthttp.Request, o Options, obs Observer) (Trip, error) {
	for try := 0; ; try++ {
		obs.Starting()
		start := time.Now()
		cc, err := p.AcquireConn(o.Connect, false)
		if err != nil {
			if ctx.Err() != nil {
				return Trip{}, reqctx.Cause(ctx)
			}
			return Trip{}, &Error{StageConnect, err}
		}
		conn := cc.Conn()
		reused := cc.CreatedTime().Before(start)
		obs.Connected(conn, reused)
		stop := afterFunc(ctx, func() { conn.Close() })
		fail := func() {
			stop()
			p.CloseConn(cc)
		}
		if o.Deadline > 0 {
			_ = conn.SetDeadline(time.Now().Add(o.Deadline))
		}
		bw := p.AcquireWriter(conn)
		err = req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		p.ReleaseWriter(bw)
		if err != nil {
			fail()
			if ctx.Err() != nil {
				return Trip{}, reqctx.Cause(ctx)
			}
			if reused && try == 0 {
				continue // the server closed an idle connection
			}
			return Trip{}, &Error{StageWrite, err}
		}
		obs.Sent(conn)
		br := obs.Reader(conn, nil)
		resp := fasthttp.AcquireResponse()
		resp.SkipBody = true // headers only: the caller reads the body
		err = resp.ReadLimitBody(br, 0)
		if err != nil && isSmallBuffer(err) {
			// Nothing was consumed: read the headers again with room.
			if big := obs.Reader(conn, br); big != nil {
				br = big
				err = resp.ReadLimitBody(br, 0)
			}
		}
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			obs.ReleaseReader(br)
			fail()
			switch {
			case ctx.Err() != nil:
				return Trip{}, reqctx.Cause(ctx)
			case reused && try == 0 && Stale(err):
				continue
			}
			return Trip{}, &Error{StageHeaders, err}
		}
		t := Trip{Resp: resp, Conn: conn, Reader: br, Reused: reused}
		t.finish = func(reuse, deadline bool) {
			// stop reports false once the close ran: never pool that conn.
			reuse = stop() && reuse
			obs.ReleaseReader(br)
			if reuse {
				if deadline || o.Deadline > 0 {
					_ = conn.SetDeadline(time.Time{})
				}
				p.ReleaseConn(cc)
			} else {
				p.CloseConn(cc)
			}
		}
		return t, nil
	}
}

// afterFunc is context.AfterFunc, called straight on a context that has
// the method (a reqctx.Ctx), which saves the child context the standard
// function builds around it.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

func isSmallBuffer(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// Stale reports the errors of a keep-alive connection the server closed
// while it sat in the pool, which a retry on a new connection cures.
func Stale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, fasthttp.ErrConnectionClosed)
}

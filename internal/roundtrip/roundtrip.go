// Package roundtrip sends one HTTP/1.1 request on a connection of a
// fasthttp.HostClient's pool and reads the response headers, leaving the
// body to the caller, who reads it as it arrives (internal/httpbody). It
// is the one place the gateway (to its backends), the mirror (to its
// candidates) and the load generator (to the server it measures) do
// this: a cancelled context closes the connection at once, which ends any
// wait.
//
// Servers close keep-alive connections behind a client's back: llama.cpp's
// server after every streamed answer and every answer >= 400, although it
// says Keep-Alive: timeout=5, and any connection idle for 5 s; uvicorn
// (vLLM, SGLang) after 5 s idle without a word. So a pooled connection is
// used only when it has rested less than its server keeps one (Peer,
// learned from the answers' Keep-Alive header) and, checked at once
// without reading (hangup.Resting), the server has not closed it; a
// request that still fails on a reused connection before anything came
// back is sent once more on a new connection rather than another pooled
// one, which a server that closed one has likely closed too; only when the
// pool yields no new one (it is full, or holds more than maxHeld pooled
// ones) does the retry take a pooled one that just passed that check.
package roundtrip

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/httpbody"
	"github.com/infergate/infergate/internal/reqctx"
	"github.com/valyala/fasthttp"
)

// Conn is a connection of a HostClient's pool (fasthttp does not export
// its type; Do infers it). LastUseTime is zero until it was first given
// back to the pool.
type Conn interface {
	Conn() net.Conn
	LastUseTime() time.Time
}

// Pool is what a round trip needs of a *fasthttp.HostClient. AcquireConn
// should not wait for a free connection (MaxConnWaitTimeout 0, fasthttp's
// default) while the pool is full: a retry that holds pooled connections
// aside to get a new one (see Do) would wait for its own; with no wait it
// takes one of those instead.
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
	// Peer, when set, is the server's: its answers teach it how long the
	// server keeps an idle connection, and no pooled connection that has
	// rested longer is used. Nil: nothing is learned.
	Peer *Peer
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
	// Conn is the connection; Body reads the body from it, decoded
	// (fixed length, chunked, or until the close).
	Conn net.Conn
	Body httpbody.Reader
	// Reused says the connection came from the pool.
	Reused bool
	// DeadlineSet says the caller set a deadline on Conn, which Finish
	// then clears before the connection goes back to the pool (it clears
	// its own Options.Deadline regardless).
	DeadlineSet bool
	// closing: the server said it closes the connection after this
	// answer (Connection: close, or HTTP/1.0 without keep-alive).
	closing bool
	br      *bufio.Reader
	finish  func(reuse, deadline bool)
}

// Finish gives the reader back, and the connection to its pool when reuse
// is set, the body was read to its end with nothing after it (the
// connection carries no other answer), the server did not say it closes
// the connection, and the context did not close it; else it closes the
// connection.
func (t *Trip) Finish(reuse bool) {
	t.finish(reuse && t.Body.Complete() && t.br.Buffered() == 0 && !t.closing, t.DeadlineSet)
}

// Do sends req on a connection of p and reads the response headers. When
// ctx ends first it returns context.Cause(ctx); otherwise a failure is an
// *Error. A pooled connection that fails before anything came back (the
// server closed it as the request left) is replaced, once, by a new one
// (see acquireNew).
func Do[C Conn](ctx context.Context, p Pool[C], req *fasthttp.Request, o Options, obs Observer) (Trip, error) {
	for fresh := false; ; fresh = true {
		obs.Starting()
		var cc C
		var reused bool
		var err error
		if fresh {
			cc, reused, err = acquireNew(p, o)
		} else {
			cc, reused, err = acquire(p, o)
		}
		if err != nil {
			if ctx.Err() != nil {
				return Trip{}, reqctx.Cause(ctx)
			}
			return Trip{}, &Error{StageConnect, err}
		}
		conn := cc.Conn()
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
			if reused && !fresh {
				continue // the server closed it: nothing came back
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
			nothing := br.Buffered() == 0 // not a byte of an answer came
			fasthttp.ReleaseResponse(resp)
			obs.ReleaseReader(br)
			fail()
			switch {
			case ctx.Err() != nil:
				return Trip{}, reqctx.Cause(ctx)
			case reused && !fresh && nothing && Stale(err):
				continue
			}
			return Trip{}, &Error{StageHeaders, err}
		}
		o.Peer.learn(&resp.Header)
		t := Trip{Resp: resp, Conn: conn, Reused: reused, closing: resp.ConnectionClose(), br: br}
		t.Body.Reset(br, httpbody.Mode(req, resp), int64(resp.Header.ContentLength()))
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

// acquire takes a connection from p: a pooled one that has rested less
// than its server keeps one and that the server has not closed, closing
// those that fail either test, or else a new one. reused says it was
// pooled.
func acquire[C Conn](p Pool[C], o Options) (cc C, reused bool, err error) {
	for {
		cc, err = p.AcquireConn(o.Connect, false)
		if err != nil {
			return cc, false, err
		}
		last := cc.LastUseTime()
		if last.IsZero() {
			return cc, false, nil // dialled for this request
		}
		if o.Peer.keeps(time.Since(last)) && hangup.Resting(cc.Conn()) {
			return cc, true, nil
		}
		p.CloseConn(cc) // each turn takes one from the pool: the loop ends
	}
}

// maxHeld bounds the pooled connections acquireNew holds aside.
const maxHeld = 64

// acquireNew takes a connection of p for the retry of a request that
// failed on a pooled one: a new one, dialled for it, if it can. fasthttp
// has no call for that and dials only when its pool is empty, so the
// pooled connections it hands out on the way are held aside (those that
// fail the checks of acquire are closed) and given back, in their order,
// once the new one is in hand. When the pool cannot give a new one (it
// is full: ErrNoFreeConns; or the dial failed) or hands out more than maxHeld good pooled
// ones, the retry takes the pooled one that passed the checks last, as a
// retry did before new connections were sought: reused says so. No
// connection that passed the checks is closed. A pooled connection given
// back counts as just used (fasthttp sets its LastUseTime), so its server
// may close it sooner than Peer expects: hangup.Resting sees to that.
func acquireNew[C Conn](p Pool[C], o Options) (cc C, reused bool, err error) {
	var held [maxHeld]C
	n := 0
	defer func() {
		for n > 0 {
			n--
			p.ReleaseConn(held[n])
		}
	}()
	for {
		cc, err = p.AcquireConn(o.Connect, false)
		if err != nil {
			if n > 0 { // full (ErrNoFreeConns), or the dial failed
				n--
				return held[n], true, nil
			}
			return cc, false, err
		}
		last := cc.LastUseTime()
		if last.IsZero() {
			return cc, false, nil
		}
		if !o.Peer.keeps(time.Since(last)) || !hangup.Resting(cc.Conn()) {
			p.CloseConn(cc) // each such turn takes one from the pool: the loop ends
			continue
		}
		if n == maxHeld {
			return cc, true, nil
		}
		held[n] = cc
		n++
	}
}

// Peer is what a server's answers tell of its keep-alive connections,
// for all of them: how long it keeps an idle one (Keep-Alive: timeout=N,
// which llama.cpp's server and Apache send). The zero value knows
// nothing and keeps nothing from being reused. It is safe for concurrent
// use.
type Peer struct {
	idle atomic.Int64 // the server's idle timeout in nanoseconds; 0 unknown
}

// IdleTimeout is the server's keep-alive timeout as its last answer that
// stated one said; 0 before any did.
func (p *Peer) IdleTimeout() time.Duration { return time.Duration(p.idle.Load()) }

// keeps reports whether the server keeps a connection that has rested
// for d: d is short of its timeout by a margin for the request's trip and
// the two clocks' start (a quarter of it, at most a second; so 4 s of
// llama.cpp's 5). Nil or unknown: yes.
func (p *Peer) keeps(d time.Duration) bool {
	if p == nil {
		return true
	}
	t := time.Duration(p.idle.Load())
	return t == 0 || d < t-min(time.Second, t/4)
}

// learn notes the timeout an answer's Keep-Alive header states.
func (p *Peer) learn(h *fasthttp.ResponseHeader) {
	if p == nil {
		return
	}
	v := h.Peek(fasthttp.HeaderKeepAlive)
	if len(v) == 0 {
		// The pools keep header names as sent (DisableHeaderNamesNormalizing),
		// so "keep-alive: timeout=5" is missed by Peek.
		v = peekFold(h, fasthttp.HeaderKeepAlive)
		if len(v) == 0 {
			return
		}
	}
	if d, ok := KeepAliveTimeout(v); ok && int64(d) != p.idle.Load() {
		p.idle.Store(int64(d))
	}
}

// peekFold returns the value of h's header named name in any case.
func peekFold(h *fasthttp.ResponseHeader, name string) []byte {
	for k, v := range h.All() {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			return v
		}
	}
	return nil
}

// maxKeepAlive bounds a stated keep-alive timeout: a server that says
// more keeps a connection for less than the client's own idle limit
// anyway.
const maxKeepAlive = time.Hour

// KeepAliveTimeout reads the timeout parameter of a Keep-Alive header's
// value ("timeout=5, max=100"; RFC 2068 19.7.1.1, names matched without
// case, a value possibly quoted) in whole seconds, at most an hour. A
// timeout of 0 reads as a nanosecond: nothing idle is kept. ok is false
// without a readable timeout.
func KeepAliveTimeout(v []byte) (d time.Duration, ok bool) {
	for len(v) > 0 {
		var param []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			param, v = v[:i], v[i+1:]
		} else {
			param, v = v, nil
		}
		name, val, found := bytes.Cut(param, []byte{'='})
		if !found || !bytes.EqualFold(bytes.TrimSpace(name), []byte("timeout")) {
			continue
		}
		val = bytes.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		if len(val) == 0 {
			return 0, false
		}
		var secs int64
		for _, c := range val {
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs = secs*10 + int64(c-'0'); secs > int64(maxKeepAlive/time.Second) {
				return maxKeepAlive, true
			}
		}
		return max(time.Duration(secs)*time.Second, 1), true
	}
	return 0, false
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

// Fetch sends req on a connection of hc and reads the whole answer into
// resp, the body at most maxBody bytes (0: no bound): Do for the small
// calls beside the request path (health checks, metric scrapes, token
// counts), so they too get a connection the server has not closed.
// timeout bounds it all, from the dial to the body's end.
func Fetch(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration, maxBody int, peer *Peer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	trip, err := Do(ctx, hc, req, Options{Connect: timeout, Deadline: timeout, Peer: peer}, fetchObserver{hc})
	if err != nil {
		return err
	}
	defer fasthttp.ReleaseResponse(trip.Resp)
	r := io.Reader(&trip.Body)
	if maxBody > 0 {
		r = io.LimitReader(r, int64(maxBody)+1)
	}
	b, err := io.ReadAll(r)
	if err == nil && maxBody > 0 && len(b) > maxBody {
		err = fasthttp.ErrBodyTooLarge
	}
	trip.Finish(err == nil)
	if err != nil {
		if ctx.Err() != nil {
			return reqctx.Cause(ctx)
		}
		return fmt.Errorf("read body: %w", err)
	}
	trip.Resp.Header.CopyTo(&resp.Header)
	resp.SetBodyRaw(b)
	return nil
}

// fetchObserver reads through the pool's readers and notes nothing.
type fetchObserver struct{ hc *fasthttp.HostClient }

func (fetchObserver) Starting()                {}
func (fetchObserver) Connected(net.Conn, bool) {}
func (fetchObserver) Sent(net.Conn)            {}
func (o fetchObserver) Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader {
	if last != nil {
		return nil
	}
	return o.hc.AcquireReader(conn)
}
func (o fetchObserver) ReleaseReader(br *bufio.Reader) { o.hc.ReleaseReader(br) }

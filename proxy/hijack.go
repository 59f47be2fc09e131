package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/hangup"
	"github.com/valyala/fasthttp"
)

// streamResponse sends the status and headers set on rc, then runs body
// with a writer straight onto the client connection: each Flush is one
// HTTP chunk and one write(2), with no goroutine in between.
//
// fasthttp's SetBodyStreamWriter would run body in a goroutine of its own
// and pipe every flush through a second one to the socket: two wake-ups
// per event, and two goroutines per open stream; and it sends chunks even
// to an HTTP/1.0 client. So the connection is hijacked, the response
// written here, and afterwards, for a keep-alive client, handed back to
// the server with ServeConn.
//
// When the stream's ready reports that the first bytes of the body are
// already at hand, the headers leave with them in one write; otherwise
// they go at once, so the client sees the status while the model is still
// in prefill.
//
// fasthttp skips the hijack handler when it cannot flush an earlier
// pipelined response or reset the deadline; then the body never runs. So
// when the request's context ends before the handler starts (the hang-up
// watcher fires once fasthttp closes that connection), the stream is
// abandoned instead: whichever of the two comes first claims it.
func (x *exchange) streamResponse(rc *fasthttp.RequestCtx, s streamer) {
	g, ctx := x.g, &x.ctx
	// HTTP/1.0 has no chunked coding: its stream ends with the connection.
	chunked := rc.Request.Header.IsHTTP11()
	keep := chunked && !rc.Request.Header.ConnectionClose() && !g.draining.Load()
	h := &rc.Response.Header
	if chunked {
		h.SetContentLength(-1)
	} else {
		h.SetContentLength(-2) // identity: no length, no chunks
	}
	if !keep {
		h.SetConnectionClose()
	}
	cw := chunkPool.Get().(*chunkWriter)
	cw.headBuf = h.AppendBytes(cw.headBuf[:0])
	cw.raw = !chunked
	// One watch on the request's end serves both phases: before the body
	// runs it abandons the stream; while it runs, a total timeout or a
	// shutdown fails a write blocked on a client that stopped reading.
	stop := ctx.AfterFunc(func() {
		if x.claim() {
			s.abandon()
			return
		}
		if c := ctx.Cause(); errors.Is(c, errTotalTimeout) || errors.Is(c, errShutdown) {
			x.conn.unblock()
		}
	})
	rc.HijackSetNoResponse(true)
	x.streamed = true // the connection owns the response now
	rc.Hijack(func(c net.Conn) {
		cc := &x.conn
		cc.set(c, &cw.dl)
		if !x.claim() {
			cc.set(nil, nil)
			c.Close() // abandoned: the request is over
			return
		}
		cc.stop = stop // the body's: finishWith runs on this goroutine from here
		defer func() {
			stop()
			cc.set(nil, nil)
		}()
		owned := true // cw is this stream's until it goes back to the pool
		defer func() {
			if v := recover(); v != nil {
				// The writer's state is unknown: it is not pooled again,
				// and the connection is not reused.
				if owned {
					x.endAfterPanic(s, cw, v)
				} else {
					g.recovered(panicStream, v, x.id)
				}
				c.Close()
			}
		}()
		cw.c, cw.err, cw.wt = c, nil, g.state.Load().cfg.Server.WriteTimeout
		cw.dl.reset()
		w := cw.bw
		var err error
		if s.ready() {
			cw.head = cw.headBuf // sent before the first chunk, in its write
		} else if _, err = cw.write(cw.headBuf); err != nil {
			cw.err = err
		}
		if err == nil {
			s.body(w)
			if w.Flush() == nil && cw.err == nil && chunked {
				_, cw.err = cw.write(lastChunk)
			}
		}
		if cw.head != nil && cw.err == nil { // nothing was written after all
			_, cw.err = cw.write(cw.head)
		}
		ok := cw.err == nil
		cw.c, cw.head = nil, nil
		w.Reset(cw)
		if cap(cw.headBuf) > 16<<10 {
			cw.headBuf = nil
		}
		owned = false
		stop()
		cc.set(nil, nil)  // before the connection serves its next request
		chunkPool.Put(cw) // after: a late unblock resets no other stream's deadline
		if !ok || !keep || g.draining.Load() {
			c.Close()
			return
		}
		g.serveAgain(c)
	})
}

// claim reports whether the caller is the first of a stream's body and
// its abandonment to claim it.
func (x *exchange) claim() bool {
	x.conn.mu.Lock()
	defer x.conn.mu.Unlock()
	first := !x.claimed
	x.claimed = true
	return first
}

// streamer is a response body written after the handler returns: what
// the two kinds of stream differ in. A relayed one (the exchange itself,
// stream.go) has its backend's first event or awaits it; a keep-alive one
// (keepalive.go) was committed before its backend answered, and its
// forwarding may still run.
type streamer interface {
	// ready reports whether the first bytes are already at hand.
	ready() bool
	// body writes the response; each Flush of w goes out at once.
	body(w *bufio.Writer)
	// abandon releases what the body would have, when it will never run.
	abandon()
	// release ends the request after body panicked (panics.go).
	release(err error)
}

// clientConn is a stream's client connection while its body runs, so
// that the request's end can fail a write blocked on it. It belongs to
// one request and is never reused, so a late unblock finds nil.
type clientConn struct {
	mu sync.Mutex
	c  net.Conn
	wd *coarseDeadline // the stream writer's record of c's write deadline
	// stop disarms the watch on the request's end; finishWith calls it
	// before it cancels the request's context, so an ending stream starts
	// no goroutine for a watch it no longer needs.
	stop func() bool
}

// disarm stops the watch, when there is one.
func (cc *clientConn) disarm() {
	if cc.stop != nil {
		cc.stop()
	}
}

func (cc *clientConn) set(c net.Conn, wd *coarseDeadline) {
	cc.mu.Lock()
	cc.c, cc.wd = c, wd
	cc.mu.Unlock()
}

// unblock makes a write blocked on the connection, and every later one,
// fail at once.
func (cc *clientConn) unblock() {
	cc.mu.Lock()
	if cc.c != nil {
		_ = cc.c.SetWriteDeadline(time.Unix(1, 0))
		cc.wd.reset() // a later write (the stream's error event) sets its own again
	}
	cc.mu.Unlock()
}

var (
	_ streamer = (*exchange)(nil)
	_ streamer = (*keepAliveStream)(nil)
)

// serveAgain gives a keep-alive connection back to the server. Bytes the
// client already sent (a pipelined request) sit in the hijacked reader;
// they are collected first so the next request is read whole.
func (g *Gateway) serveAgain(hc net.Conn) {
	raw := hc
	if u, ok := hc.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn()
	}
	// A connection served again before is wrapped already: unwrap it once
	// its prefix is read, so wrappers do not pile up stream after stream.
	for {
		pc, ok := raw.(*prefixConn)
		if !ok || len(pc.pre) > 0 {
			break
		}
		raw = pc.Conn
	}
	pc := &prefixConn{Conn: raw}
	_ = raw.SetReadDeadline(time.Unix(1, 0)) // answer from the buffer, never wait
	for {
		n, err := hc.Read(pc.buf[:])
		pc.pre = append(pc.pre, pc.buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	_ = raw.SetReadDeadline(time.Time{})
	// fasthttp counts a connection as idle, to close at shutdown, only 5s
	// after ServeConn took it; the gateway closes its own at the end of a
	// drain instead.
	g.reservedMu.Lock()
	g.reserved[raw] = struct{}{}
	g.reservedMu.Unlock()
	defer func(c net.Conn) {
		g.reservedMu.Lock()
		delete(g.reserved, c)
		g.reservedMu.Unlock()
	}(raw)
	if len(pc.pre) == 0 {
		// An idle keep-alive connection. The server takes it at once, so
		// that its per-connection setup (context, reader) is done while
		// the client is idle rather than when its next request comes; but
		// ServeConn would count the wait as the first request's header
		// read and answer 408 to a client that merely kept its connection
		// open, racing the request it sends next. So pc waits for the
		// first byte as long as server.idle_timeout allows, keeping the
		// server's deadline off meanwhile, and tells the server the
		// client left if none comes: closed silently, as an idle one is.
		cfg := g.state.Load().cfg.Server
		pc.waiting, pc.header = true, cfg.HeaderTimeout
		var dl time.Time
		if cfg.IdleTimeout > 0 {
			dl = time.Now().Add(cfg.IdleTimeout)
		}
		_ = raw.SetReadDeadline(dl)
	}
	_ = g.srv.ServeConn(pc)
}

// closeReserved closes the connections handed back to the server.
func (g *Gateway) closeReserved() {
	g.reservedMu.Lock()
	defer g.reservedMu.Unlock()
	for c := range g.reserved {
		c.Close()
	}
}

// prefixConn reads pre before the connection itself. While waiting (an
// idle keep-alive connection the server has taken, serveAgain), the read
// deadline is the idle one set before: the server's are ignored, a
// timeout or error before the first byte reads as the client's leaving
// (io.EOF), and the first byte starts header's deadline, as the server
// would have for a new connection's first request.
type prefixConn struct {
	net.Conn
	pre     []byte
	buf     [2048]byte // bytes of the next request the hijacked reader held
	waiting bool
	header  time.Duration
}

// SetReadDeadline is the connection's, but for while waiting.
func (p *prefixConn) SetReadDeadline(t time.Time) error {
	if p.waiting {
		return nil
	}
	return p.Conn.SetReadDeadline(t)
}

// SetDeadline sets the write deadline and, but for while waiting, the
// read one.
func (p *prefixConn) SetDeadline(t time.Time) error {
	if p.waiting {
		return p.Conn.SetWriteDeadline(t)
	}
	return p.Conn.SetDeadline(t)
}

// SyscallConn is the socket's, so the hang-up watch and the round-trip
// time read the connection's descriptor through the wrapper.
func (p *prefixConn) SyscallConn() (syscall.RawConn, error) {
	c := p.Conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if sc, ok := c.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// SocketFD is the wrapped connection's descriptor: the one the accepted
// connection found once (countedConn), else the socket's, looked up now.
func (p *prefixConn) SocketFD() (int, bool) { return hangup.SocketFD(p.Conn) }

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	if !p.waiting {
		return p.Conn.Read(b)
	}
	n, err := p.Conn.Read(b)
	if n == 0 {
		return 0, io.EOF // idle past idle_timeout, or gone: nothing to answer
	}
	p.waiting = false
	var dl time.Time
	if p.header > 0 {
		dl = time.Now().Add(p.header)
	}
	_ = p.Conn.SetReadDeadline(dl)
	return n, err
}

var lastChunk = []byte("0\r\n\r\n")

// chunkWriter writes each Write as one HTTP/1.1 chunk in one syscall (or,
// for HTTP/1.0, as it is). It sits under a bufio.Writer, so a chunk is a
// flush. Each write may block for at most wt (server.write_timeout).
type chunkWriter struct {
	c       net.Conn
	wt      time.Duration
	raw     bool
	headBuf []byte // the response headers, serialised
	head    []byte // headBuf while not yet written: it goes with the first chunk
	buf     []byte
	err     error
	bw      *bufio.Writer
	dl      coarseDeadline // the write deadline
}

var chunkPool = sync.Pool{New: func() any {
	cw := &chunkWriter{buf: make([]byte, 0, 4096+16)}
	cw.bw = bufio.NewWriterSize(cw, 4096)
	return cw
}}

func (cw *chunkWriter) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	b := append(cw.buf[:0], cw.head...)
	cw.head = nil
	if cw.raw {
		b = append(b, p...)
	} else {
		b = strconv.AppendInt(b, int64(len(p)), 16)
		b = append(b, '\r', '\n')
		b = append(b, p...)
		b = append(b, '\r', '\n')
	}
	if cap(b) <= 64<<10 {
		cw.buf = b
	}
	if _, err := cw.write(b); err != nil {
		cw.err = err
		return 0, err
	}
	return len(p), nil
}

// write writes b to the connection under the write timeout, re-armed
// coarsely (coarseDeadline).
func (cw *chunkWriter) write(b []byte) (int, error) {
	if cw.wt > 0 {
		if now := time.Now(); cw.dl.due(now, cw.wt) {
			_ = cw.c.SetWriteDeadline(now.Add(cw.wt))
		}
	}
	return cw.c.Write(b)
}

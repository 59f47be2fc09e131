package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/infergate/infergate/internal/hangup"
	"go.opentelemetry.io/otel/metric"
)

// connLimit caps the client connections open at once (server.
// max_connections): past it, a new connection is closed as soon as it is
// accepted, before anything is read from it, and counted. Memory is
// budgeted, not hoped for: each open connection holds its buffers.
type connLimit struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.open.Load() >= l.max {
			l.refused.Add(1)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // nothing to flush: no request was read
			}
			c.Close()
			continue
		}
		l.open.Add(1)
		return &countedConn{Conn: c, l: l, FD: hangup.FDOf(c)}, nil
	}
}

// countedConn gives its place back when closed, once. It knows its
// socket's descriptor from the accept on, so the hang-up watcher, which
// polls it for every request, need not look it up each time.
type countedConn struct {
	net.Conn
	l *connLimit
	hangup.FD
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// SyscallConn reaches the socket underneath (the hang-up watcher polls it).
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSocket
}

var errNoSocket = errors.New("proxy: connection has no socket")

var _ syscall.Conn = (*countedConn)(nil)

// observeConns registers the API listener's open and refused connections.
func (g *Gateway) observeConns(meter metric.Meter) error {
	in := instruments{meter: meter}
	open := in.gauge("infergate.connections.open", "{connection}", "Client connections open on the API listener.")
	refused := in.counter("infergate.connections.refused", "{connection}", "Client connections closed unread because server.max_connections were open.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		if cl := g.conns.Load(); cl != nil {
			o.ObserveInt64(open, cl.open.Load())
			o.ObserveInt64(refused, cl.refused.Load())
		}
		return nil
	})
}

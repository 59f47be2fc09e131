// Package hangup tells when the peer of a TCP connection has gone away,
// without reading from the connection, so a server learns of a vanished
// client while it still waits on a backend (fasthttp's RequestCtx.Done fires
// only at shutdown: fasthttp issues #468, #965).
//
// On Linux one goroutine polls every watched socket for POLLRDHUP in a
// single poll(2) call per interval. POLLRDHUP reports a peer that shut down
// its side even while unread bytes (a pipelined request, a TLS alert) sit
// in the socket, and poll consumes nothing.
//
// Other systems have no POLLRDHUP (macOS reports a half-closed socket only
// as readable, which a pipelined request also is), so there Watch returns
// a handle that never fires and no goroutine runs: a server notices a
// vanished client at its next write instead, which for a stream is the
// next event and for a request still waiting on its backend is the first
// byte of the answer.
package hangup

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/supervise"
)

// DefaultInterval is how often sockets are polled when New is given zero.
const DefaultInterval = 20 * time.Millisecond

// Watcher polls registered connections and calls their callback once when
// the peer hangs up. It is safe for concurrent use; Close stops it.
type Watcher struct {
	interval time.Duration

	mu      sync.Mutex
	entries []*Handle
	set     pollSet // the platform's poll arguments

	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	panics atomic.Int64
}

// Handle is one watched connection. Stop it when the request ends.
type Handle struct {
	w     *Watcher
	fd    int32
	idx   int // position in w.entries, -1 once removed
	onHup func()
}

// New starts a watcher that polls every interval (DefaultInterval if zero).
func New(interval time.Duration) *Watcher {
	if interval <= 0 {
		interval = DefaultInterval
	}
	w := &Watcher{interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	if !supported {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		// A panic (in a callback, say) is counted and the loop restarted:
		// the watcher is never silently dead.
		supervise.Loop(w.stop, w.loop, func(any, []byte) { w.panics.Add(1) })
	}()
	return w
}

// Watch calls onHup (from the watcher's goroutine, at most once) when the
// peer of conn hangs up or the socket fails. The connection must stay open
// until the returned handle is stopped. A connection that has no socket to
// poll (a net.Pipe in tests) gives a handle that never fires.
func (w *Watcher) Watch(conn net.Conn, onHup func()) *Handle {
	h := &Handle{w: w, fd: -1, idx: -1, onHup: onHup}
	fd, ok := SocketFD(conn)
	if !ok || !supported {
		return h
	}
	h.fd = int32(fd)
	w.mu.Lock()
	h.idx = len(w.entries)
	w.entries = append(w.entries, h)
	w.mu.Unlock()
	return h
}

// Stop ends the watch. After Stop returns the callback will not start; it
// may be running already. Stop is idempotent.
func (h *Handle) Stop() {
	if h == nil || h.fd < 0 {
		return
	}
	h.w.mu.Lock()
	h.w.removeLocked(h)
	h.w.mu.Unlock()
}

func (w *Watcher) removeLocked(h *Handle) {
	i := h.idx
	if i < 0 {
		return
	}
	last := len(w.entries) - 1
	w.entries[i] = w.entries[last]
	w.entries[i].idx = i
	w.entries[last] = nil
	w.entries = w.entries[:last]
	h.idx = -1
}

// Len returns the number of connections being watched.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// Close stops the watcher and waits for its goroutine. Safe to call twice.
func (w *Watcher) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// Panics counts the panics recovered in the watcher's loop.
func (w *Watcher) Panics() int64 { return w.panics.Load() }

func (w *Watcher) loop() {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	var fired []*Handle
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		fired = w.poll(fired[:0])
		// Callbacks run outside the lock: they may cancel contexts, log, or
		// stop other handles.
		for i, h := range fired {
			h.onHup()
			fired[i] = nil
		}
	}
}

// FD is a socket's descriptor, looked up once when its connection was
// dialed or accepted. A connection wrapper embeds it for the SocketFD
// method that SocketFD looks for first: Watch and Resting poll a
// connection for every request, and a lookup through its syscall.RawConn
// each time would allocate. The zero value has no descriptor.
type FD struct {
	fd int
	ok bool
}

// FDOf looks up conn's descriptor (SocketFD) to keep.
func FDOf(conn net.Conn) FD {
	fd, ok := SocketFD(conn)
	return FD{fd: fd, ok: ok}
}

// SocketFD returns the descriptor kept, false when there is none.
func (f FD) SocketFD() (int, bool) { return f.fd, f.ok }

// SocketFD returns the file descriptor under conn, looking through TLS:
// from the connection's own SocketFD method when it has one (a wrapper
// that found it once, at accept), else through its syscall.RawConn.
func SocketFD(conn net.Conn) (int, bool) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if s, ok := conn.(interface{ SocketFD() (int, bool) }); ok {
		return s.SocketFD()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

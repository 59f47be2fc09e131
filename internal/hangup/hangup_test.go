//go:build linux

package hangup

import (
	"net"
	"testing"
	"time"
)

func pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

func TestWatchFiresOnPeerClose(t *testing.T) {
	w := New(5 * time.Millisecond)
	defer w.Close()
	client, server := pair(t)
	defer server.Close()
	// Unread bytes from the client must not hide its hang-up, and must not
	// be consumed by the watcher.
	if _, err := client.Write([]byte("pipelined")); err != nil {
		t.Fatal(err)
	}
	fired := make(chan struct{})
	h := w.Watch(server, func() { close(fired) })
	defer h.Stop()

	select {
	case <-fired:
		t.Fatal("fired while the client was still connected")
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	client.Close()
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatal("peer close not noticed within 2s")
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("noticed after %v, want under 100ms", d)
	}
	buf := make([]byte, 32)
	n, _ := server.Read(buf)
	if string(buf[:n]) != "pipelined" {
		t.Errorf("watcher consumed bytes: read %q", buf[:n])
	}
	if w.Len() != 0 {
		t.Errorf("fired handle still watched: Len=%d", w.Len())
	}
}

func TestStopPreventsCallback(t *testing.T) {
	w := New(5 * time.Millisecond)
	defer w.Close()
	client, server := pair(t)
	defer server.Close()
	h := w.Watch(server, func() { t.Error("callback after Stop") })
	h.Stop()
	h.Stop() // idempotent
	client.Close()
	time.Sleep(30 * time.Millisecond)
}

func TestPipeIsNotWatched(t *testing.T) {
	w := New(0)
	defer w.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	h := w.Watch(a, func() {})
	h.Stop()
	if w.Len() != 0 {
		t.Fatalf("Len=%d for a pipe", w.Len())
	}
	w.Close() // twice is fine
}

// fdConn hides its socket from syscall.Conn and tells its descriptor
// only through SocketFD, as the gateway's accepted connections do.
type fdConn struct {
	net.Conn
	fd int
}

func (c fdConn) SocketFD() (int, bool) { return c.fd, true }

func TestWatchUsesTheConnectionsOwnDescriptor(t *testing.T) {
	w := New(5 * time.Millisecond)
	defer w.Close()
	client, server := pair(t)
	defer server.Close()
	fd, ok := SocketFD(server)
	if !ok {
		t.Fatal("no descriptor for a TCP connection")
	}
	fired := make(chan struct{})
	h := w.Watch(fdConn{Conn: struct{ net.Conn }{server}, fd: fd}, func() { close(fired) })
	defer h.Stop()
	if w.Len() != 1 {
		t.Fatalf("watching %d connections, want 1", w.Len())
	}
	client.Close()
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatal("peer close not noticed through SocketFD")
	}
}

package roundtrip

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/hangup"
	"github.com/valyala/fasthttp"
)

// server answers one request per connection, advertising keep-alive,
// then closes it: the next request on the pooled connection finds it
// stale. It counts connections.
func server(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				var req fasthttp.Request
				if req.Read(bufio.NewReader(c)) != nil {
					return
				}
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				time.Sleep(20 * time.Millisecond) // then close: the pooled connection goes stale
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

type obs struct {
	hc       *fasthttp.HostClient // unused
	attempts *atomic.Int64        // Starting calls, when set
}

func (o obs) Starting() {
	if o.attempts != nil {
		o.attempts.Add(1)
	}
}
func (o obs) Connected(net.Conn, bool)    {}
func (o obs) Sent(net.Conn)               {}
func (o obs) ReleaseReader(*bufio.Reader) {}
func (o obs) Reader(c net.Conn, last *bufio.Reader) *bufio.Reader {
	if last != nil {
		return nil
	}
	return bufio.NewReader(c)
}

func get(t *testing.T, ctx context.Context, hc *fasthttp.HostClient) (Trip, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://" + hc.Addr + "/")
	return Do(ctx, hc, req, Options{Connect: time.Second, Deadline: 2 * time.Second}, obs{hc: hc})
}

func TestStalePooledConnectionIsReplacedOnce(t *testing.T) {
	addr, conns := server(t)
	hc := &fasthttp.HostClient{Addr: addr}
	for i := range 2 {
		trip, err := get(t, context.Background(), hc)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if trip.Resp.StatusCode() != 200 {
			t.Fatalf("request %d: status %d", i, trip.Resp.StatusCode())
		}
		if b, err := io.ReadAll(&trip.Body); err != nil || string(b) != "ok" {
			t.Fatalf("request %d: body %q, %v", i, b, err)
		}
		trip.Finish(true)
		fasthttp.ReleaseResponse(trip.Resp)
		time.Sleep(50 * time.Millisecond) // the server has closed it by now
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for two requests, want 2 (the stale one replaced)", n)
	}
}

func TestCancelledContextEndsTheWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hc := &fasthttp.HostClient{Addr: ln.Addr().String()}
	cause := errors.New("the client left")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	_, err = get(t, ctx, hc)
	if !errors.Is(err, cause) {
		t.Errorf("err %v, want the context's cause", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the wait ended %v after the cancel", d)
	}
}

func TestRefusedConnectionIsAConnectError(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, err := get(t, context.Background(), &fasthttp.HostClient{Addr: addr})
	var re *Error
	if !errors.As(err, &re) || re.Stage != StageConnect {
		t.Errorf("err %v, want a StageConnect error", err)
	}
}

// scripted is a server on real TCP whose answer to each request is
// decided by answer from the connection's number (from 1, in accept
// order) and the request's number on it (from 1): the bytes to write
// ("" closes the connection without answering) and whether to close
// after them. It counts connections.
func scripted(t *testing.T, answer func(conn, n int) (string, bool)) (*fasthttp.HostClient, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			id := int(conns.Add(1))
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					var req fasthttp.Request
					if req.Read(br) != nil {
						return
					}
					out, closeAfter := answer(id, n)
					if out == "" {
						return
					}
					if _, err := c.Write([]byte(out)); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	return &fasthttp.HostClient{Addr: ln.Addr().String()}, &conns
}

const okKeepAlive = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5, max=100\r\n\r\nok"

// do sends one request through Do and finishes it, reading the body.
func do(t *testing.T, hc *fasthttp.HostClient, o Options, attempts *atomic.Int64) (reused bool, err error) {
	t.Helper()
	return doOn(t, hc, hc.Addr, o, attempts)
}

// doOn is do on any pool of the server at addr.
func doOn[C Conn](t *testing.T, p Pool[C], addr string, o Options, attempts *atomic.Int64) (reused bool, err error) {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://" + addr + "/")
	req.Header.SetMethod("POST")
	req.SetBodyString(`{"stream":true}`)
	if o.Connect == 0 {
		o.Connect = time.Second
	}
	trip, err := Do(context.Background(), p, req, o, obs{attempts: attempts})
	if err != nil {
		return false, err
	}
	defer fasthttp.ReleaseResponse(trip.Resp)
	body := make([]byte, 2)
	if _, err := io.ReadFull(&trip.Body, body); err != nil || string(body) != "ok" {
		trip.Finish(false)
		return trip.Reused, fmt.Errorf("body %q: %v", body, err)
	}
	trip.Finish(true)
	return trip.Reused, nil
}

// A request that fails on a pooled connection before anything came
// back goes once more on a new connection, never on another pooled one:
// here every pooled connection fails its second request (the server
// read it and closed, as one does that times the connection out just
// then), so a retry on a pooled one would fail again.
func TestRetryIsOnANewConnection(t *testing.T) {
	t.Parallel()
	var second atomic.Int64
	firsts := barrier(3) // three requests at once take three connections
	hc, conns := scripted(t, func(_, n int) (string, bool) {
		if n > 1 {
			second.Add(1)
			return "", true
		}
		firsts()
		return okKeepAlive, false
	})
	fill(t, hc, 3)
	var attempts atomic.Int64
	reused, err := do(t, hc, Options{}, &attempts)
	if err != nil {
		t.Fatalf("the request failed: %v (server saw %d second requests)", err, second.Load())
	}
	if reused {
		t.Error("the answer came on a reused connection, want a new one")
	}
	if a, s, c := attempts.Load(), second.Load(), conns.Load(); a != 2 || s != 1 || c != 4 {
		t.Errorf("%d attempts, %d on pooled connections, %d connections; want 2, 1 and 4", a, s, c)
	}
	// The pooled connections set aside for the dial went back.
	if n := hc.IdleConnsCount(); n != 3 {
		t.Errorf("%d idle connections after the retry, want 3 (two set aside, the new one)", n)
	}
}

// barrier returns a func that blocks until k calls are in it (at most
// 10 s), then lets them all go; later calls go at once.
func barrier(k int64) func() {
	var in atomic.Int64
	all := make(chan struct{})
	return func() {
		if in.Add(1) == k {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
	}
}

// fill sends k requests at once to a server whose first answers wait at
// a barrier(k), so the pool ends with k idle connections.
func fill(t *testing.T, hc *fasthttp.HostClient, k int) {
	t.Helper()
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := do(t, hc, Options{}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := hc.IdleConnsCount(); n != k {
		t.Fatalf("%d idle connections after %d concurrent requests, want %d", n, k, k)
	}
}

// staleOnce is a server whose first answers wait at a barrier(k) and
// whose first request on a reused connection finds it closed (the server
// timed it out just then); it answers every other. second counts the
// requests on reused connections.
func staleOnce(t *testing.T, k int64) (hc *fasthttp.HostClient, conns, second *atomic.Int64) {
	second = new(atomic.Int64)
	firsts := barrier(k)
	hc, conns = scripted(t, func(_, n int) (string, bool) {
		if n > 1 {
			if second.Add(1) == 1 {
				return "", true
			}
			return okKeepAlive, false
		}
		firsts()
		return okKeepAlive, false
	})
	return hc, conns, second
}

// With many idle connections, one that went stale is still replaced by a
// new one, and none of the others, which the server keeps, is closed.
func TestRetryWithManyIdleConnections(t *testing.T) {
	t.Parallel()
	hc, conns, second := staleOnce(t, 40)
	fill(t, hc, 40)
	var attempts atomic.Int64
	reused, err := do(t, hc, Options{}, &attempts)
	if err != nil {
		t.Fatalf("the request failed: %v", err)
	}
	if reused {
		t.Error("the answer came on a reused connection, want a new one")
	}
	if a, s, c := attempts.Load(), second.Load(), conns.Load(); a != 2 || s != 1 || c != 41 {
		t.Errorf("%d attempts, %d on pooled connections, %d connections; want 2, 1 and 41", a, s, c)
	}
	if n := hc.IdleConnsCount(); n != 40 {
		t.Errorf("%d idle connections after the retry, want 40 (39 set aside, the new one)", n)
	}
}

// Past maxHeld good pooled connections, the retry takes the next one
// (it just passed the hang-up check) rather than failing or closing any.
func TestRetryPastMaxHeldTakesACheckedPooledConnection(t *testing.T) {
	t.Parallel()
	const k = maxHeld + 2
	hc, conns, second := staleOnce(t, k)
	fill(t, hc, k)
	var attempts atomic.Int64
	reused, err := do(t, hc, Options{}, &attempts)
	if err != nil {
		t.Fatalf("the request failed: %v", err)
	}
	if !reused {
		t.Error("the retry dialled, want the pooled connection past the ones held")
	}
	if a, s, c := attempts.Load(), second.Load(), conns.Load(); a != 2 || s != 2 || c != k {
		t.Errorf("%d attempts, %d on pooled connections, %d connections; want 2, 2 and %d", a, s, c, k)
	}
	if n := hc.IdleConnsCount(); n != k-1 {
		t.Errorf("%d idle connections after the retry, want %d (all but the stale one)", n, k-1)
	}
}

// fullPool is a pool at its MaxConns: it dials nothing, and with no idle
// connection it says ErrNoFreeConns, as fasthttp's does.
type fullPool[C Conn] struct {
	Pool[C]
	idle func() int
}

func (p fullPool[C]) AcquireConn(reqTimeout time.Duration, connectionClose bool) (C, error) {
	if p.idle() == 0 {
		var zero C
		return zero, fasthttp.ErrNoFreeConns
	}
	return p.Pool.AcquireConn(reqTimeout, connectionClose)
}

func full[C Conn](p Pool[C], idle func() int) fullPool[C] { return fullPool[C]{p, idle} }

// A retry on a full pool takes a pooled connection that passed the
// hang-up check rather than closing one to dial.
func TestRetryOnAFullPoolTakesACheckedPooledConnection(t *testing.T) {
	t.Parallel()
	hc, conns, second := staleOnce(t, 3)
	fill(t, hc, 3)
	var attempts atomic.Int64
	reused, err := doOn(t, full(hc, hc.IdleConnsCount), hc.Addr, Options{}, &attempts)
	if err != nil {
		t.Fatalf("the request failed: %v", err)
	}
	if !reused {
		t.Error("the answer came on a new connection, want a pooled one")
	}
	if a, s, c := attempts.Load(), second.Load(), conns.Load(); a != 2 || s != 2 || c != 3 {
		t.Errorf("%d attempts, %d on pooled connections, %d connections; want 2, 2 and 3", a, s, c)
	}
	if n := hc.IdleConnsCount(); n != 2 {
		t.Errorf("%d idle connections after the retry, want 2 (all but the stale one)", n)
	}
}

// A Keep-Alive header is learned whatever the case of its name, also
// from headers that keep names as sent (DisableNormalizing, as the
// gateway's pools do; Do's own response normalizes them).
func TestKeepAliveHeaderNameInAnyCase(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Keep-Alive", "keep-alive", "KEEP-ALIVE"} {
		for _, asSent := range []bool{false, true} {
			var h fasthttp.ResponseHeader
			if asSent {
				h.DisableNormalizing()
			}
			raw := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + name + ": timeout=3, max=100\r\n\r\n"
			if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			var peer Peer
			peer.learn(&h)
			if d := peer.IdleTimeout(); d != 3*time.Second {
				t.Errorf("%s (names as sent: %v): learned idle timeout %v, want 3s", name, asSent, d)
			}
		}
	}
}

// A pooled connection the server closed while it rested is seen closed
// before anything is written on it: the request goes on a new one at
// the first attempt.
func TestClosedPooledConnectionIsNotUsed(t *testing.T) {
	t.Parallel()
	// llama.cpp's server after a streamed answer: keep-alive said,
	// connection closed.
	hc, conns := scripted(t, func(int, int) (string, bool) { return okKeepAlive, true })
	if _, err := do(t, hc, Options{}, nil); err != nil {
		t.Fatal(err)
	}
	// Wait until the server's FIN is here (one loopback trip): the pooled
	// connection no longer rests.
	closed := false
	for deadline := time.Now().Add(5 * time.Second); !closed && time.Now().Before(deadline); {
		cc, err := hc.AcquireConn(time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		if cc.LastUseTime().IsZero() {
			t.Fatal("the pool dialled: the first connection is gone from it")
		}
		closed = !hangup.Resting(cc.Conn())
		hc.ReleaseConn(cc)
		if !closed {
			time.Sleep(time.Millisecond)
		}
	}
	if !closed {
		t.Fatal("the server's close did not reach the pooled connection in 5 s")
	}
	var attempts atomic.Int64
	reused, err := do(t, hc, Options{}, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	if reused || attempts.Load() != 1 || conns.Load() != 2 {
		t.Errorf("reused %v, %d attempts, %d connections; want a new connection at the first attempt", reused, attempts.Load(), conns.Load())
	}
}

// A server's Keep-Alive timeout is learned from its answers, and a
// pooled connection that rested close to it is not used: here the server
// would keep it, so only the stated timeout keeps the client from it.
func TestStatedKeepAliveTimeoutIsHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header string
		reused bool
	}{
		// 800 ms of rest is past 1 s less its margin (a quarter).
		{"timeout=1", "Keep-Alive: timeout=1\r\n", false},
		{"timeout=5", "Keep-Alive: timeout=5, max=100\r\n", true},
		{"no header", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hc, conns := scripted(t, func(int, int) (string, bool) {
				return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + tc.header + "\r\nok", false
			})
			var peer Peer
			if _, err := do(t, hc, Options{Peer: &peer}, nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(800 * time.Millisecond)
			reused, err := do(t, hc, Options{Peer: &peer}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if reused != tc.reused || conns.Load() != map[bool]int64{true: 1, false: 2}[tc.reused] {
				t.Errorf("reused %v with %d connections, want reused %v (learned idle timeout %v)", reused, conns.Load(), tc.reused, peer.IdleTimeout())
			}
		})
	}
}

// Connection: close is honoured even when the server then keeps the
// connection open.
func TestConnectionCloseIsHonoured(t *testing.T) {
	t.Parallel()
	hc, conns := scripted(t, func(int, int) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", false
	})
	for range 2 {
		if _, err := do(t, hc, Options{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if conns.Load() != 2 || hc.IdleConnsCount() != 0 {
		t.Errorf("%d connections, %d idle; want 2 and none kept", conns.Load(), hc.IdleConnsCount())
	}
}

// Finish pools a connection only when its body was read to the end with
// nothing after it: a caller that stopped early, or a server that sent
// more than it declared, leaves bytes that would be read as the next
// answer.
func TestFinishPoolsOnlyAWholeBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
		read         bool
		pooled       bool
	}{
		{"read", okKeepAlive, true, true},
		{"unread", okKeepAlive, false, false},
		{"bytes after it", okKeepAlive + "junk", true, false}, // one write: read with the headers
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc, _ := scripted(t, func(int, int) (string, bool) { return tc.answer, false })
			trip, err := get(t, context.Background(), hc)
			if err != nil {
				t.Fatal(err)
			}
			defer fasthttp.ReleaseResponse(trip.Resp)
			if tc.read {
				if b, err := io.ReadAll(&trip.Body); err != nil || string(b) != "ok" {
					t.Fatalf("body %q, %v", b, err)
				}
			}
			trip.Finish(true)
			if got := hc.IdleConnsCount() == 1; got != tc.pooled {
				t.Errorf("pooled %v, want %v", got, tc.pooled)
			}
		})
	}
}

func TestKeepAliveTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"timeout=5, max=100", 5 * time.Second, true}, // llama.cpp's
		{"max=100, timeout=5", 5 * time.Second, true},
		{" Timeout = 30 ", 30 * time.Second, true},
		{`timeout="7"`, 7 * time.Second, true},
		{"timeout=0", 1, true}, // keeps nothing idle
		{"timeout=99999999999999999999", time.Hour, true},
		{"max=100", 0, false},
		{"timeout=", 0, false},
		{"timeout=-1", 0, false},
		{"timeout=1.5", 0, false},
		{"timeouts=5", 0, false},
		{"", 0, false},
	} {
		d, ok := KeepAliveTimeout([]byte(tc.in))
		if d != tc.want || ok != tc.ok {
			t.Errorf("KeepAliveTimeout(%q) = %v, %v; want %v, %v", tc.in, d, ok, tc.want, tc.ok)
		}
	}
}

func FuzzKeepAliveTimeout(f *testing.F) {
	for _, s := range []string{"timeout=5, max=100", `timeout="7"`, "timeout=0", ",,=,timeout", "timeout=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := KeepAliveTimeout([]byte(s))
		if ok && (d <= 0 || d > time.Hour) {
			t.Errorf("KeepAliveTimeout(%q) = %v, out of (0, 1h]", s, d)
		}
		if !ok && d != 0 {
			t.Errorf("KeepAliveTimeout(%q) = %v, false", s, d)
		}
	})
}

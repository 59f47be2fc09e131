package roundtrip

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

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

type obs struct{ hc *fasthttp.HostClient }

func (o obs) Starting()                   {}
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
	return Do(ctx, hc, req, Options{Connect: time.Second, Deadline: 2 * time.Second}, obs{hc})
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
		// The body ("ok") is left in the reader; reuse the connection.
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

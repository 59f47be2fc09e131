package proxy

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// The whole-request benchmark: what one request costs the gateway end to
// end, from the client's bytes in to the last byte out, with the
// gateway's defaults (metrics on, no request log, no spans). The client
// reaches the gateway over an in-memory listener; the backend is a
// minimal HTTP/1.1 responder on loopback that answers every request with
// the same pre-rendered bytes, so nearly all the time and every
// allocation counted is the gateway's (the fasthttp client and the
// responder allocate nothing per request once warm).

// benchEvents is the number of content events of a streamed answer.
const benchEvents = 20

// rawBackend serves resp to every request on a loopback port until the
// test ends.
func rawBackend(tb testing.TB, resp []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				var req fasthttp.Request
				for {
					if err := req.Read(br); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// streamResponseBytes is a chunked SSE answer of n events, vLLM-like.
func streamResponseBytes(n int) []byte {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	put := func(ev string) { fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev) }
	for i := range n {
		put(chunk("tok" + strconv.Itoa(i)))
	}
	put(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+3) + "}}\n\n")
	put(doneEvent)
	b.WriteString("0\r\n\r\n")
	return []byte(b.String())
}

const plainAnswer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func plainResponseBytes() []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(plainAnswer)) + "\r\n\r\n" + plainAnswer)
}

// benchGateway is a gateway in front of a raw backend, and a client that
// reaches it in memory.
type benchGateway struct {
	g   *Gateway
	hc  *fasthttp.HostClient
	req *fasthttp.Request
	res *fasthttp.Response
}

func newBenchGateway(tb testing.TB, stream bool) *benchGateway {
	tb.Helper()
	resp, body := plainResponseBytes(), plainBody
	if stream {
		resp, body = streamResponseBytes(benchEvents), streamBody
	}
	g, err := New(testConfig(rawBackend(tb, resp)), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	go g.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
		ln.Close()
	})
	bg := &benchGateway{g: g, req: fasthttp.AcquireRequest(), res: fasthttp.AcquireResponse(),
		hc: &fasthttp.HostClient{Addr: "gateway", Dial: func(string) (net.Conn, error) { return ln.Dial() }, MaxConns: 1}}
	bg.req.Header.SetMethod("POST")
	bg.req.SetRequestURI("http://gateway/v1/chat/completions")
	bg.req.Header.SetContentType("application/json")
	bg.req.SetBodyString(body)
	return bg
}

// do sends one request and checks its answer.
func (bg *benchGateway) do(tb testing.TB) {
	if err := bg.hc.Do(bg.req, bg.res); err != nil {
		tb.Fatal(err)
	}
	if bg.res.StatusCode() != 200 || len(bg.res.Body()) == 0 {
		tb.Fatalf("status %d, body %q", bg.res.StatusCode(), bg.res.Body())
	}
}

// BenchmarkGateway: go test ./proxy -run '^$' -bench BenchmarkGateway -benchmem
func BenchmarkGateway(b *testing.B) {
	for _, tc := range []struct {
		name   string
		stream bool
	}{{"plain", false}, {"stream", true}} {
		b.Run(tc.name, func(b *testing.B) {
			bg := newBenchGateway(b, tc.stream)
			for range 100 { // warm the pools and the backend connection
				bg.do(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bg.do(b)
			}
		})
	}
}

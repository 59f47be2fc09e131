// Command floorproxy is the least a fasthttp reverse proxy does: a
// server, a pooled client to one backend, the answer copied back. No
// validation, routing, admission, retries, timeouts, timeline or
// telemetry. It is the floor the overhead harness can put in the
// gateway's place (overhead --gateway-bin) to tell the cost of
// infergate's own per-request work from the cost of Go and fasthttp.
//
// It is a measuring instrument for non-streaming scenarios (cpu-plain):
// streams are relayed by a naive hijack that re-serves each connection
// on a new goroutine, so its streaming figures are not a floor.
//
// It takes the flags the harness gives a gateway:
//
//	floorproxy serve --upstream http://HOST:PORT --listen ADDR [--admin-listen ADDR] [--log-level L]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		slog.Error("floorproxy", "err", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || args[0] != "serve" {
		return fmt.Errorf("usage: floorproxy serve --upstream URL --listen ADDR")
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	upstream := fs.String("upstream", "", "backend base URL, http://host:port")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	fs.String("admin-listen", "", "ignored (the harness gives every gateway one)")
	fs.String("log-level", "", "ignored")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	host, ok := strings.CutPrefix(*upstream, "http://")
	if !ok || host == "" {
		return fmt.Errorf("--upstream must be http://host:port, got %q", *upstream)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return newProxy(host).srv.Serve(ln)
}

type proxy struct {
	host string
	hc   *fasthttp.HostClient
	srv  *fasthttp.Server
}

func newProxy(host string) *proxy {
	p := &proxy{host: host, hc: &fasthttp.HostClient{Addr: host, MaxConns: 1 << 16, StreamResponseBody: true}}
	p.srv = &fasthttp.Server{Handler: p.handle, KeepHijackedConns: true, NoDefaultServerHeader: true, NoDefaultContentType: true}
	return p
}

var eventStream = []byte("text/event-stream")

func (p *proxy) handle(c *fasthttp.RequestCtx) {
	c.Request.Header.SetHost(p.host)
	resp := fasthttp.AcquireResponse()
	if err := p.hc.Do(&c.Request, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		c.Error(err.Error(), fasthttp.StatusBadGateway)
		return
	}
	if !bytes.HasPrefix(resp.Header.ContentType(), eventStream) {
		resp.Header.CopyTo(&c.Response.Header)
		c.Response.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
		return
	}
	c.HijackSetNoResponse(true)
	c.Hijack(func(conn net.Conn) {
		defer fasthttp.ReleaseResponse(resp)
		if !relay(conn, resp) {
			conn.Close()
			return
		}
		_ = p.srv.ServeConn(conn) // closes conn unless hijacked again
	})
}

// relay writes the stream to conn in chunked encoding, one chunk and one
// flush per read of the backend's body, and reports whether it ended well.
func relay(conn net.Conn, resp *fasthttp.Response) bool {
	bw := bufio.NewWriterSize(conn, 4096)
	fmt.Fprintf(bw, "HTTP/1.1 %d OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", resp.StatusCode())
	if bw.Flush() != nil {
		return false
	}
	body := resp.BodyStream()
	buf := make([]byte, 16<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			bw.WriteString(strconv.FormatInt(int64(n), 16))
			bw.WriteString("\r\n")
			bw.Write(buf[:n])
			bw.WriteString("\r\n")
			if bw.Flush() != nil {
				return false
			}
		}
		if err != nil {
			break
		}
	}
	bw.WriteString("0\r\n\r\n")
	return resp.CloseBodyStream() == nil && bw.Flush() == nil
}

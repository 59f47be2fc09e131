package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzServerSocket throws arbitrary bytes at a live gateway's socket. Any
// answer is a well-formed HTTP response; the gateway never panics or
// hangs a connection past its read timeout, and it keeps serving
// ordinary requests.
func FuzzServerSocket(f *testing.F) {
	for _, s := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}",
		"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n",
		"POST /v1/x%2F HTTP/1.0\r\n\r\n",
		"\x00\xff\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	be := newTestBackend(f, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.DefaultPool = "p"
	cfg.Server.HeaderTimeout = 300 * time.Millisecond
	cfg.Server.ReadTimeout = 300 * time.Millisecond
	cfg.Server.WriteTimeout = 300 * time.Millisecond
	gw := startGateway(f, cfg)
	n := 0
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := net.Dial("tcp", gw.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.Write(raw)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the gateway held the connection past its timeouts on %q", raw)
				}
				break // closed: fine
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if n++; n%50 == 0 {
			if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody); status != 200 || !strings.Contains(body, "ok") {
				t.Fatalf("after fuzzing, an ordinary request: %d %s", status, body)
			}
		}
	})
}

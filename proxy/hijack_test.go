package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A keep-alive client may send its next request before the stream ends
// (pipelining): the bytes wait in the hijacked connection's reader and
// must reach the server again, whole.
func TestPipelinedRequestAfterStream(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(3, 20*time.Millisecond))
	gw := startGateway(t, testConfig(be.URL))
	c, err := net.Dial("tcp", gw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := streamRequest(streamBody)
	if _, err := io.WriteString(c, req+req); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("response %d: status %d err %v body %q", i, resp.StatusCode, err, body)
		}
	}
	if n := be.requests.Load(); n != 2 {
		t.Errorf("backend saw %d requests, want 2", n)
	}
}

// A stream request pipelined behind one the gateway answers plainly: the
// server still holds that answer in its buffer when the stream starts, and
// it must reach the client first, whole, before the stream.
func TestPipelinedStreamAfterPlainAnswer(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(3, 0))
	gw := startGateway(t, testConfig(be.URL))
	c, err := net.Dial("tcp", gw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get := "GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n"
	if _, err := io.WriteString(c, get+streamRequest(streamBody)+get); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i, want := range []int{http.StatusMethodNotAllowed, http.StatusOK, http.StatusMethodNotAllowed} {
		resp, body := readResponse(t, br)
		if resp.StatusCode != want {
			t.Fatalf("response %d: status %d, want %d; body %q", i, resp.StatusCode, want, body)
		}
		if want == http.StatusOK && !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("stream: body %q", body)
		}
	}
}

// Many streams in a row on one keep-alive connection.
func TestKeepAliveAcrossStreams(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(2, 0))
	gw := startGateway(t, testConfig(be.URL))
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	client := &http.Client{Transport: tr}
	conns := map[string]bool{}
	for i := range 20 {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(streamBody))
		var local string
		req = req.WithContext(withConnTrace(req.Context(), &local))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("request %d: body %q", i, body)
		}
		conns[local] = true
	}
	if len(conns) != 1 {
		t.Errorf("20 streams used %d client connections, want 1 kept alive", len(conns))
	}
}

// HTTP/1.0 has no chunked encoding: the stream is delimited by the close.
func TestHTTP10Stream(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(2, 0))
	gw := startGateway(t, testConfig(be.URL))
	c, err := net.Dial("tcp", gw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(streamBody), streamBody)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(c)
	head, body, _ := strings.Cut(string(all), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.") || strings.Contains(strings.ToLower(head), "transfer-encoding: chunked") {
		t.Errorf("HTTP/1.0 response head %q", head)
	}
	if !strings.HasSuffix(body, doneEvent) || len(events(body)) != 4 {
		t.Errorf("HTTP/1.0 body %q", body)
	}
}

// TestIdleAfterStream: a keep-alive connection left idle after a stream,
// longer than server.header_timeout but within idle_timeout, still takes
// the next request (it once got an unasked 408 there, which a client
// reads as its next request's answer); past idle_timeout it is closed
// without a word.
func TestIdleAfterStream(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(2, 0))
	cfg := testConfig(be.URL)
	cfg.Server.HeaderTimeout, cfg.Server.IdleTimeout = 150*time.Millisecond, 600*time.Millisecond
	gw := startGateway(t, cfg)
	conn, err := net.Dial("tcp", gw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func() *http.Response {
		t.Helper()
		io.WriteString(conn, streamRequest(streamBody))
		resp, body := readResponse(t, br)
		if resp.StatusCode != 200 || !strings.HasSuffix(string(body), doneEvent) {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		return resp
	}
	send()
	// A request larger than one read of the waiting connection: the rest
	// sits in the reader the stream left behind and must reach the server.
	big := strings.Replace(streamBody, `"content":"hi"`, `"content":"`+strings.Repeat("x", 9000)+`"`, 1)
	io.WriteString(conn, streamRequest(big))
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a 9 KB request after a stream: %v %v", resp, err)
	} else {
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	conn.SetReadDeadline(time.Time{})
	time.Sleep(350 * time.Millisecond) // past header_timeout, within idle_timeout
	conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if b, err := br.Peek(1); len(b) > 0 {
		t.Fatalf("the idle connection got %q unasked (err %v)", b, err)
	}
	conn.SetReadDeadline(time.Time{})
	send()
	// Past idle_timeout: closed, and nothing written.
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := br.ReadByte()
	if err == nil {
		rest, _ := br.Peek(br.Buffered())
		t.Fatalf("an idle connection got %q%q instead of a silent close", b, rest)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the idle connection was not closed within idle_timeout")
	}
}

// TestClientGoneAfterKeptAliveStream: on a connection served again after
// a stream, a client that leaves while its next request waits for the
// first byte still cancels the backend's work at once (the hang-up watch
// sees the socket through the connection's wrapper).
func TestClientGoneAfterKeptAliveStream(t *testing.T) {
	t.Parallel()
	sawClose := make(chan time.Time, 1)
	var n atomic.Int32
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			sseHandler(2, 0)(w, r)
			return
		}
		<-r.Context().Done() // a long prefill
		sawClose <- time.Now()
	})
	gw := startGateway(t, testConfig(be.URL))
	conn, br := rawStream(t, gw.Addr, streamBody)
	readResponse(t, br)
	io.WriteString(conn, streamRequest(streamBody))
	waitFor(t, 2*time.Second, "the backend to get the second request", func() bool { return n.Load() == 2 })
	leaveAndExpectBackendClose(t, conn, sawClose)
}

// TestCutOffAfterStream: a client that sends half a request on a
// connection kept alive after a stream and then vanishes, or one that
// vanishes idle, leaves nothing behind: the connection is let go.
func TestCutOffAfterStream(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(2, 0))
	cfg := testConfig(be.URL)
	cfg.Server.HeaderTimeout = 300 * time.Millisecond
	gw := startGateway(t, cfg)
	for _, tail := range []string{"POST /v1/chat/compl", "", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"model\":"} {
		conn, br := rawStream(t, gw.Addr, streamBody)
		readResponse(t, br)
		io.WriteString(conn, tail)
		conn.Close()
	}
	waitFor(t, 3*time.Second, "every served-again connection let go", func() bool {
		gw.reservedMu.Lock()
		defer gw.reservedMu.Unlock()
		return len(gw.reserved) == 0
	})
	if code, _, _ := post(t, gw.URL, "/v1/chat/completions", plainBody); code != 200 {
		t.Errorf("the gateway after cut-off clients: %d", code)
	}
}

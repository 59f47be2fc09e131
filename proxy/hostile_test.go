package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sendRaw writes req as bytes on a new connection (closing its write
// side when halfClose is set) and reads the answer with net/http's
// parser; the connection closes when the test ends.
func sendRaw(t *testing.T, addr, req string, halfClose bool) (net.Conn, *http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
	}
	return c, resp, err
}

// rawRequest writes req as bytes on a new connection and returns the
// response, read by net/http's parser.
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Encoded ?, #, / and \, and dot or empty segments, cannot move a request
// out of the strict completions checks, or send the backend a path other
// than the one the gateway routed.
func TestEncodedPathsAreRefused(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.DefaultPool = "p"
	gw := startGateway(t, cfg)
	tests := []struct {
		name, path string
		status     int
	}{
		{"encoded question mark", "/v1/chat/completions%3F", 400},
		{"encoded question mark, lower case", "/v1/chat/completions%3f", 400},
		{"encoded hash", "/v1/chat/completions%23x", 400},
		{"encoded slash", "/v1/chat%2Fcompletions", 400},
		{"encoded backslash", "/v1/chat%5Ccompletions", 400},
		{"encoded dot segment", "/v1/x/%2E%2E/chat/completions", 400},
		{"dot segment", "/v1/x/../chat/completions", 400},
		{"empty segment", "/v1//chat/completions", 400},
		{"encoded percent", "/v1/chat/completions%2500", 400},
		{"bad escape", "/v1/chat/completions%zz", 400},
		{"encoded NUL", "/v1/chat/completions%00", 400},
		// A harmless encoding decodes the same everywhere: the strict
		// route still applies, and the body is checked.
		{"encoded letter still strict", "/v1/chat/%63ompletions", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := be.requests.Load()
			status, body := rawRequest(t, gw.Addr, "POST "+tc.path+" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\nnot json")
			if status != tc.status || !strings.Contains(body, `"error"`) {
				t.Errorf("%s: %d %s, want %d with an OpenAI error", tc.path, status, body, tc.status)
			}
			if n := be.requests.Load() - before; n != 0 {
				t.Errorf("%s reached the backend (%d requests)", tc.path, n)
			}
		})
	}
	// A valid request on a harmless encoding reaches the backend on the
	// path the gateway checked.
	status, body := rawRequest(t, gw.Addr, "POST /v1/chat/%63ompletions HTTP/1.1\r\nHost: gw\r\nContent-Length: "+fmt.Sprint(len(plainBody))+"\r\n\r\n"+plainBody)
	if status != 200 {
		t.Fatalf("encoded letter: %d %s", status, body)
	}
	if r, _ := be.last(); r == nil || r.URL.Path != "/v1/chat/completions" {
		t.Errorf("the backend saw %v, want /v1/chat/completions", r.URL)
	}
}

// Client copies of headers the gateway sets never reach the backend
// beside the gateway's own.
func TestGatewayHeadersAreNotDuplicated(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	gw := startGateway(t, testConfig(be.URL))
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" +
		"X-Request-Id: first\r\nX-Request-Id: second\r\n" +
		"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n" +
		"X-Infergate-Timing: 1\r\nX-Infergate-Internal: x\r\nX-Sim-Fault: error=503\r\n" +
		"Content-Length: " + fmt.Sprint(len(plainBody)) + "\r\n\r\n" + plainBody
	if status, body := rawRequest(t, gw.Addr, req); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	r, _ := be.last()
	if ids := r.Header.Values("X-Request-Id"); len(ids) != 1 {
		t.Errorf("backend got X-Request-Id %q, want one", ids)
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "10.0.0.1, 10.0.0.2, 127.0.0.1" {
		t.Errorf("backend got X-Forwarded-For %q, want one, the client's copies merged and the client's address last", xff)
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-infergate-") {
			t.Errorf("backend got the gateway's own header %s", k)
		}
	}
	if f := r.Header.Get("X-Sim-Fault"); f != "" {
		t.Errorf("backend got X-Sim-Fault %q without server.forward_sim_fault", f)
	}
}

// Model names are bounded before they become labels: a 10 KB name gets
// 400, and many distinct long names leave the scrape small.
func TestLongModelNamesStayBounded(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.DefaultPool = "p" // as in the quick start: any model is routed
	gw := startGateway(t, cfg)
	for i := range 64 {
		huge := fmt.Sprintf(`{"model":"%d%s","messages":[]}`, i, strings.Repeat("x", 10<<10))
		if status, _, body := post(t, gw.URL, "/v1/chat/completions", huge); status != 400 || !strings.Contains(body, "model_too_long") {
			t.Fatalf("10 KB model name: %d %s, want 400 model_too_long", status, body)
		}
		long := fmt.Sprintf(`{"model":"%d%s","messages":[]}`, i, strings.Repeat("y", 250))
		if status, _, body := post(t, gw.URL, "/v1/chat/completions", long); status != 200 {
			t.Fatalf("250-byte model name: %d %s", status, body)
		}
	}
	if status, _, body := post(t, gw.URL, "/v1/chat/completions", "{\"model\":\"m\x94\",\"messages\":[]}"); status != 400 || !strings.Contains(body, "UTF-8") {
		t.Errorf("a model name that is not UTF-8: %d %s, want 400", status, body)
	}
	if be.requests.Load() != 64 {
		t.Errorf("backend saw %d requests, want the 64 with names it may serve", be.requests.Load())
	}
	gw.syncTelemetry()
	resp, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n > 1<<20 {
		t.Errorf("/metrics is %d bytes after 64 long model names, want under 1 MiB", n)
	}
	resp, err = http.Get(gw.AdminURL + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	n, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n > 256<<10 {
		t.Errorf("/admin/stats is %d bytes, want a bounded view", n)
	}
}

// floodHandler streams 1 KB events as fast as the gateway takes them
// until the request is cancelled, and reports the cancel on cancelled.
func floodHandler(cancelled chan<- struct{}) http.HandlerFunc {
	ev := chunk(strings.Repeat("z", 1000))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		deadline := time.Now().Add(20 * time.Second) // bounded, whatever happens
		for time.Now().Before(deadline) {
			if _, err := io.WriteString(w, ev); err != nil {
				break
			}
			f.Flush()
			if r.Context().Err() != nil {
				break
			}
		}
		select {
		case cancelled <- struct{}{}:
		default:
		}
	}
}

// stalledClient sends a streaming request from a socket with a tiny
// receive buffer and never reads the answer.
func stalledClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: setSmallRcvBuf}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(streamBody)) + "\r\n\r\n" + streamBody
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// A client that stops reading a stream holds nothing for long: after
// server.write_timeout (or timeouts.total, whichever comes first) the
// backend request is cancelled and the slot released, so with one slot
// the next request is served.
func TestStalledClientReleasesItsSlot(t *testing.T) {
	for _, tc := range []struct {
		name         string
		write, total time.Duration
	}{
		{"write timeout", 300 * time.Millisecond, 30 * time.Second},
		{"total timeout while a write blocks", 30 * time.Second, 800 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cancelled := make(chan struct{}, 1)
			be := newTestBackend(t, floodHandler(cancelled))
			cfg := testConfig(be.URL)
			cfg.Server.WriteTimeout = tc.write
			cfg.Timeouts.Total = tc.total
			cfg.Shaping.Global.MaxRequests = 1
			cfg.Shaping.Queue.Timeout = 100 * time.Millisecond
			gw := startGateway(t, cfg)
			start := time.Now()
			stalledClient(t, gw.Addr)
			select {
			case <-cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the backend request was not cancelled while the client did not read")
			}
			waitFor(t, 5*time.Second, "the slot released", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
			if d := time.Since(start); d > min(tc.write, tc.total)+3*time.Second {
				t.Errorf("released after %v, want about %v", d, min(tc.write, tc.total))
			}
			be.set(jsonHandler(200, `{"ok":true}`))
			if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody); status != 200 {
				t.Errorf("the next request: %d %s", status, body)
			}
		})
	}
}

// Oversized headers get 431, and connections past server.max_connections
// are closed unread and counted, while the ones within keep being served.
func TestHeaderAndConnectionLimits(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.Server.MaxConnections = 4
	gw := startGateway(t, cfg)

	big := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\nContent-Length: 2\r\n\r\n{}"
	if status, body := rawRequest(t, gw.Addr, big); status != 431 || !strings.Contains(body, "request_header_too_large") {
		t.Errorf("16 KiB of headers: %d %s, want 431", status, body)
	}
	many := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + strings.Repeat("X-A: b\r\n", 2000) + "Content-Length: 2\r\n\r\n{}"
	if status, _ := rawRequest(t, gw.Addr, many); status != 431 {
		t.Errorf("2,000 headers: %d, want 431", status)
	}

	// The connections of the two requests above close as their answers go.
	waitFor(t, 2*time.Second, "no connection open", func() bool { return gw.conns.Load().open.Load() == 0 })
	var idle []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", gw.Addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		defer c.Close()
	}
	waitFor(t, 2*time.Second, "4 connections open", func() bool { return gw.conns.Load().open.Load() == 4 })
	// The fifth is closed unread (a reset can already meet the dial).
	if c, err := net.Dial("tcp", gw.Addr); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
			t.Errorf("a connection past the cap: read %d bytes, %v; want it closed", n, err)
		}
		c.Close()
	}
	waitFor(t, 2*time.Second, "the refusal counted", func() bool { return gw.conns.Load().refused.Load() == 1 })
	// One of the four that are in serves a request.
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(plainBody)) + "\r\n\r\n" + plainBody
	if _, err := io.WriteString(idle[0], req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle[0]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a connection within the cap: %v %v", resp, err)
	}
	resp.Body.Close()
	mr, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	if !strings.Contains(string(text), "infergate_connections_refused_total 1\n") {
		t.Error("infergate_connections_refused_total is not 1 on /metrics")
	}
}

// What plainPath accepts decodes to a path that routes the same in every
// server: nothing that ends a path, no dot or empty segment.
func FuzzPlainPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/chat/completions%3F", "/v1/x/../y", "/v1//a", "/v1/%63", "/v1/a%2", "/v1/a/", "/v1/%25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !plainPath([]byte(raw)) {
			return
		}
		dec, err := url.PathUnescape(raw)
		if err != nil {
			t.Fatalf("accepted %q, which does not decode: %v", raw, err)
		}
		if strings.ContainsAny(dec, "?#\\\x00") || strings.Contains(dec, "//") {
			t.Fatalf("accepted %q, which decodes to %q", raw, dec)
		}
		for _, seg := range strings.Split(dec, "/")[1:] {
			if seg == "." || seg == ".." {
				t.Fatalf("accepted %q, which decodes to the dot segment of %q", raw, dec)
			}
		}
	})
}

// Request smuggling: a request whose framing two parsers could read
// differently is refused, or reaches the backend exactly as the gateway
// read it: one request, re-framed by the gateway, never a second one
// hidden in the first's body.
func TestSmugglingCases(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.Server.HeaderTimeout = 500 * time.Millisecond // headers fasthttp cannot finish reading end here
	gw := startGateway(t, cfg)
	smuggled := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(plainBody)) + "\r\n\r\n" + plainBody
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(plainBody), plainBody)
	tests := []struct {
		name string
		req  string
	}{
		{"content-length and transfer-encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + smuggled},
		{"two content-lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(plainBody)) + "\r\nContent-Length: 4\r\n\r\n" + plainBody + smuggled},
		{"obs-fold", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-A: b\r\n c\r\nContent-Length: " + fmt.Sprint(len(plainBody)) + "\r\n\r\n" + plainBody},
		{"bare LF", "POST /v1/chat/completions HTTP/1.1\nHost: gw\nContent-Length: " + fmt.Sprint(len(plainBody)) + "\n\n" + plainBody},
		{"transfer-encoding not chunked", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + chunked},
		{"bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + plainBody + "\r\n0\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := be.requests.Load()
			c, resp, err := sendRaw(t, gw.Addr, tc.req, false)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if tc.name == "content-length and transfer-encoding" {
				// The connection is closed after the refusal: nothing
				// behind the first request is read as a second one. (An
				// open one would time out here, not end.)
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := bufio.NewReader(c).ReadByte(); err == nil || isTimeout(err) {
					t.Errorf("the connection stayed open after a CL+TE request (%v)", err)
				}
			}
			time.Sleep(100 * time.Millisecond) // anything smuggled would reach the backend by now
			n := be.requests.Load() - before
			switch {
			case resp.StatusCode == 400 || resp.StatusCode == 408:
				if n != 0 {
					t.Errorf("refused with %d, yet the backend saw %d requests", resp.StatusCode, n)
				}
			case resp.StatusCode == 200:
				if n != 1 {
					t.Errorf("answered 200 and the backend saw %d requests, want exactly the one the gateway read", n)
				}
				if _, body := be.last(); body != plainBody {
					t.Errorf("the backend got body %q, want the one request's", body)
				}
			default:
				t.Errorf("status %d, want 400 or 408 (or 200 with one request upstream)", resp.StatusCode)
			}
			t.Logf("%s: %d, %d request(s) upstream", tc.name, resp.StatusCode, n)
		})
	}
}

// Connections that declare large bodies and send little reserve nothing
// like their declared size; a slowloris connection is cut at
// server.read_timeout; and normal requests are served throughout.
func TestSlowAndGreedyClientsHoldLittle(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	// The headers' own timeout cuts a slowloris, whatever the body's is.
	cfg.Server.HeaderTimeout = time.Second
	cfg.Server.ReadTimeout = 30 * time.Second
	gw := startGateway(t, cfg)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const greedy = 100
	var conns []net.Conn
	for range greedy {
		c, err := net.Dial("tcp", gw.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 8388608\r\n\r\n{\"model\":")
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// A slowloris: one header byte at a time.
	slow, err := net.Dial("tcp", gw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slowDone := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		for _, b := range []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
			if _, err := slow.Write([]byte{b}); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		slowDone <- time.Since(start)
	}()
	waitFor(t, 5*time.Second, "the greedy connections open", func() bool { return gw.conns.Load().open.Load() >= greedy })
	time.Sleep(200 * time.Millisecond) // their handlers wait for the bodies
	for i := range 5 {
		if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody); status != 200 {
			t.Fatalf("request %d beside the greedy clients: %d %s", i, status, body)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d connections declaring 8 MiB each: heap grew %d KiB (%d KiB a connection)", greedy, grown>>10, grown>>10/greedy)
	if grown > 32<<20 {
		t.Errorf("heap grew %d MiB for %d connections that declared 8 MiB bodies, want under 32 MiB (declared: %d MiB)", grown>>20, greedy, greedy*8)
	}
	select {
	case d := <-slowDone:
		if d > 3*time.Second {
			t.Errorf("the slowloris connection lasted %v, want it cut at the 1 s header timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Error("the slowloris connection was never cut")
	}
}

// Everything keyed by client input is bounded: thousands of distinct API
// keys, model names and request ids leave the gateway's memory flat.
func TestDistinctKeysModelsAndIDsLeaveMemoryFlat(t *testing.T) {
	// A backend that keeps nothing (testBackend records every request).
	cfg := testConfig(rawBackend(t, plainResponseBytes()))
	cfg.DefaultPool = "p"
	cfg.Shaping.Global.MaxRequests = 64
	// Its log is discarded: startGateway's keeps every line in memory.
	gw := serveGateway(t, cfg, slog.New(slog.DiscardHandler))
	send := func(from, to int) {
		for i := from; i < to; i++ {
			body := fmt.Sprintf(`{"model":"model-%d-%s","messages":[]}`, i, strings.Repeat("q", 200))
			if status, _, _ := post(t, gw.URL, "/v1/chat/completions", body, "Authorization", fmt.Sprintf("Bearer sk-%d", i), "X-Request-Id", fmt.Sprintf("id-%d", i)); status != 200 {
				t.Fatalf("request %d: %d", i, status)
			}
		}
	}
	heap := func() uint64 {
		gw.syncTelemetry()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	send(0, 500) // the bounded sets fill up
	before := heap()
	send(500, 4500)
	after := heap()
	t.Logf("4,000 more distinct keys, models and ids: heap %d KiB → %d KiB", before>>10, after>>10)
	if after > before+512<<10 {
		t.Errorf("heap grew %d KiB over 4,000 distinct keys, models and ids, want flat (under 512 KiB)", (after-before)>>10)
	}
}

// Bodies that are cut short, too large, or too slow never reach the
// backend, and each gets its own answer.
func TestBodiesCutShortTooLargeOrSlow(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"ok":true}`))
	cfg := testConfig(be.URL)
	cfg.Server.MaxBodyBytes = 64 << 10
	cfg.Server.HeaderTimeout = 5 * time.Second // the body's own timeout is what ends the slow one
	cfg.Server.ReadTimeout = 500 * time.Millisecond
	gw := startGateway(t, cfg)
	big := strings.Repeat("a", 100<<10)
	tests := []struct {
		name      string
		req       string
		halfClose bool
		status    int
	}{
		// An upload over the limit is refused as soon as the handler runs
		// (fasthttp first reads up to 8 KiB of it).
		{"declared over the limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big, false, 413},
		// Refused by the declared length alone: no wait for a body that
		// does not come (before, 408 after read_timeout), and no
		// 100 Continue for one that waits to be asked.
		{"declared over the limit, not sent", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n{", false, 413},
		{"declared over the limit, expecting 100-continue", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n", false, 413},
		{"chunked over the limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), false, 413},
		{"cut short", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\"", true, 400},
		{"too slow", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\"", false, 408},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := be.requests.Load()
			_, resp, err := sendRaw(t, gw.Addr, tc.req, tc.halfClose)
			if err != nil {
				if tc.halfClose {
					return // closed without an answer: a client that is gone gets none
				}
				t.Fatalf("no answer: %v", err)
			}
			if resp.StatusCode != tc.status || !resp.Close {
				t.Errorf("status %d (connection close %v), want %d and the connection closed", resp.StatusCode, resp.Close, tc.status)
			}
			if n := be.requests.Load() - before; n != 0 {
				t.Errorf("the backend saw %d requests", n)
			}
		})
	}
}

// The backend is an origin server, not a proxy: requests reach it in
// origin-form ("POST /v1/chat/completions"), with its own Host, as nginx
// sends them. Some servers route the absolute form ("POST
// http://host/v1/...") as a path and answer 404 (cpp-httplib, under
// llama.cpp's server, does not accept it).
func TestUpstreamRequestTargetIsOriginForm(t *testing.T) {
	be := newTestBackend(t, jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[]}`))
	gw := startGateway(t, testConfig(be.URL+"/base"))
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings?x=1"} {
		if code, _, body := post(t, gw.URL, path, plainBody); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		r, _ := be.last()
		if want := "/base" + path; r.RequestURI != want {
			t.Errorf("request target %q, want %q", r.RequestURI, want)
		}
		if want := strings.TrimPrefix(be.URL, "http://"); r.Host != want {
			t.Errorf("Host %q, want %q", r.Host, want)
		}
	}
}

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

// testBackend is an OpenAI-ish server on 127.0.0.1 whose behaviour each
// test scripts. It counts requests and records what it saw.
type testBackend struct {
	t        testing.TB
	srv      *http.Server
	ln       net.Listener
	URL      string
	requests atomic.Int64
	handler  atomic.Pointer[http.HandlerFunc]

	mu   sync.Mutex
	seen []*http.Request
	body []string
}

func newTestBackend(t testing.TB, h http.HandlerFunc) *testBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &testBackend{t: t, ln: ln, URL: "http://" + ln.Addr().String()}
	b.set(h)
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			(*b.handler.Load())(w, r)
			return
		}
		b.requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.seen = append(b.seen, r)
		b.body = append(b.body, string(body))
		b.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body))) // the handler reads it too
		(*b.handler.Load())(w, r)
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *testBackend) set(h http.HandlerFunc) { b.handler.Store(&h) }

func (b *testBackend) last() (*http.Request, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) == 0 {
		return nil, ""
	}
	return b.seen[len(b.seen)-1], b.body[len(b.body)-1]
}

// chunk is one well-formed chat chunk event.
func chunk(content string) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", content)
}

const finishEvent = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
const doneEvent = "data: [DONE]\n\n"

// sseHandler streams n content events with gap between them, then finish
// and [DONE].
func sseHandler(n int, gap time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		for i := range n {
			if i > 0 && gap > 0 {
				time.Sleep(gap)
			}
			io.WriteString(w, chunk(fmt.Sprintf("t%d", i)))
			f.Flush()
		}
		io.WriteString(w, finishEvent+doneEvent)
		f.Flush()
	}
}

func jsonHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// resetConn closes the connection under a handler with an RST.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// testConfig is a config with one pool of the given backends serving
// model "m" (and the default pool), with short timeouts for tests.
func testConfig(urls ...string) Config {
	var bs []BackendConfig
	for _, u := range urls {
		bs = append(bs, BackendConfig{URL: u})
	}
	cfg := Config{
		Server:   ServerConfig{Listen: "127.0.0.1:0", DrainTimeout: 5 * time.Second},
		Timeouts: Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 30 * time.Second},
		Pools:    map[string]PoolConfig{"p": {Backends: bs}},
		Models:   []ModelConfig{{Name: "m", Pool: "p"}},
	}
	return cfg
}

type testGateway struct {
	*Gateway
	URL      string
	Addr     string
	AdminURL string // /metrics, /admin/stats
	logs     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	sb strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb.String()
}

func startGateway(t testing.TB, cfg Config, opts ...Option) *testGateway {
	t.Helper()
	logs := &syncBuffer{}
	gw := serveGateway(t, cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), opts...)
	gw.logs = logs
	return gw
}

// serveGateway runs a gateway logging to log on loopback ports (the API
// and the admin listener) until the test ends.
func serveGateway(t testing.TB, cfg Config, log *slog.Logger, opts ...Option) *testGateway {
	t.Helper()
	g, err := New(cfg, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.ServeAdmin(aln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	return &testGateway{Gateway: g, URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), AdminURL: "http://" + aln.Addr().String()}
}

const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
const plainBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// adminDo sends a request to the admin listener with key (none when
// empty) and returns status, headers and body.
func adminDo(t testing.TB, gw *testGateway, method, path, key, body string) (int, http.Header, string) {
	t.Helper()
	var hdr []string
	if key != "" {
		hdr = []string{"Authorization", "Bearer " + key}
	}
	return do(t, method, gw.AdminURL+path, body, hdr...)
}

// post sends a request and returns status, headers and body.
func post(t testing.TB, url, path, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	return do(t, "POST", url+path, body, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// do sends one request with the headers given as name, value pairs and
// returns status, headers and body.
func do(t testing.TB, method, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// events splits an SSE body into its data payloads.
func events(body string) []string {
	er := openai.NewEventReader(strings.NewReader(body), nil, 1<<20)
	var out []string
	for {
		ev, err := er.Next()
		if err != nil {
			return out
		}
		out = append(out, string(openai.EventData(ev)))
	}
}

// streamRequest is the raw HTTP/1.1 request of a chat completion with body.
func streamRequest(body string) string {
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// rawStream opens a raw connection and sends a streaming request; the
// caller reads the response from the returned reader.
func rawStream(t testing.TB, addr, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, streamRequest(body))
	return c, bufio.NewReader(c)
}

// readResponse reads one response from br to its end.
func readResponse(t testing.TB, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

// leaveAndExpectBackendClose closes the client's connection and requires
// the backend's handler to report (on sawClose) its request's end within
// a second: promptly, where a gateway that missed the client leaving
// would hold the backend until a timeout (5 s idle in testConfig), with
// room for a loaded machine's scheduling.
func leaveAndExpectBackendClose(t testing.TB, conn net.Conn, sawClose <-chan time.Time) {
	t.Helper()
	left := time.Now()
	conn.Close()
	select {
	case at := <-sawClose:
		if d := at.Sub(left); d > time.Second {
			t.Errorf("backend saw the close %v after the client left, want within a second", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("backend never saw its connection close")
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// withConnTrace records the local address of the connection a request used.
func withConnTrace(ctx context.Context, local *string) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		*local = i.Conn.LocalAddr().String()
	}})
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

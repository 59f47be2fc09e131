package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

func errorOf(t *testing.T, body string) openai.Error {
	t.Helper()
	var e struct{ Error *openai.Error }
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI-style error", body)
	}
	return *e.Error
}

func TestBadInputNeverReachesBackend(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(1, 0))
	cfg := testConfig(be.URL)
	cfg.Server.MaxBodyBytes = 1024
	gw := startGateway(t, cfg)
	tests := []struct {
		name, method, path, body string
		status                   int
		code, msgHas             string
	}{
		{"body over the limit", "POST", "/v1/chat/completions", `{"model":"m","x":"` + strings.Repeat("a", 2000) + `"}`, 413, "request_too_large", "1024"},
		{"malformed JSON says where", "POST", "/v1/chat/completions", `{"model":"m",}`, 400, "invalid_json", "byte 13"},
		{"not an object", "POST", "/v1/completions", `["m"]`, 400, "invalid_json", "object"},
		// llama.cpp's server answers broken JSON with a 500.
		{"malformed JSON on the Responses API", "POST", "/v1/responses", `{"model":"m","input":"hi"`, 400, "invalid_json", "byte"},
		{"truncated JSON on another route", "POST", "/v1/embeddings", `{"model":"m","input":`, 400, "invalid_json", "byte"},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_field", "model"},
		{"model not a string", "POST", "/v1/chat/completions", `{"model":7}`, 400, "invalid_field", "string"},
		{"stream not a boolean", "POST", "/v1/chat/completions", `{"model":"m","stream":"yes"}`, 400, "invalid_field", "stream"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "method_not_allowed", "POST"},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9"}`, 404, "model_not_found", "gpt-9"},
		{"unknown path", "GET", "/nope", ``, 404, "not_found", "/nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tc.status, b)
			}
			e := errorOf(t, string(b))
			if e.Code == nil || *e.Code != tc.code || !strings.Contains(e.Message, tc.msgHas) {
				t.Errorf("error %+v (code %v), want code %s and a message naming %q", e, e.Code, tc.code, tc.msgHas)
			}
		})
	}
	if n := be.requests.Load(); n != 0 {
		t.Errorf("backend got %d bad requests", n)
	}
}

// TestMalformedJSONWithADefaultPool: with a default pool, a route the
// gateway does not know is passed on whatever model it names, but broken
// JSON still gets the gateway's 400 (llama.cpp's server would answer 500);
// a body that is not JSON at all (a multipart upload) is passed on.
func TestMalformedJSONWithADefaultPool(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, jsonHandler(200, `{"object":"list","data":[]}`))
	cfg := testConfig(be.URL)
	cfg.DefaultPool = "p"
	gw := startGateway(t, cfg)
	for _, tc := range []struct {
		name, ctype, body string
		status            int
	}{
		{"JSON by its content type", "application/json", `{"model":"x","input":`, 400},
		{"JSON by its first byte", "text/plain", ` {"model":"x",}`, 400},
		{"a JSON array cut short", "application/json; charset=utf-8", `[1,`, 400},
		{"not JSON at all", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nx\r\n--b--\r\n", 200},
		{"well-formed", "application/json", `{"model":"x","input":"hi"}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := be.requests.Load()
			status, _, body := post(t, gw.URL, "/v1/embeddings", tc.body, "Content-Type", tc.ctype)
			if status != tc.status {
				t.Fatalf("status %d, want %d (%s)", status, tc.status, body)
			}
			reached := be.requests.Load() > before
			if tc.status == 400 {
				if e := errorOf(t, body); e.Code == nil || *e.Code != "invalid_json" || reached {
					t.Errorf("error %+v, backend reached %v", e, reached)
				}
			} else if !reached {
				t.Error("the backend was not reached")
			}
		})
	}
}

// fullListener returns an address whose accept queue is full, so a new
// connect hangs in SYN retransmits: a connect timeout on localhost.
func fullListener(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 { // fill the queue; these never get accepted
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

func TestTimeouts(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	tests := []struct {
		name    string
		url     func(t *testing.T) string
		set     func(*Timeouts)
		stream  bool
		status  int // 0: a 200 stream ending in an error event
		code    string
		atLeast time.Duration
	}{
		{"connect", func(t *testing.T) string { return "http://" + fullListener(t) },
			func(to *Timeouts) { to.Connect = 150 * time.Millisecond }, false, 502, "upstream_connect_error", 150 * time.Millisecond},
		{"first byte", func(t *testing.T) string { return newTestBackend(t, stall).URL },
			func(to *Timeouts) { to.FirstByte = 150 * time.Millisecond }, true, 504, "timeout", 150 * time.Millisecond},
		{"first event after headers", func(t *testing.T) string {
			return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}).URL
		}, func(to *Timeouts) { to.FirstByte = 150 * time.Millisecond }, true, 0, "timeout", 150 * time.Millisecond},
		{"idle between events", func(t *testing.T) string {
			return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, chunk("a"))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}).URL
		}, func(to *Timeouts) { to.Idle = 150 * time.Millisecond }, true, 0, "timeout", 150 * time.Millisecond},
		// A plain answer whose body stops part-way: the idle bound holds
		// whether the rest is counted by Content-Length or in chunks.
		{"idle inside a plain body", func(t *testing.T) string {
			return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "40")
				io.WriteString(w, `{"choices":[`)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}).URL
		}, func(to *Timeouts) { to.Idle = 150 * time.Millisecond }, false, 504, "timeout", 150 * time.Millisecond},
		{"idle inside a chunked plain body", func(t *testing.T) string {
			return newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"choices":[`)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}).URL
		}, func(to *Timeouts) { to.Idle = 150 * time.Millisecond }, false, 504, "timeout", 150 * time.Millisecond},
		{"total", func(t *testing.T) string { return newTestBackend(t, sseHandler(50, 20*time.Millisecond)).URL },
			func(to *Timeouts) { to.Total = 200 * time.Millisecond }, true, 0, "timeout", 200 * time.Millisecond},
		{"total before headers", func(t *testing.T) string { return newTestBackend(t, stall).URL },
			func(to *Timeouts) { to.Total = 150 * time.Millisecond }, false, 504, "timeout", 150 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.url(t))
			tc.set(&cfg.Timeouts)
			cfg.Retries.Max = -1
			gw := startGateway(t, cfg)
			body := plainBody
			if tc.stream {
				body = streamBody
			}
			start := time.Now()
			code, _, resp := post(t, gw.URL, "/v1/chat/completions", body)
			took := time.Since(start)
			if took < tc.atLeast || took > tc.atLeast+2*time.Second {
				t.Errorf("answered after %v, want just after %v", took, tc.atLeast)
			}
			if tc.status != 0 {
				if code != tc.status {
					t.Fatalf("status %d, want %d: %s", code, tc.status, resp)
				}
				if e := errorOf(t, resp); *e.Code != tc.code {
					t.Errorf("code %s, want %s", *e.Code, tc.code)
				}
				return
			}
			evs := events(resp)
			if code != 200 || len(evs) == 0 {
				t.Fatalf("status %d events %v", code, evs)
			}
			if e := errorOf(t, evs[len(evs)-1]); *e.Code != tc.code {
				t.Errorf("last event code %s, want %s", *e.Code, tc.code)
			}
		})
	}
}

// A plain body read with a deadline leaves none on the backend
// connection it goes back to: the next request on that connection, long
// after the deadline, is answered.
func TestPooledConnectionLosesItsDeadline(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var remotes []string
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		io.WriteString(w, `{"ok":`)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // the gateway waits: with a deadline
		io.WriteString(w, `true}`)
	})
	cfg := testConfig(be.URL)
	cfg.Timeouts.Idle = 100 * time.Millisecond
	gw := startGateway(t, cfg)
	for i := range 2 {
		if i == 1 {
			time.Sleep(300 * time.Millisecond) // well past the first read's deadline
		}
		code, _, resp := post(t, gw.URL, "/v1/chat/completions", plainBody)
		if code != 200 || resp != `{"ok":true}` {
			t.Fatalf("request %d: status %d: %s", i, code, resp)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 2 || remotes[0] != remotes[1] {
		t.Fatalf("backend connections %v: the second request did not reuse the first's", remotes)
	}
}

func TestHeadersAuthAndRewrite(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "yes")
		w.Header().Set("Connection", "X-Secret-Hop")
		w.Header().Set("X-Secret-Hop", "no")
		io.WriteString(w, `{"ok":true}`)
	})
	cfg := testConfig(be.URL)
	p := cfg.Pools["p"]
	p.Backends[0].APIKey = "backend-key"
	cfg.Pools["p"] = p
	cfg.Models = []ModelConfig{{Name: "m", Pool: "p", UpstreamModel: "org/real-model-7b"}}
	gw := startGateway(t, cfg)
	code, hdr, _ := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer client-key", "X-Request-Id", "req-123",
		"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Custom", "kept", "Proxy-Authorization", "hop", "Expect", "100-continue")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	r, body := be.last()
	checks := []struct{ what, got, want string }{
		{"upstream Authorization", r.Header.Get("Authorization"), "Bearer backend-key"},
		{"upstream X-Request-Id", r.Header.Get("X-Request-Id"), "req-123"},
		{"upstream traceparent", r.Header.Get("Traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"upstream X-Custom", r.Header.Get("X-Custom"), "kept"},
		{"upstream Proxy-Authorization (hop-by-hop)", r.Header.Get("Proxy-Authorization"), ""},
		{"upstream X-Forwarded-For", r.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"upstream Expect (answered by the gateway)", r.Header.Get("Expect"), ""},
		{"client X-Request-Id", hdr.Get("X-Request-Id"), "req-123"},
		{"client X-Backend", hdr.Get("X-Backend"), "yes"},
		{"client X-Secret-Hop (listed in Connection)", hdr.Get("X-Secret-Hop"), ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if !strings.Contains(body, `"model":"org/real-model-7b"`) {
		t.Errorf("upstream body %s: model not rewritten", body)
	}

	// Without a backend key the client's Authorization is still dropped,
	// unless forwarding is configured.
	for _, forward := range []bool{false, true} {
		cfg := testConfig(be.URL)
		cfg.Server.ForwardAuthorization = forward
		gw := startGateway(t, cfg)
		_, hdr, _ := post(t, gw.URL, "/v1/chat/completions", plainBody, "Authorization", "Bearer client-key")
		r, _ := be.last()
		want := ""
		if forward {
			want = "Bearer client-key"
		}
		if got := r.Header.Get("Authorization"); got != want {
			t.Errorf("forward_authorization=%v: upstream Authorization %q, want %q", forward, got, want)
		}
		if len(hdr.Get("X-Request-Id")) != 32 {
			t.Errorf("generated X-Request-Id %q, want 32 hex digits", hdr.Get("X-Request-Id"))
		}
	}
}

func TestModelsAndPassThrough(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, jsonHandler(200, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}]}`))
	cfg := testConfig(be.URL)
	cfg.Models = append(cfg.Models, ModelConfig{Name: "embedder", Pool: "p"})
	gw := startGateway(t, cfg)
	resp, err := http.Get(gw.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list openai.ModelList
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 2 || list.Data[0].ID != "m" || list.Data[1].ID != "embedder" {
		t.Errorf("/v1/models = %+v, want the two configured models", list)
	}
	code, _, body := post(t, gw.URL, "/v1/embeddings?x=1", `{"model":"embedder","input":"hi"}`)
	r, _ := be.last()
	if code != 200 || !strings.Contains(body, "embedding") || r.URL.Path != "/v1/embeddings" || r.URL.RawQuery != "x=1" {
		t.Errorf("embeddings: status %d body %q upstream %v, want it passed through", code, body, r.URL)
	}
	if n := be.requests.Load(); n != 1 {
		t.Errorf("backend saw %d requests, want only the embeddings one (models answered by the gateway)", n)
	}
}

// A plain answer's headers come with its whole generation: a generation
// longer than timeouts.first_byte but within timeouts.total is served, and
// a request that outlasts total, its own choice, does not eject its
// backend the way a stalling backend would.
func TestTimeoutsMeanWhatTheySay(t *testing.T) {
	t.Parallel()
	slowPlain := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond): // a long generation, then the whole body
		case <-r.Context().Done():
			return
		}
		jsonHandler(200, `{"ok":true}`)(w, r)
	}
	be := newTestBackend(t, slowPlain)
	cfg := testConfig(be.URL)
	cfg.Timeouts.FirstByte = 100 * time.Millisecond
	cfg.Timeouts.Total = 2 * time.Second
	cfg.Retries.Max = -1
	gw := startGateway(t, cfg)
	if status, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody); status != 200 {
		t.Fatalf("a 300 ms plain generation with first_byte 100 ms: %d %s, want 200", status, body)
	}

	// Three requests that outlast total: with ejection after two failures,
	// the backend would be ejected if they counted against it.
	cfg = testConfig(newTestBackend(t, sseHandler(100, 10*time.Millisecond)).URL)
	cfg.Timeouts.Total = 100 * time.Millisecond
	cfg.Retries.Max = -1
	p := cfg.Pools["p"]
	p.Ejection.ConsecutiveFailures = 2
	cfg.Pools["p"] = p
	gw = startGateway(t, cfg)
	for range 3 {
		post(t, gw.URL, "/v1/chat/completions", streamBody)
	}
	if !gw.Ready() {
		t.Error("requests that outlasted timeouts.total ejected their backend")
	}
}

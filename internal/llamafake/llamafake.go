// Package llamafake is a stand-in for llama.cpp's llama-server where its
// connection habits are what a test is about (ENGINES.md; issue 40): on
// real TCP, each answer says "Keep-Alive: timeout=5, max=100", yet the
// server closes the connection after every streamed answer and every
// answer >= 400 without saying so, and closes a connection idle for a
// while (5 s there; short and set by the test here). It serves
// /v1/chat/completions (streamed or not), /v1/models and /health, and
// answers anything else, a wrong method included, 404 as llama.cpp does.
// Clients that keep connections must survive it with no failed request.
package llamafake

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Options shape a server. The zero value is llama.cpp's habits with a
// 300 ms idle close, four content events of 1 ms each.
type Options struct {
	// Idle closes a connection that has waited this long for its next
	// request; default 300ms (llama.cpp: 5s).
	Idle time.Duration
	// KeepAlive is the Keep-Alive header's value; default
	// "timeout=5, max=100", llama.cpp's whatever Idle is.
	KeepAlive string
	// Events is the content events of an answer; default 4.
	Events int
	// Gap is the time before each content event; default 1ms.
	Gap time.Duration
}

// Server is a running fake. Its counters are safe to read at any time.
type Server struct {
	// URL is "http://127.0.0.1:PORT".
	URL string
	o   Options
	ln  net.Listener
	wg  sync.WaitGroup

	// Conns counts the connections accepted; Requests the requests read
	// in full; Closed the connections the server closed behind the
	// client's back (after a stream, a >= 400 or an idle wait).
	Conns, Requests, Closed atomic.Int64

	mu    sync.Mutex
	paths map[string]int // "METHOD /path" → requests
}

// Start runs a fake on a free loopback port until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Idle <= 0 {
		o.Idle = 300 * time.Millisecond
	}
	if o.KeepAlive == "" {
		o.KeepAlive = "timeout=5, max=100"
	}
	if o.Events <= 0 {
		o.Events = 4
	}
	if o.Gap <= 0 {
		o.Gap = time.Millisecond
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), o: o, ln: ln, paths: map[string]int{}}
	var conns sync.Map
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Conns.Add(1)
			conns.Store(c, nil)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conns.Delete(c)
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		s.wg.Wait()
	})
	return s
}

// Count returns the requests seen for method and path ("GET",
// "/v1/models").
func (s *Server) Count(method, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paths[method+" "+path]
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	var req fasthttp.Request
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.o.Idle))
		req.Reset()
		if err := req.Read(br); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTimeout(err) {
				s.Closed.Add(1) // idle too long
			}
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		s.Requests.Add(1)
		method, path := string(req.Header.Method()), string(req.URI().Path())
		s.mu.Lock()
		s.paths[method+" "+path]++
		s.mu.Unlock()
		keep := s.answer(bw, method, path, req.Body())
		if bw.Flush() != nil {
			return
		}
		if !keep {
			s.Closed.Add(1)
			return
		}
	}
}

func isTimeout(err error) bool {
	return err == fasthttp.ErrTimeout || strings.Contains(err.Error(), "timeout")
}

// answer writes the response and reports whether the connection is kept.
func (s *Server) answer(w *bufio.Writer, method, path string, body []byte) bool {
	switch {
	case method == "GET" && path == "/health":
		return s.plain(w, 200, `{"status":"ok"}`)
	case method == "GET" && path == "/v1/models":
		return s.plain(w, 200, `{"object":"list","data":[{"id":"fake.gguf","object":"model","owned_by":"llamacpp"}]}`)
	case method == "POST" && path == "/v1/chat/completions":
		var r struct {
			Stream bool `json:"stream"`
		}
		if json.Unmarshal(body, &r) != nil {
			return s.plain(w, 500, `{"error":{"code":500,"message":"bad json","type":"server_error"}}`)
		}
		if r.Stream {
			s.stream(w)
			return false // llama.cpp's server: closed after every streamed answer
		}
		for range s.o.Events {
			time.Sleep(s.o.Gap)
		}
		words := strings.TrimSpace(strings.Repeat("tok ", s.o.Events))
		return s.plain(w, 200, fmt.Sprintf(`{"id":"c","object":"chat.completion","model":"fake.gguf","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`, words, s.o.Events, 5+s.o.Events))
	}
	return s.plain(w, 404, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`)
}

// plain writes a whole answer; one >= 400 closes the connection, unsaid.
func (s *Server) plain(w *bufio.Writer, status int, body string) bool {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\nKeep-Alive: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, fasthttp.StatusMessage(status), s.o.KeepAlive, len(body), body)
	return status < 400
}

// stream writes a chunked event stream, each event flushed after Gap.
func (s *Server) stream(w *bufio.Writer) {
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: %s\r\nTransfer-Encoding: chunked\r\n\r\n", s.o.KeepAlive)
	chunk := func(ev string) {
		fmt.Fprintf(w, "%x\r\n%s\r\n", len(ev), ev)
		_ = w.Flush()
	}
	for i := range s.o.Events {
		time.Sleep(s.o.Gap)
		chunk(fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","model":"fake.gguf","choices":[{"index":0,"delta":{"content":"tok%d "}}]}`+"\n\n", i))
	}
	chunk(fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","model":"fake.gguf","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", s.o.Events, 5+s.o.Events))
	chunk("data: [DONE]\n\n")
	w.WriteString("0\r\n\r\n")
}

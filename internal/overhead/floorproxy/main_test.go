package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The floor must be a working proxy, or its figures mean nothing: a plain
// answer and a stream come back whole, and the connection serves again.
func TestFloorProxyRelays(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%q}`, body)
	}))
	defer backend.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(strings.TrimPrefix(backend.URL, "http://"))
	go p.srv.Serve(ln)
	defer p.srv.Shutdown()

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	post := func(body string) (string, string) {
		t.Helper()
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, err %v", resp.StatusCode, err)
		}
		return resp.Header.Get("Content-Type"), string(b)
	}
	for range 2 { // the second time on the connection the stream handed back
		if ct, b := post(`{"stream":true}`); ct != "text/event-stream" || b != "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n" {
			t.Fatalf("stream: %q %q", ct, b)
		}
		if ct, b := post(`{"x":1}`); ct != "application/json" || b != `{"echo":"{\"x\":1}"}` {
			t.Fatalf("plain: %q %q", ct, b)
		}
	}
}

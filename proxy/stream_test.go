package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

// The backend sends one event, then waits until the client has seen it
// before sending the next: a gateway that buffers deadlocks this test.
func TestEventsArriveInOrderUnbuffered(t *testing.T) {
	t.Parallel()
	seen := make(chan int)
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range 5 {
			io.WriteString(w, chunk(string(rune('a'+i))))
			f.Flush()
			select {
			case got := <-seen:
				if got != i {
					t.Errorf("client saw event %d when %d was sent", got, i)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("event %d not seen by the client within 2s: buffered", i)
				return
			}
		}
		io.WriteString(w, finishEvent+doneEvent)
	})
	gw := startGateway(t, testConfig(be.URL))
	req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	er := openai.NewEventReader(resp.Body, nil, 1<<20)
	for i := range 5 {
		ev, err := er.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var c openai.Chunk
		if err := json.Unmarshal(openai.EventData(ev), &c); err != nil || c.Choices[0].Delta.Content != string(rune('a'+i)) {
			t.Fatalf("event %d = %q, want content %q", i, ev, string(rune('a'+i)))
		}
		seen <- i
	}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(rest), doneEvent) {
		t.Errorf("stream tail %q, want it to end with [DONE]", rest)
	}
}

func TestStreamBytesPassUnchanged(t *testing.T) {
	t.Parallel()
	// CRLF line endings, a comment, an event name and an id: all relayed
	// byte for byte.
	raw := ": ping\r\n\r\nevent: message\r\nid: 7\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\n" + finishEvent + doneEvent
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, raw)
	})
	gw := startGateway(t, testConfig(be.URL))
	code, hdr, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
	if code != 200 || body != raw {
		t.Errorf("status %d body %q, want 200 and %q", code, body, raw)
	}
	if ct := hdr.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q not passed through", ct)
	}
}

func TestStreamAsksForIdentityEncoding(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(1, 0))
	gw := startGateway(t, testConfig(be.URL))
	post(t, gw.URL, "/v1/chat/completions", streamBody, "Accept-Encoding", "gzip, br")
	if r, _ := be.last(); r.Header.Get("Accept-Encoding") != "" {
		t.Errorf("stream sent upstream with Accept-Encoding %q: the relay needs plain bytes", r.Header.Get("Accept-Encoding"))
	}
	post(t, gw.URL, "/v1/chat/completions", plainBody, "Accept-Encoding", "gzip")
	if r, _ := be.last(); r.Header.Get("Accept-Encoding") != "gzip" {
		t.Errorf("plain request lost its Accept-Encoding (%q)", r.Header.Get("Accept-Encoding"))
	}
}

func TestStreamEndingEarlyIsAFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		code    string
	}{
		{"connection reset", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chunk("a"))
			w.(http.Flusher).Flush()
			resetConn(w)
		}, "upstream_stream_ended"},
		{"clean end without finish_reason or [DONE]", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chunk("a")+chunk("b"))
		}, "upstream_stream_ended"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be := newTestBackend(t, tc.handler)
			gw := startGateway(t, testConfig(be.URL))
			code, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
			evs := events(body)
			if code != 200 || len(evs) == 0 {
				t.Fatalf("status %d events %v", code, evs)
			}
			var last struct{ Error *openai.Error }
			if err := json.Unmarshal([]byte(evs[len(evs)-1]), &last); err != nil || last.Error == nil || *last.Error.Code != tc.code {
				t.Fatalf("last event %q, want an error with code %s", evs[len(evs)-1], tc.code)
			}
			for _, e := range evs {
				if e == "[DONE]" {
					t.Error("a failed stream carried [DONE]")
				}
			}
			waitFor(t, time.Second, "the failure in the log", func() bool {
				return strings.Contains(gw.logs.String(), "outcome=upstream_error")
			})
			if got := counterValue(t, gw.Gateway, "infergate_requests_total", "outcome", "upstream_error"); got != 1 {
				t.Errorf("infergate_requests_total{outcome=upstream_error} = %v, want 1", got)
			}
		})
	}
}

func counterValue(t testing.TB, g *Gateway, name, label, value string) float64 {
	t.Helper()
	g.syncTelemetry() // what ended before now is recorded
	mfs, err := g.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.Counter.GetValue()
				}
			}
		}
	}
	return sum
}

func TestClientGoneCancelsUpstream(t *testing.T) {
	t.Parallel()
	for _, phase := range []string{"waiting for the first byte", "during the stream"} {
		t.Run(phase, func(t *testing.T) {
			backendSawClose := make(chan time.Time, 1)
			be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
				if phase == "during the stream" {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, chunk("a"))
					w.(http.Flusher).Flush()
				}
				// A long prefill: nothing more until the client leaves.
				<-r.Context().Done()
				backendSawClose <- time.Now()
			})
			gw := startGateway(t, testConfig(be.URL))
			conn, br := rawStream(t, gw.Addr, streamBody)
			if phase == "during the stream" {
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					if strings.HasPrefix(line, "data:") {
						break
					}
				}
			} else {
				waitFor(t, 2*time.Second, "the backend to get the request", func() bool { return be.requests.Load() == 1 })
			}
			leaveAndExpectBackendClose(t, conn, backendSawClose)
			waitFor(t, time.Second, "outstanding back to 0", func() bool {
				return gw.state.Load().pools["p"].backends[0].Outstanding() == 0
			})
			waitFor(t, time.Second, "client_gone in the log", func() bool {
				return strings.Contains(gw.logs.String(), "outcome=client_gone")
			})
		})
	}
}

func TestDrainFinishesInFlightStream(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(10, 30*time.Millisecond))
	gw := startGateway(t, testConfig(be.URL))
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	waitFor(t, 2*time.Second, "the stream to start", func() bool { return be.requests.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gw.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	r := <-res
	if r.err != nil || !strings.HasSuffix(r.body, doneEvent) || len(events(r.body)) != 12 {
		t.Errorf("in-flight stream after drain: err %v, %d events, want all 12 ending in [DONE]", r.err, len(events(r.body)))
	}
}

func TestDrainTimeoutCancelsStream(t *testing.T) {
	be := newTestBackend(t, sseHandler(100, 50*time.Millisecond)) // 5s
	gw := startGateway(t, testConfig(be.URL))
	res := make(chan string, 1)
	go func() {
		_, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
		res <- body
	}()
	waitFor(t, 2*time.Second, "the stream to start", func() bool { return be.requests.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := gw.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v with a 200ms drain timeout", d)
	}
	body := <-res
	evs := events(body)
	if len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "shutting_down") {
		t.Errorf("cut stream ends with %q, want a shutting_down error event", evs[len(evs)-1:])
	}
}

func TestKeepAliveCommentsWhileWaiting(t *testing.T) {
	be := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(250 * time.Millisecond) // queueing or prefill
		sseHandler(2, 0)(w, r)
	})
	cfg := testConfig(be.URL)
	cfg.KeepAlive = KeepAlive{Delay: 50 * time.Millisecond, Interval: 60 * time.Millisecond}
	gw := startGateway(t, cfg)
	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	start := time.Now()
	first, _ := br.ReadString('\n')
	if first != ": keep-alive\n" || time.Since(start) > 200*time.Millisecond {
		t.Errorf("first line %q after %v, want a keep-alive comment before the backend answers", first, time.Since(start))
	}
	rest, _ := io.ReadAll(br)
	if n := strings.Count(string(rest), ": keep-alive"); n < 2 {
		t.Errorf("%d more keep-alive comments over a 250ms wait at 60ms, want at least 2", n)
	}
	if !strings.HasSuffix(string(rest), doneEvent) {
		t.Errorf("stream after keep-alives %q, want the events and [DONE]", rest)
	}
	// A plain request gets no comments.
	code, _, body := post(t, gw.URL, "/v1/chat/completions", plainBody)
	if strings.Contains(body, "keep-alive") {
		t.Errorf("non-streaming answer (status %d) carries keep-alive comments: %q", code, body)
	}
}

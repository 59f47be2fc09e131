package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/llamafake"
	"github.com/infergate/infergate/internal/tokens"
)

// The connection habits of llama.cpp's server (internal/llamafake: it
// closes after every streamed answer and every answer >= 400 although it
// says keep-alive, and closes idle connections) cost no request through
// the gateway (issue 40: 10-28% failed with "read headers: EOF").

// llamaGateway is a gateway passing everything (GET /v1/models too) to
// one fake llama.cpp server.
func llamaGateway(t *testing.T) (*testGateway, *llamafake.Server) {
	fake := llamafake.Start(t, llamafake.Options{Idle: 150 * time.Millisecond})
	cfg := testConfig(fake.URL)
	cfg.Models, cfg.DefaultPool = nil, "p"
	return startGateway(t, cfg), fake
}

// llamaRequest is the i-th request of a mixed run: streamed and plain
// chat, GET /v1/models, and now and then a route llama.cpp answers 404.
func llamaRequest(i int) (method, path, body string, want int) {
	switch i % 7 {
	case 0, 3, 5:
		return "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, 200
	case 1, 4:
		return "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200
	case 2:
		return "GET", "/v1/models", "", 200
	}
	return "POST", "/v1/embeddings", `{"model":"m","input":"hi"}`, 404
}

// sendLlama sends the i-th request on client and says what was wrong
// with its answer, "" when nothing.
func sendLlama(client *http.Client, url string, i int) string {
	method, path, body, want := llamaRequest(i)
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Sprintf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Sprintf("%s %s: body: %v", method, path, err)
	case resp.StatusCode != want:
		return fmt.Sprintf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	case strings.Contains(body, `"stream":true`) && (!strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Contains(string(b), `"error"`)):
		return fmt.Sprintf("%s %s: the stream did not end well: %q", method, path, b)
	}
	return ""
}

func TestLlamaHabitsCostNoRequest(t *testing.T) {
	t.Parallel()
	gw, fake := llamaGateway(t)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	var failed []string
	n := 0
	// One at a time, with two pauses past the server's idle close.
	for i := range 42 {
		if i == 14 || i == 28 {
			time.Sleep(250 * time.Millisecond)
		}
		if e := sendLlama(client, gw.URL, i); e != "" {
			failed = append(failed, e)
		}
		n++
	}
	// Eight at a time.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 21 {
				e := sendLlama(client, gw.URL, w+i)
				mu.Lock()
				n++
				if e != "" {
					failed = append(failed, e)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed; the first: %s", len(failed), n, failed[0])
	}
	// The test is only worth its name if the server did close
	// connections under the gateway: after each stream, each 404 and
	// each pause.
	if c := fake.Closed.Load(); c < 40 {
		t.Errorf("the fake closed %d connections, fewer than the test means it to", c)
	}
	if got := fake.Count("GET", "/v1/models"); got != 42/7+8*3 {
		t.Errorf("the server saw %d GET /v1/models, want %d", got, 42/7+8*3)
	}
}

// bench, straight at the server and through the gateway: a sweep of
// streamed requests at 1, 4 and 8 users, plain ones, and sessions whose
// think time is past the server's idle close: not one request fails.
func TestLlamaHabitsCostBenchNoRequest(t *testing.T) {
	t.Parallel()
	gw, fake := llamaGateway(t)
	tok, err := tokens.Load("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		url  string
	}{{"direct", fake.URL}, {"gateway", gw.URL}} {
		for _, load := range []struct {
			name   string
			stream bool
			sweep  []float64
			spec   bench.LoadSpec
			turns  int
		}{
			{"sweep", true, []float64{1, 4, 8}, bench.LoadSpec{Mode: "closed", Requests: 24}, 0},
			{"plain", false, nil, bench.LoadSpec{Mode: "closed", Concurrency: 4, Requests: 24}, 0},
			{"sessions", true, nil, bench.LoadSpec{Mode: "sessions", Concurrency: 2, ThinkTime: 250 * time.Millisecond}, 3},
		} {
			t.Run(tc.name+"/"+load.name, func(t *testing.T) {
				cfg := bench.Config{URL: tc.url, Tokenizer: tok, Sweep: load.sweep, Load: load.spec, NoSweepStop: true,
					Workload: bench.WorkloadSpec{Endpoint: "chat", Model: "m", Stream: load.stream, InputTokens: "16", OutputTokens: "4", Seed: 1, Turns: load.turns}}
				rec, err := bench.Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range rec.Stages {
					if st.Failed != 0 || st.OK == 0 {
						t.Errorf("stage %d: %d ok, %d failed: %v", i, st.OK, st.Failed, st.Errors)
					}
				}
			})
		}
	}
}

// The mirror's copies to a candidate with llama.cpp's habits are none of
// them lost, and GET /v1/models is not copied at all (it was re-sent as
// a POST, which llama.cpp answers 404, and counted against the
// candidate).
func TestLlamaHabitsLoseNoCopy(t *testing.T) {
	t.Parallel()
	primary := llamafake.Start(t, llamafake.Options{Idle: 150 * time.Millisecond})
	candidate := llamafake.Start(t, llamafake.Options{Idle: 150 * time.Millisecond})
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models, cfg.DefaultPool = nil, "p"
	cfg.Mirror.Rules[0].MaxInFlight = 64
	gw := startGateway(t, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	var completions atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 14 {
				if i == 7 {
					time.Sleep(250 * time.Millisecond) // past the idle close
				}
				if e := sendLlama(client, gw.URL, w+i); e != "" {
					t.Error(e)
				}
				if _, path, _, _ := llamaRequest(w + i); path == "/v1/chat/completions" {
					completions.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	want := int(completions.Load())
	s := pairStats(t, gw, want)
	time.Sleep(100 * time.Millisecond) // no pair beyond those
	s = pairStats(t, gw, want)
	if len(s.Pairs) != want {
		t.Errorf("%d pairs for %d completions", len(s.Pairs), want)
	}
	lost := 0
	for _, p := range s.Pairs {
		if !p.Candidate.OK() {
			lost++
			if lost == 1 {
				t.Errorf("a copy failed: %+v", p.Candidate)
			}
		}
	}
	if lost > 0 || len(s.Dropped) > 0 || s.Lost > 0 {
		t.Errorf("%d copies failed, dropped %v, %d pairs lost", lost, s.Dropped, s.Lost)
	}
	if g, p := candidate.Count("GET", "/v1/models"), candidate.Count("POST", "/v1/models"); g+p != 0 {
		t.Errorf("the candidate got %d GET and %d POST /v1/models: only completions are copied", g, p)
	}
	if candidate.Count("POST", "/v1/embeddings") != 0 {
		t.Error("an embedding request was copied")
	}
}

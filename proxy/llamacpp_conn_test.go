package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/internal/tokens"
)

// Through the gateway to llama.cpp's own server with four slots (issue
// 40's "done when", at a small scale so CI stays fast): a sweep at 1, 4
// and 8 users of streamed requests, and sessions whose think time (6 s)
// is past the server's 5 s idle close, straight and through the gateway,
// end with no failed request; GET /v1/models through the gateway, right
// after streams closed their connections, is the server's list. (Before:
// 71 of 378 failed in the sweep, 4 of 12 in the sessions, and the list
// was a 502.) It runs beside other tests: what it judges is failed
// requests, and the think time stays past the server's idle close however
// slow the machine.
func TestLlamaCppConnections(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 4, Predict: 64})
	cfg := testConfig(srv.URL)
	cfg.Models, cfg.DefaultPool = nil, "p"
	// Eight users on four slots of a shared CPU wait for a slot: the
	// test is of connections, not of time.
	cfg.Timeouts.FirstByte, cfg.Timeouts.Idle = time.Minute, time.Minute
	gw := startGateway(t, cfg)
	tok, err := tokens.Load("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, url string, sweep []float64, load bench.LoadSpec, turns int) {
		c := bench.Config{URL: url, Tokenizer: tok, Sweep: sweep, Load: load, NoSweepStop: true,
			Workload: bench.WorkloadSpec{Endpoint: "chat", Model: "m", Stream: true, InputTokens: "32", OutputTokens: "8", Seed: 1, Turns: turns}}
		rec, err := bench.Run(context.Background(), c)
		if err != nil {
			t.Error(err) // run may be on a goroutine of its own
			return
		}
		for i, st := range rec.Stages {
			if st.Failed != 0 || st.OK == 0 {
				t.Errorf("stage %d: %d ok, %d failed: %v %v", i, st.OK, st.Failed, st.Errors, st.ErrorSamples)
			}
		}
	}

	t.Run("models after streams", func(t *testing.T) {
		// Four streams at once leave four connections the server closed
		// in the gateway's pool.
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, body := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
				if status != 200 {
					t.Errorf("stream: %d %s", status, body)
				}
			}()
		}
		wg.Wait()
		status, _, body := do(t, "GET", gw.URL+"/v1/models", "")
		if status != http.StatusOK || !strings.Contains(body, `"object":"list"`) {
			t.Errorf("GET /v1/models through the gateway: %d %s", status, body)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		run(t, gw.URL, []float64{1, 4, 8}, bench.LoadSpec{Mode: "closed", Duration: 2 * time.Second}, 0)
	})
	t.Run("sessions", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, url := range []string{srv.URL, gw.URL} { // two at once: one think time for both
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(t, url, nil, bench.LoadSpec{Mode: "sessions", Concurrency: 2, ThinkTime: 6 * time.Second}, 2)
			}()
		}
		wg.Wait()
	})
}

// The mirror from the f16 build to the Q4_0 one, both llama.cpp's
// server: no copy is lost to a connection the candidate closed, and GET
// /v1/models goes to the primary alone (issue 40: 26% of the copies were
// lost, and the list was copied as a POST that drew a 404).
func TestLlamaCppMirrorLosesNoCopy(t *testing.T) {
	llamatest.Require(t) // here: a skip in the goroutines below would not end the test
	var primary, candidate *llamatest.Server
	var wg sync.WaitGroup
	for i, v := range []string{"f16", "q4_0"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := llamatest.Start(t, llamatest.Options{Variant: v, Parallel: 2, Predict: 64})
			if i == 0 {
				primary = s
			} else {
				candidate = s
			}
		}()
	}
	wg.Wait()
	if primary == nil || candidate == nil {
		t.FailNow()
	}
	cfg := mirrorConfig(primary.URL, candidate.URL)
	cfg.Models, cfg.DefaultPool = nil, "p"
	cfg.Mirror.Rules[0].MaxInFlight = 16
	cfg.Timeouts.FirstByte, cfg.Timeouts.Idle = time.Minute, time.Minute
	gw := startGateway(t, cfg)
	completions := 0
	var mu sync.Mutex
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				var status int
				var body string
				switch (w + i) % 3 {
				case 0:
					status, _, body = do(t, "GET", gw.URL+"/v1/models", "")
				default:
					stream := (w+i)%3 == 1
					status, _, body = post(t, gw.URL, "/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hi %d"}]}`, stream, i))
					mu.Lock()
					completions++
					mu.Unlock()
				}
				if status != 200 {
					t.Errorf("status %d: %s", status, body)
				}
			}
		}()
	}
	wg.Wait()
	s := pairStats(t, gw, completions)
	if len(s.Pairs) != completions {
		t.Errorf("%d pairs for %d completions", len(s.Pairs), completions)
	}
	for _, p := range s.Pairs {
		if !p.Candidate.OK() || !p.Primary.OK() {
			t.Errorf("a pair failed: primary %+v, candidate %+v", p.Primary, p.Candidate)
		}
	}
	if len(s.Dropped) > 0 || s.Lost > 0 {
		t.Errorf("dropped %v, %d pairs lost", s.Dropped, s.Lost)
	}
}

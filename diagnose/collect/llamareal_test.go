package collect_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/internal/promtext"
)

// diagnoseLlama loads a real llama-server of slots slots with clients
// clients, each sending short chat requests one after another; once the
// server's own metrics show them all (busy slots plus deferred requests)
// it samples its metrics for two seconds and diagnoses the window.
func diagnoseLlama(t *testing.T, slots, clients int) diagnose.Report {
	t.Helper()
	s := llamatest.Start(t, llamatest.Options{Parallel: slots})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// llama.cpp answers /metrics from its task loop, between decodes: on
	// a busy machine a scrape can take seconds.
	client := &http.Client{Timeout: 30 * time.Second}
	// The clients close each connection after its answer: on kept-alive
	// ones they held llama-server's HTTP threads, and a scrape of /metrics
	// waited 28 s for one (the test took 29-55 s; 3.5 s so).
	loadClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"infergate-tiny","max_tokens":16,"messages":[{"role":"user","content":"client %d: tell me about the sea"}]}`, c)
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := loadClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	for {
		r := scrapeLlama(t, ctx, client, s.URL)
		if r.Running+r.Waiting >= float64(clients) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the server never showed %d clients: running %v, waiting %v", clients, r.Running, r.Waiting)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w, err := collect.Sample(ctx, collect.Config{Backends: []string{s.URL}, Interval: 250 * time.Millisecond, Window: 2 * time.Second, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Errors) > 0 {
		t.Errorf("scrape errors: %q", w.Errors)
	}
	return diagnose.Diagnose(diagnose.Input{Backends: w.Backends})
}

func scrapeLlama(t *testing.T, ctx context.Context, client *http.Client, base string) engine.Reading {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return engine.NewReading(time.Now(), engine.Unknown)
	}
	defer resp.Body.Close()
	sc, err := promtext.Parse(resp.Body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return engine.Read(sc)
}

// TestDiagnoseRealLlamaCpp: on llama.cpp's own server, one slot under 8
// clients is named a slot limit with llama-server's -np in the proposal;
// four slots under one client is "none". No output prints NaN. What is
// judged is what the server's own metrics count (busy slots, deferred
// requests), not a time: it runs beside other tests, each case on its
// own server.
func TestDiagnoseRealLlamaCpp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		slots, clients int
		want           string
	}{
		{"np 1, 8 clients", 1, 8, diagnose.Batching},
		{"np 4, 1 client", 4, 1, diagnose.None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := diagnoseLlama(t, tc.slots, tc.clients)
			text := reportText(t, &rep)
			if rep.Bottleneck != tc.want {
				t.Fatalf("bottleneck %s (%s), want %s\n%s", rep.Bottleneck, rep.Confidence, tc.want, text)
			}
			if b := rep.Backends[0]; b.Server != engine.LlamaCpp || b.Slots != diagnose.Num(tc.slots) {
				t.Errorf("server %s with %v slots, want llamacpp with %d", b.Server, b.Slots, tc.slots)
			}
			if tc.want == diagnose.Batching && !strings.Contains(rep.Knobs[0].Action, "-np") {
				t.Errorf("the proposal does not name -np:\n%s", text)
			}
			if !strings.Contains(text, "llama.cpp reports no KV-cache usage") {
				t.Errorf("the report does not say it saw no KV-cache usage:\n%s", text)
			}
		})
	}
}

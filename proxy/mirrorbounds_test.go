package proxy

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/sim/simtest"
)

// TestMirrorBoundsAHostileCandidate: a candidate that streams forever,
// or sends one line larger than any event, costs the gateway a bounded
// time and memory per copy: the copy ends by timeouts.total (or at the
// line bound) with an error in its pair, the rule's slot comes back, and
// the primary's clients never wait for it.
func TestMirrorBoundsAHostileCandidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"streams forever", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x%d \"}}]}\n\n", i); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}, "deadline"},
		{"one huge line", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"")
			chunk := strings.Repeat("y", 64<<10)
			for range 256 { // 16 MiB, no newline
				if _, err := fmt.Fprint(w, chunk); err != nil {
					return
				}
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := simtest.Start(t, simtest.Fixed(time.Millisecond, time.Millisecond))
			cand := newTestBackend(t, tc.handler)
			cfg := mirrorConfig(primary.URL, cand.URL)
			cfg.Models[0].UpstreamModel = "sim-model"
			cfg.Timeouts.Total = 2 * time.Second
			gw := startGateway(t, cfg)
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			for range 3 {
				if st, _, body := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`); st != 200 || !strings.Contains(body, "[DONE]") {
					t.Fatalf("the primary: %d %s", st, body)
				}
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("three primaries took %v beside the hostile candidate", d)
			}
			p := pairStats(t, gw, 3).Pairs
			for _, pr := range p {
				if pr.Candidate.Error == "" || !strings.Contains(pr.Candidate.Error, tc.want) {
					t.Errorf("candidate arm %+v, want an error (%q)", pr.Candidate.Error, tc.want)
				}
			}
			waitFor(t, 5*time.Second, "the rule's slots back", func() bool { return gw.MirrorsInFlight() == 0 })
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
				t.Errorf("the heap grew %d MiB over three hostile copies", grown>>20)
			}
		})
	}
}

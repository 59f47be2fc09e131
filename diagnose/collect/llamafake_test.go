package collect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
)

// fakeLlama answers as llama.cpp's server does (tools/server: /metrics
// with --metrics, /props, /slots), with slots busy and deferred requests
// as given; each scrape advances its counters as a server decoding with
// busy slots would. props or slots false answers that endpoint 404.
func fakeLlama(t *testing.T, slots, busy, deferred int, props, slotsOn bool) *httptest.Server {
	t.Helper()
	var scrapes atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		n := float64(scrapes.Add(1))
		decodes := 40 * n
		var b strings.Builder
		item := func(typ, name, help string, v float64) {
			fmt.Fprintf(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %g\n", name, help, name, typ, name, v)
		}
		item("counter", "prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", 260*n)
		item("counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", 0)
		item("counter", "prompt_seconds_total", "Total time spent processing prompts", 0.2*n)
		item("counter", "tokens_predicted_total", "Number of generation tokens processed", 40*float64(busy)*n)
		item("counter", "tokens_predicted_seconds_total", "Total time spent generating tokens", float64(busy)*n)
		item("counter", "n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding", decodes)
		item("counter", "n_tokens_max", "Largest observed sequence length (prompt + generation)", 390)
		item("gauge", "requests_processing", "Number of requests processing", float64(busy))
		item("gauge", "requests_deferred", "Number of requests deferred", float64(deferred))
		item("gauge", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", float64(busy))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
	})
	mux.HandleFunc("GET /props", func(w http.ResponseWriter, r *http.Request) {
		if !props {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"total_slots": slots, "default_generation_settings": map[string]any{"n_ctx": 2048},
			"model_alias": "tiny", "endpoint_slots": slotsOn, "endpoint_metrics": true})
	})
	mux.HandleFunc("GET /slots", func(w http.ResponseWriter, r *http.Request) {
		if !slotsOn {
			w.WriteHeader(http.StatusNotImplemented)
			_, _ = w.Write([]byte(`{"error":{"code":501,"message":"This server does not support slots endpoint. Start it with ` + "`--slots`" + `","type":"not_supported_error"}}`))
			return
		}
		out := make([]map[string]any, slots)
		for i := range out {
			out[i] = map[string]any{"id": i, "n_ctx": 2048, "speculative": false, "is_processing": i < busy}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func sampleLlama(t *testing.T, srv *httptest.Server) (collect.Windows, diagnose.Report) {
	t.Helper()
	w, err := collect.Sample(context.Background(), collect.Config{Backends: []string{srv.URL}, Interval: 20 * time.Millisecond, Window: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return w, diagnose.Diagnose(diagnose.Input{Backends: w.Backends})
}

// TestSampleLlamaCppSlots: a llama.cpp server with every slot busy and
// requests deferred is slot-limited, its proposal llama-server's own
// knobs; with free slots and nothing deferred, nothing is wrong. The
// slot count comes from /props, or /slots when /props does not answer.
func TestSampleLlamaCppSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		slots, busy, deferred int
		props, slotsOn        bool
		want                  string
	}{
		{"np 1 under 8 clients", 1, 1, 7, true, true, diagnose.Batching},
		{"np 1 under 8 clients, slots from /slots", 1, 1, 7, false, true, diagnose.Batching},
		{"np 4 under 1 client", 4, 1, 0, true, true, diagnose.None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rep := sampleLlama(t, fakeLlama(t, tc.slots, tc.busy, tc.deferred, tc.props, tc.slotsOn))
			text := reportText(t, &rep)
			if rep.Bottleneck != tc.want {
				t.Fatalf("bottleneck %s, want %s\n%s", rep.Bottleneck, tc.want, text)
			}
			b := rep.Backends[0]
			if b.Slots != diagnose.Num(tc.slots) || b.MaxRunningFrom != "slots" || b.SlotContext != 2048 {
				t.Errorf("slots %v (bound from %q), context %v; want %d of 2048 tokens", b.Slots, b.MaxRunningFrom, b.SlotContext, tc.slots)
			}
			if got := float64(b.BusyPerDecode); got != float64(tc.busy) {
				t.Errorf("busy slots per decode %v, want %d", got, tc.busy)
			}
			if tc.want == diagnose.Batching {
				k := rep.Knobs[0]
				if !strings.Contains(k.Action, "-np") || !strings.Contains(k.Action, "-c ") || strings.Contains(text, "--max-concurrency") {
					t.Errorf("the proposal is not llama-server's slots and context:\n%s", text)
				}
				if !strings.Contains(text, "requests_deferred") {
					t.Errorf("the deferred requests are not named as the server's queue:\n%s", text)
				}
			}
			if !strings.Contains(text, "llama.cpp reports no KV-cache usage") {
				t.Errorf("the report does not say what it could not see:\n%s", text)
			}
		})
	}
}

// TestSampleLlamaCppNoSlotCount: a server whose /props and /slots both
// fail is still read; the failure is reported and the report says the
// bound is unknown, with no NaN anywhere.
func TestSampleLlamaCppNoSlotCount(t *testing.T) {
	t.Parallel()
	w, rep := sampleLlama(t, fakeLlama(t, 1, 1, 7, false, false))
	if len(w.Errors) == 0 || !strings.Contains(strings.Join(w.Errors, "\n"), "slot count") {
		t.Errorf("no error for the missing slot count: %q", w.Errors)
	}
	text := reportText(t, &rep)
	if !strings.Contains(text, "slot count (GET /props total_slots, or GET /slots) could not be read") {
		t.Errorf("the report does not say the slot count is unknown:\n%s", text)
	}
	if rep.Confidence != "low" {
		t.Errorf("confidence %s without a batch bound or hardware figures, want low", rep.Confidence)
	}
}

// reportText is the report as text, JSON and HTML together, checked for
// NaN (which no output may print).
func reportText(t *testing.T, rep *diagnose.Report) string {
	t.Helper()
	var b strings.Builder
	rep.Write(&b)
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var h strings.Builder
	if err := rep.WriteHTML(&h, "t"); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": b.String(), "JSON": string(j), "HTML": h.String()} {
		if strings.Contains(out, "NaN") {
			t.Errorf("%s output prints NaN:\n%s", name, out)
		}
	}
	t.Log(b.String())
	return b.String()
}

package collect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
	"github.com/infergate/infergate/internal/llamatest"
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
				if resp, err := client.Do(req); err == nil {
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

func scrapeLlama(t *testing.T, ctx context.Context, client *http.Client, base string) diagnose.Reading {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return diagnose.NewReading(time.Now(), diagnose.ServerUnknown)
	}
	defer resp.Body.Close()
	sc, err := collect.Parse(resp.Body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return collect.Read(sc)
}

// TestDiagnoseRealLlamaCpp: on llama.cpp's own server, one slot under 8
// clients is named a slot limit with llama-server's -np in the proposal;
// four slots under one client is "none". No output prints NaN.
func TestDiagnoseRealLlamaCpp(t *testing.T) {
	for _, tc := range []struct {
		name           string
		slots, clients int
		want           string
	}{
		{"np 1, 8 clients", 1, 8, diagnose.Batching},
		{"np 4, 1 client", 4, 1, diagnose.None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := diagnoseLlama(t, tc.slots, tc.clients)
			text := reportText(t, &rep)
			if rep.Bottleneck != tc.want {
				t.Fatalf("bottleneck %s (%s), want %s\n%s", rep.Bottleneck, rep.Confidence, tc.want, text)
			}
			if b := rep.Backends[0]; b.Server != diagnose.ServerLlamaCpp || b.Slots != diagnose.Num(tc.slots) {
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

// TestLlamaCppFixtures holds the recorded /metrics, /props and /slots
// the unit tests read to what the server emits: the same metric names
// and types, and the fields the parsers read.
func TestLlamaCppFixtures(t *testing.T) {
	s := llamatest.Start(t, llamatest.Options{Parallel: 2})
	get := func(path string) []byte {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
		}
		return b
	}
	typesOf := func(b []byte) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllSubmatch(b, -1) {
			out = append(out, string(m[1])+" "+string(m[2]))
		}
		sort.Strings(out)
		return out
	}
	fixture, err := os.ReadFile("testdata/llamacpp.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := typesOf(get("/metrics")), typesOf(fixture); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the server's metrics:\n%s\nthe fixture's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sl, err := collect.ParseProps(get("/props")); err != nil || sl.Total != 2 || sl.Context <= 0 {
		t.Errorf("/props: %+v, %v; want 2 slots with a context", sl, err)
	}
	if sl, err := collect.ParseSlots(get("/slots")); err != nil || sl.Total != 2 || sl.Busy != 0 || sl.Context <= 0 {
		t.Errorf("/slots: %+v, %v; want 2 idle slots with a context", sl, err)
	}
	// Every field of the server's answers is in the fixtures (whose slot
	// was busy, and so has its task's fields too).
	for _, path := range []string{"/props", "/slots"} {
		fix, err := os.ReadFile("testdata" + path + ".json")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := keys(t, get(path)), keys(t, fix); !subset(got, want) {
			t.Errorf("%s: the server's fields %v are not all in the fixture's %v", path, got, want)
		}
	}
}

// keys are the top-level fields of a JSON object, or of an array's first
// object.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(b, &arr); err != nil || len(arr) == 0 {
			t.Fatalf("%s: %v", b, err)
		}
		b = arr[0]
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%.200s: %v", b, err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func subset(a, b []string) bool {
	have := map[string]bool{}
	for _, k := range b {
		have[k] = true
	}
	for _, k := range a {
		if !have[k] {
			return false
		}
	}
	return true
}

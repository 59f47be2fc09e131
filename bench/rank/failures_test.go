package rank

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/sim/simtest"
)

// simAt runs a fixed-timing simulator failing share of its requests with
// a 500, and returns its base URL.
func simAt(t *testing.T, ttft time.Duration, share float64) string {
	t.Helper()
	cfg := simtest.Fixed(ttft, 5*time.Millisecond)
	cfg.Faults.ErrorRate = share
	return simtest.Start(t, cfg).URL
}

// counted puts a proxy in front of backend that counts the requests
// reaching it.
func counted(t *testing.T, backend string, n *atomic.Int64) string {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// endpointsFile is a file of endpoints at one price, with the end-to-end
// tests' small workload.
func endpointsFile(t *testing.T, requests, rounds int, urls ...[2]string) *File {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, u := range urls {
		fmt.Fprintf(&b, "  - {name: %s, url: \"%s/v1\", model: sim-model, price: {input: 1, output: 2}}\n", u[0], u[1])
	}
	fmt.Fprintf(&b, "workload: {input_tokens: \"48\", output_tokens: \"4\", concurrency: 4, requests: %d, probes: 1, rounds: %d}\n", requests, rounds)
	f, err := decode(t, b.String())
	if err != nil {
		t.Fatal(err)
	}
	f.Workload.Defaults()
	return f
}

func place(rec *Record, name string) Place {
	for _, p := range rec.Ranking {
		if p.Name == name {
			return p
		}
	}
	return Place{}
}

func ranking(rec *Record) string {
	var parts []string
	for _, p := range rec.Ranking {
		parts = append(parts, rankText(p)+" "+p.Name)
	}
	return strings.Join(parts, ", ")
}

// Three simulators at one price: fast, fast failing a third of its
// requests, and slow. In the default order fast ranks first alone, and
// the failing one below it, said to be for its error rate.
func TestRankCountsFailures(t *testing.T) {
	t.Parallel()
	f := endpointsFile(t, 16, 3,
		[2]string{"fast", simAt(t, 40*time.Millisecond, 0)},
		[2]string{"failing", simAt(t, 40*time.Millisecond, 1.0/3)},
		[2]string{"slow", simAt(t, 100*time.Millisecond, 0)})
	var plan bytes.Buffer
	rec, err := Run(context.Background(), f, Options{Keys: []string{"", "", ""}, Plan: &plan})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan.String(), "too small") || !strings.Contains(plan.String(), "order slo,errors,cost,ttft") {
		t.Errorf("the plan of 48 requests an endpoint:\n%s", plan.String())
	}
	var table bytes.Buffer
	rec.Write(&table)
	fast, failing := place(rec, "fast"), place(rec, "failing")
	if fast.Rank != 1 || fast.Tied || rec.Ranking[0].Name != "fast" {
		t.Errorf("ranking %s: want fast first, alone\n%s", ranking(rec), table.String())
	}
	if failing.Rank <= fast.Rank || failing.Tied {
		t.Errorf("ranking %s: want failing below fast, not tied\n%s", ranking(rec), table.String())
	}
	// It stops being compared on the key that tells it apart: its
	// failures (or, had its first 8 all failed alike, no answer).
	if !strings.Contains(failing.Why, "error rate") && !strings.Contains(failing.Why, "no answer") {
		t.Errorf("failing's place says %q, want its error rate\n%s", failing.Why, table.String())
	}
	for _, e := range rec.Endpoints {
		if e.Name == "failing" && e.Figures.Failed == 0 {
			t.Errorf("the failing sim failed nothing: %+v", e.Figures)
		}
	}
}

// With too few requests to tell endpoints apart, the plan says so, with
// the requests that would, before anything reaches them; the 2.5× TTFT gap
// then ties, and the tie and the table say why.
func TestRankTooSmallSaysSoBeforeSending(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	f := endpointsFile(t, 4, 2,
		[2]string{"fast", counted(t, simAt(t, 40*time.Millisecond, 0), &sent)},
		[2]string{"slow", counted(t, simAt(t, 100*time.Millisecond, 0), &sent)})
	var plan bytes.Buffer
	sentAtPlan := int64(-1)
	w := writerFunc(func(b []byte) (int, error) {
		if sentAtPlan < 0 {
			sentAtPlan = sent.Load()
		}
		return plan.Write(b)
	})
	rec, err := Run(context.Background(), f, Options{Keys: []string{"", ""}, Plan: w})
	if err != nil {
		t.Fatal(err)
	}
	if sentAtPlan != 0 {
		t.Errorf("%d requests were sent before the plan", sentAtPlan)
	}
	for _, want := range []string{"too small: cost: at most 8 answers an endpoint, its test needs 20: every endpoint will tie on it; send --requests 10 (at 2 rounds) or --rounds 5",
		"too small: ttft: at most 8 answers an endpoint", "too small: errors: 8 requests an endpoint tell one failing 50% or more (4 of 8) from one failing none: one failing a third would tie with it; that needs 10",
		"the workload is too small to tell endpoints apart on errors, cost, ttft"} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, plan.String())
		}
	}
	if sent.Load() == 0 {
		t.Fatal("nothing was sent")
	}
	var table bytes.Buffer
	rec.Write(&table)
	slow := place(rec, "slow")
	if !slow.Tied || slow.Rank != 1 || !strings.Contains(slow.Why, "TTFT p50: too few answers (8 and 8; its test needs 20 each)") {
		t.Errorf("slow: %+v, want tied with fast for too few answers\n%s", slow, table.String())
	}
	if !strings.Contains(table.String(), "warning: the workload was too small to tell endpoints apart on ttft") {
		t.Errorf("the table does not say the run was too small\n%s", table.String())
	}
}

// A/A: two identical simulators tie, and the tie names each figure with
// its interval and p-value.
func TestRankTwinsTie(t *testing.T) {
	// Not parallel: it measures time, and twins measured beside other
	// tests' load were told apart (41.8 against 45.4 ms in a full run).
	f := endpointsFile(t, 16, 3,
		[2]string{"a", simAt(t, 40*time.Millisecond, 0)},
		[2]string{"b", simAt(t, 40*time.Millisecond, 0)})
	rec, err := Run(context.Background(), f, Options{Keys: []string{"", ""}})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rec.Write(&table)
	p := rec.Ranking[1]
	if !p.Tied || p.Rank != 1 || !rec.Ranking[0].Tied {
		t.Fatalf("ranking %s: want the twins tied\n%s", ranking(rec), table.String())
	}
	for _, want := range []string{"tied with " + rec.Ranking[0].Name + ": slo: no SLO set; error rate 0 of 48 against 0 of 48: ", " the 2-point tolerance; cost per request ",
		"%, p=1, within the 5% tolerance; TTFT p50 ", " ms: ", "%, p=", " the 5% tolerance"} {
		if !strings.Contains(p.Why, want) {
			t.Errorf("the tie does not say %q: %s", want, p.Why)
		}
	}
	if !strings.Contains(table.String(), p.Why) {
		t.Errorf("the table does not show the tie's reason\n%s", table.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// failingEvery puts a proxy in front of backend that answers every nth
// POST with a 500 and an OpenAI error body, and passes the rest.
func failingEvery(t *testing.T, backend string, nth int64) string {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	// A new connection each: llama.cpp closes one after every stream,
	// and a reused one would fail requests the proxy did not mean to.
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1,
		Transport: &http.Transport{DisableKeepAlives: true}}
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1)%nth == 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":{"message":"injected","type":"server_error"}}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The real engine: llama.cpp's server ranked against itself behind a
// proxy that fails every third request. Same server, same price: the
// one answering every request ranks first alone, the failing one below
// for its error rate (llama.cpp closes the connection after each stream
// and counts the end-of-sequence token: the ranking does not care).
func TestRankCountsFailuresOnLlamaCpp(t *testing.T) {
	t.Parallel()
	s := llamatest.Start(t, llamatest.Options{Parallel: 2, Predict: 16})
	f := endpointsFile(t, 10, 2, [2]string{"llama", s.URL}, [2]string{"llama-failing", failingEvery(t, s.URL, 3)})
	f.Workload.Concurrency, f.Workload.OutputTokens = 2, "8"
	var plan bytes.Buffer
	rec, err := Run(context.Background(), f, Options{Keys: []string{"", ""}, Plan: &plan})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rec.Write(&table)
	first, failing := rec.Ranking[0], place(rec, "llama-failing")
	if first.Name != "llama" || first.Tied || failing.Rank != 2 || !strings.Contains(failing.Why, "error rate") {
		t.Errorf("ranking %s (%s): want llama first alone, llama-failing below for its error rate\n%s\n%s", ranking(rec), failing.Why, plan.String(), table.String())
	}
	for _, e := range rec.Endpoints {
		if e.Figures.OK == 0 || e.Figures.OutputTokens == 0 {
			t.Errorf("%s: no answers with usage from llama.cpp: %+v", e.Name, e.Figures)
		}
		// The proxy fails every third POST, probes included, and nothing
		// else: a third of the measured requests, give or take the probes.
		if want := map[string]bool{"llama": e.Figures.Failed == 0, "llama-failing": e.Figures.Failed >= 6 && e.Figures.Failed <= 10}; !want[e.Name] {
			t.Errorf("%s: %d of %d failed (%v)", e.Name, e.Figures.Failed, e.Figures.Requests, e.Figures.Errors)
		}
	}
	t.Logf("%s\n%s", plan.String(), table.String())
}

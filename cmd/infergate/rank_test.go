package main

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/bench/rank"
)

// recorder is a reverse proxy on real TCP in front of a backend that
// notes every request's arrival, its Authorization, and every 429 it
// relays with the Retry-After it carried.
type recorder struct {
	url    string
	target atomic.Pointer[url.URL]
	mu     sync.Mutex
	arrive []time.Time
	auth   []string // of each POST
	limits []limit
}

type limit struct {
	at    time.Time
	after time.Duration
}

func newRecorder(t *testing.T, backend string) *recorder {
	t.Helper()
	r := &recorder{}
	r.switchTo(t, backend)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(r.target.Load()) },
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusTooManyRequests {
				var secs int
				fmt.Sscan(resp.Header.Get("Retry-After"), &secs)
				r.mu.Lock()
				r.limits = append(r.limits, limit{time.Now(), time.Duration(secs) * time.Second})
				r.mu.Unlock()
			}
			return nil
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.arrive = append(r.arrive, time.Now())
		if req.Method == http.MethodPost {
			r.auth = append(r.auth, req.Header.Get("Authorization"))
		} else if a := req.Header.Get("Authorization"); a != "" {
			r.auth = append(r.auth, a)
		}
		r.mu.Unlock()
		rp.ServeHTTP(w, req)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *recorder) switchTo(t *testing.T, backend string) {
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	r.target.Store(u)
}

type rankEndpoint struct {
	name, url, key  string
	in, cached, out float64
}

func writeEndpoints(t *testing.T, path string, es []rankEndpoint) {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range es {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s/v1\n    model: sim-model\n    price: {input: %g, cached_input: %g, output: %g}\n", e.name, e.url, e.in, e.cached, e.out)
		if e.key != "" {
			b.WriteString("    " + e.key + "\n")
		}
	}
	b.WriteString("workload:\n  input_tokens: \"48\"\n  output_tokens: \"4\"\n  concurrency: 4\n  requests: 16\n  probes: 1\n  rounds: 3\n  shared_prefix: 32\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Six endpoints as real processes: two identical sims, one behind the
// gateway, one slow, one that rate-limits with 429 and Retry-After behind
// a recorder, and the gateway again with a wrong key. The ranking follows their settings; the twins tie; the
// limited one's availability and waits are reported and no request
// reached it before its Retry-After had passed; costs are the prices
// times the usage each answer returned; each key went to its own
// endpoint only and is in no output.
func TestRankOrdersEndpointsAsTheirSettingsImply(t *testing.T) {
	t.Parallel()
	sim := func(extra ...string) string {
		return start(t, append([]string{"sim", "--listen", "127.0.0.1:0", "--ttft", "40ms", "--itl", "5ms"}, extra...)...).url(t)
	}
	fast, twin := sim(), sim()
	// The gateway's backend is the engine, whose prefix cache bills the
	// shared prefix at the cached price.
	// It asks for a key: the locked endpoint's is wrong.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gw.keys"), []byte("key-for-gateway\n"), 0o600)
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--auth-keys", filepath.Join(dir, "gw.keys"),
		"--upstream", start(t, "sim", "--listen", "127.0.0.1:0").url(t)).url(t)
	// The SLO (300 ms) sits far from both sides: a busy machine only adds
	// to a TTFT, so the slow ones (400 ms) fail it on any machine, and the
	// fast ones (40 ms) have 260 ms of slack for a starved CPU to take
	// (with 150 ms against 40 they failed it in full -race runs).
	slow := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "400ms", "--itl", "5ms").url(t)
	// Slow too, so that it fails the SLO whatever share its 429s take;
	// few of them keep the run's Retry-After holds short.
	limited := newRecorder(t, start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "400ms", "--itl", "5ms",
		"--error-rate", "0.15", "--error-status", "429", "--retry-after", "1s").url(t))
	keyFile := filepath.Join(dir, "limited.key")
	os.WriteFile(keyFile, []byte("key-for-limited\n"), 0o600)
	file := filepath.Join(dir, "endpoints.yaml")
	writeEndpoints(t, file, []rankEndpoint{
		{"fast", fast, "api_key_env: RANK_TEST_FAST_KEY", 0.5, 0.05, 1.5},
		{"fast-twin", twin, "", 0.5, 0.05, 1.5},
		{"gateway", gw, "api_key_env: RANK_TEST_GW_KEY", 1, 0.1, 3},
		{"slow", slow, "", 0.1, 0.1, 0.4},
		{"limited", limited.url, "api_key_file: " + keyFile, 0.2, 0.2, 0.6},
		{"locked", gw, "api_key_env: RANK_TEST_LOCKED_KEY", 0.01, 0.01, 0.01},
	})
	hist := filepath.Join(dir, "runs")
	cmd := []string{"rank", file, "--slo", "ttft=300ms", "--dir", hist, "--csv", filepath.Join(dir, "r.csv"), "--html", filepath.Join(dir, "r.html")}
	code, out := exitCodeEnv(t, []string{"RANK_TEST_FAST_KEY=key-for-fast", "RANK_TEST_GW_KEY=key-for-gateway", "RANK_TEST_LOCKED_KEY=key-for-nothing"}, cmd...)
	if code != 0 {
		t.Fatalf("rank: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "6 endpoints × 3 rounds × (1 probes + 4 warm-up + 16 measured requests") || !strings.Contains(out, "at most 378 requests") {
		t.Errorf("the bound is not stated up front\n%s", out)
	}
	if !strings.Contains(out, "rank: order slo,errors,cost,ttft, first decides first; 48 measured requests an endpoint") || !strings.Contains(out, "slo: 48 requests an endpoint (showing p90 met needs at least 35") || strings.Contains(out, "too small") {
		t.Errorf("the plan does not give the default order and what 48 requests can tell apart\n%s", out)
	}
	paths, _ := filepath.Glob(filepath.Join(hist, "rank-*.json"))
	if len(paths) != 1 {
		t.Fatalf("records: %v", paths)
	}
	rec, err := rank.LoadRecord(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	// The folder opens on its index: the run's page, who ranked first.
	page := strings.TrimSuffix(filepath.Base(paths[0]), ".json") + ".html"
	index, err := os.ReadFile(filepath.Join(hist, "index.html"))
	if _, perr := os.Stat(filepath.Join(hist, page)); err != nil || perr != nil || !strings.Contains(string(index), `<a href="`+page+`">`) ||
		!strings.Contains(string(index), "first: fast, fast-twin (tied) of 6 endpoints, by slo,errors,cost,ttft") {
		t.Errorf("index.html (%v, page %s):\n%s", err, page, index)
	}
	var order []string
	for _, p := range rec.Ranking {
		order = append(order, fmt.Sprintf("%d%s", p.Rank, p.Name))
	}
	// The locked endpoint is the cheapest, and answered nothing.
	if got := strings.Join(order, " "); got != "1fast 1fast-twin 3gateway 4slow 5limited 6locked" {
		t.Errorf("ranking %s, want 1fast 1fast-twin 3gateway 4slow 5limited 6locked\n%s", got, out)
	}
	if !rec.Ranking[0].Tied || !rec.Ranking[1].Tied || rec.Ranking[2].Tied || rec.Ranking[5].Tied {
		t.Errorf("the twins must be tied, and only they: %+v", rec.Ranking)
	}
	if why := rec.Ranking[1].Why; !strings.Contains(why, "tied with fast: slo: both meet it; error rate 0 of 48 against 0 of 48") || !strings.Contains(why, "; TTFT p50 ") || !strings.Contains(out, why) {
		t.Errorf("the twins' tie does not say why, key by key, in the record and the table: %q", why)
	}
	by := map[string]*rank.Result{}
	for _, e := range rec.Endpoints {
		by[e.Name] = e
		if e.Name == "locked" {
			continue
		}
		// Cost by hand: the configured prices times the usage returned.
		var sum float64
		var n int
		for _, q := range e.Requests {
			if !q.OK || q.Probe {
				continue
			}
			if q.PromptTokens <= 0 || q.OutputTokens != 4 {
				t.Errorf("%s: usage prompt %d output %d, want the sim's usage (4 output tokens)", e.Name, q.PromptTokens, q.OutputTokens)
			}
			cached := max(q.CachedTokens, 0)
			sum += (float64(q.PromptTokens-cached)*e.Price.Input + float64(cached)*e.Price.Cached() + float64(q.OutputTokens)*e.Price.Output) / 1e6
			n++
		}
		f := e.Figures
		if want := sum / float64(n); math.Abs(f.CostPerRequest.Value-want) > 1e-12 {
			t.Errorf("%s: cost per request %g, by hand %g", e.Name, f.CostPerRequest.Value, want)
		}
		if want := sum / float64(f.OutputTokens) * 1e6; math.Abs(f.CostPerMOutput-want) > 1e-9 {
			t.Errorf("%s: cost per M output %g, by hand %g", e.Name, f.CostPerMOutput, want)
		}
		if want := (3*e.Price.Input + e.Price.Output) / 4; f.Blended != want {
			t.Errorf("%s: blended %g, want %g", e.Name, f.Blended, want)
		}
	}
	lf := by["limited"].Figures
	if lf.Errors[rank.ClassRateLimit] == 0 || lf.RetryAfter == 0 || lf.HeldS <= 0 || lf.Availability >= 1 || lf.SLO != rank.Fails {
		t.Errorf("limited: %+v, want rate limits, Retry-After waits, availability below 100%% and the SLO failed", lf)
	}
	if !strings.Contains(out, "rate limited: ") {
		t.Errorf("the rate limiting is not reported\n%s", out)
	}
	if lk := by["locked"]; lk.Figures.Errors[rank.ClassAuth] == 0 || lk.Figures.OK != 0 || !strings.Contains(lk.Stopped, "round 0: bench: stopped: the first 8 requests all failed alike (http_401)") || len(lk.Rounds) != 1 {
		t.Errorf("locked: %+v stopped %q, want its auth failures and no rounds after the first", lk.Figures, lk.Stopped)
	}
	if gf := by["gateway"].Figures; gf.CachedTokens == 0 {
		t.Errorf("gateway: no cached tokens from the engine's prefix cache: %+v", gf)
	}
	if ff := by["fast"].Figures; ff.Failed != 0 || ff.Availability != 1 || ff.SLO != rank.Meets {
		t.Errorf("fast: %+v", ff)
	}
	limited.mu.Lock()
	for _, l := range limited.limits {
		for _, a := range limited.arrive {
			// A request already on its way when the 429 left may land
			// just after it (on a loaded machine, a good part of a
			// second); none may be sent within its Retry-After.
			if a.After(l.at.Add(250*time.Millisecond)) && a.Before(l.at.Add(l.after-250*time.Millisecond)) {
				t.Errorf("a request reached the limited endpoint %v after a 429 with Retry-After %v", a.Sub(l.at), l.after)
			}
		}
	}
	if len(limited.limits) == 0 {
		t.Error("the limited endpoint never answered 429")
	}
	for _, a := range limited.auth {
		if a != "Bearer key-for-limited" {
			t.Errorf("the limited endpoint got Authorization %q, want its own key only", a)
		}
	}
	limited.mu.Unlock()
	for _, p := range []string{paths[0], filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.html")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("key-for-")) {
			t.Errorf("%s holds a key", p)
		}
	}
	if strings.Contains(out, "key-for-") {
		t.Error("the output holds a key")
	}
	assertPrivate(t, paths[0], filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.html"))
	if b, _ := os.ReadFile(filepath.Join(dir, "r.csv")); len(bytes.Split(bytes.TrimSpace(b), []byte("\n"))) != 7 {
		t.Errorf("csv: want a header and six rows\n%s", b)
	}
}

// Three runs into one history; one endpoint's backend is switched to a
// slower one between the second and the third: only it is flagged.
func TestRankHistoryFlagsOnlyTheEndpointThatChanged(t *testing.T) {
	t.Parallel()
	sim := func(ttft string) string {
		// ITL 20 ms: a timer that slips 1 ms on a busy machine moves speed
		// by 5%, well inside the drift tolerance.
		return start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", ttft, "--itl", "20ms").url(t)
	}
	a, c := sim("40ms"), sim("60ms")
	slower := sim("120ms")
	dir := t.TempDir()
	// b is a gateway in front of a 40 ms sim, moved to the slower one by a
	// reload between the second and the third runs: its URL stays, only
	// its TTFT changes. (A proxy in this test process switched it before;
	// that process is race-instrumented and shared by every parallel
	// test, and what the proxy added once fell from 7 ms to 1 ms between
	// two runs, flagged as b getting better.)
	gwConf := filepath.Join(dir, "gw.yaml")
	writeConfig(t, gwConf, sim("40ms"), "sim-model")
	gw := start(t, "serve", "--config", gwConf)
	b := gw.url(t)
	file := filepath.Join(dir, "endpoints.yaml")
	writeEndpoints(t, file, []rankEndpoint{{"a", a, "", 1, 1, 2}, {"b", b, "", 1, 1, 2}, {"c", c, "", 1, 1, 2}})
	hist := filepath.Join(dir, "runs")
	for i := range 3 {
		if i == 2 {
			writeConfig(t, gwConf, slower, "sim-model")
			if err := gw.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			waitLog(t, gw, "configuration reloaded")
		}
		code, out := exitCode(t, "rank", file, "--rounds", "2", "--history", hist, "--quiet")
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, out)
		}
		if i < 2 && !strings.Contains(out, "no change beyond noise") {
			t.Errorf("run %d: a flag before anything changed\n%s", i, out)
		}
	}
	code, out := exitCode(t, "rank", "--history", hist, "--html", filepath.Join(dir, "h.html"))
	if code != 0 {
		t.Fatalf("rank --history: exit %d\n%s", code, out)
	}
	runs, err := rank.LoadHistory(hist)
	if err != nil || len(runs) != 3 {
		t.Fatalf("history: %d runs, %v", len(runs), err)
	}
	if index, err := os.ReadFile(filepath.Join(hist, "index.html")); err != nil || strings.Count(string(index), `<a href="rank-`) != 3 {
		t.Errorf("the history's index links %d runs' pages, want 3 (%v)", strings.Count(string(index), `<a href="rank-`), err)
	}
	flags := rank.Drift(runs, rank.DriftOptions{})
	if len(flags) == 0 {
		t.Fatalf("no flag for b's slower backend\n%s", out)
	}
	for _, f := range flags {
		if f.Endpoint != "b" || !f.To.Equal(runs[2].Start) {
			t.Errorf("flag %+v: want b's, between the second and third runs", f)
		}
	}
	if !strings.Contains(out, "b  ") || !strings.Contains(out, "TTFT p50") || !strings.Contains(out, "worse") {
		t.Errorf("the history does not show b's TTFT got worse\n%s", out)
	}
}

// What the file gets wrong is named by its field path; a missing key
// names the endpoint; a key is never sent in the clear off this machine.
func TestRankRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\n    price: {input: 1, output: cheap}\n", "endpoints[0].price.output"},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\n  - name: b\n    url: http://127.0.0.1:1/v1\n    model: m\n    prise: {input: 1}\n", "endpoints[1].prise: unknown key; did you mean price?"},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\n    price: {input: -1, output: 1}\n", "endpoints[0].price.input"},
		{"endpoints:\n  - name: a\n    url: 127.0.0.1:1\n    model: m\n", "endpoints[0].url"},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\n    headers: {Authorization: Bearer sk-x}\n", "endpoints[0].headers.Authorization"},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\n    api_key_env: RANK_TEST_NOT_SET\n", `endpoint "a" (endpoints[0]): api_key_env RANK_TEST_NOT_SET is not set`},
		{"endpoints:\n  - name: off\n    url: http://192.0.2.1/v1\n    model: m\n    api_key_env: RANK_TEST_SET\n", `endpoint "off" (endpoints[0]): its key would go over plain HTTP to 192.0.2.1`},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\nworkload:\n  rounds: 1000\n", "workload.rounds"},
		{"endpoints:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    model: m\nworkload:\n  order: cost,vibes\n", "workload.order"},
	} {
		p := filepath.Join(dir, "e.yaml")
		os.WriteFile(p, []byte(c.file), 0o600)
		code, out := exitCodeEnv(t, []string{"RANK_TEST_SET=sk-secret"}, "rank", p)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("file\n%s: exit %d, want an error naming %q\n%s", c.file, code, c.want, out)
		}
		if strings.Contains(out, "sk-") {
			t.Errorf("the error shows a key\n%s", out)
		}
	}
}

package rank

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/htmlcheck"
	"github.com/infergate/infergate/internal/yamlconf"
	"github.com/infergate/infergate/verdict"
)

func decode(t *testing.T, src string) (*File, error) {
	t.Helper()
	var f File
	if err := yamlconf.Decode([]byte(src), &f); err != nil {
		return nil, err
	}
	return &f, f.Validate()
}

const one = "endpoints:\n  - name: a\n    url: https://api.example.com/v1\n    model: m\n"

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ src, want string }{
		{one, ""},
		{"endpoints: []\n", "endpoints: none listed"},
		{one + "  - name: a\n    url: https://b.example.com/v1\n    model: m\n", `endpoints[1].name "a": also endpoints[0]'s`},
		{"endpoints:\n  - name: a\n    url: ftp://x/v1\n    model: m\n", "endpoints[0].url"},
		{"endpoints:\n  - name: a\n    url: https://user:pw@x/v1\n    model: m\n", "endpoints[0].url: holds a user or password"},
		{"endpoints:\n  - name: a\n    url: https://x/v1\n", "endpoints[0].model: empty"},
		{one + "    api_key_env: A\n    api_key_file: /k\n", "endpoints[0]: api_key_env and api_key_file both set"},
		{one + "    api_key_header: \"bad header\"\n", "endpoints[0].api_key_header"},
		{one + "    price: {input: 1, output: -2}\n", "endpoints[0].price.output"},
		// Unset, cached_input is input's price: the error names input.
		{one + "    price: {input: -1, output: 2}\n", "endpoints[0].price.input:"},
		{one + "    price: {input: 1, cached_input: -1, output: 2}\n", "endpoints[0].price.cached_input"},
		{one + "    headers: {x-api-key: k}\n", "endpoints[0].headers.x-api-key: a credential goes in api_key_env"},
		{one + "    headers: {X-Org: \"a\\r\\nb\"}\n", "endpoints[0].headers.X-Org"},
		{one + "    overrides: {model: other}\n", "endpoints[0].overrides.model"},
		{one + "workload:\n  api: embeddings\n", "workload.api"},
		{one + "workload:\n  requests: 100000\n", "workload.requests"},
		{one + "workload:\n  order: cost,ttft,mood\n", `workload.order: "mood"`},
		{one + "workload:\n  slo: ttft=fast\n", "workload.slo"},
		{one + "workload:\n  slo_percentile: p100\n", "workload.slo_percentile"},
	} {
		_, err := decode(t, c.src)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.src, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
	var many strings.Builder
	many.WriteString("endpoints:\n")
	for i := range maxEndpoints + 1 {
		many.WriteString("  - {name: e" + strings.Repeat("x", i) + ", url: http://127.0.0.1:1, model: m}\n")
	}
	if _, err := decode(t, many.String()); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("65 endpoints: %v", err)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	f, err := decode(t, "endpoints:\n  - {name: a, url: https://a/v1, model: m, api_key_env: KA}\n  - {name: b, url: https://b/v1, model: m, api_key_file: /keys/b, api_key_header: api-key}\n  - {name: c, url: https://c/v1, model: m}\n")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KA": " ka\n"}
	files := map[string]string{"/keys/b": "kb\n"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	read := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, errors.New("no such file")
	}
	keys, err := f.Keys(getenv, read)
	if err != nil || strings.Join(keys, ",") != "ka,kb," {
		t.Fatalf("keys %q, %v", keys, err)
	}
	if h := f.Endpoints[0].headers(keys[0]); len(h) != 1 || h[0] != [2]string{"Authorization", "Bearer ka"} {
		t.Errorf("a's headers %q", h)
	}
	if h := f.Endpoints[1].headers(keys[1]); len(h) != 1 || h[0] != [2]string{"api-key", "kb"} {
		t.Errorf("b's headers %q: want its own header with the bare key", h)
	}
	delete(env, "KA")
	if _, err := f.Keys(getenv, read); err == nil || err.Error() != `endpoint "a" (endpoints[0]): api_key_env KA is not set` {
		t.Errorf("missing variable: %v", err)
	}
	env["KA"] = "ka"
	files["/keys/b"] = " \n"
	if _, err := f.Keys(getenv, read); err == nil || !strings.Contains(err.Error(), `endpoint "b" (endpoints[1]): api_key_file /keys/b is empty`) {
		t.Errorf("empty file: %v", err)
	}
}

func TestCost(t *testing.T) {
	t.Parallel()
	cached := 0.1
	p := Price{Input: 1, CachedInput: &cached, Output: 4}
	if got := cost(p, 1000, 400, 100); got != (600*1+400*0.1+100*4)/1e6 {
		t.Errorf("cost %g", got)
	}
	if got := cost(p, 100, 500, -1); got != 100*0.1/1e6 {
		t.Errorf("cached beyond the prompt, no output usage: %g", got)
	}
	if (Price{Input: 2}).Cached() != 2 {
		t.Error("cached_input unset must cost as input")
	}
}

// result builds an endpoint that answered n requests with TTFTs drawn
// around ttft ms, costing cost each, failing the first failed.
func result(name string, n, failed int, ttft, c float64, seed uint64) *Result {
	rng := rand.New(rand.NewPCG(seed, 1))
	r := &Result{Name: name, Price: Price{Input: 1, Output: 1}}
	for i := range n {
		q := Request{OK: i >= failed, PromptTokens: 10, OutputTokens: 10}
		if q.OK {
			q.TTFT, q.Speed, q.Cost, q.Met = ttft*(1+0.02*rng.NormFloat64()), 100, c, ttft < 100
		} else {
			q.Class = ClassServer
		}
		r.Requests = append(r.Requests, q)
	}
	r.Rounds = []Round{{OK: n - failed, Requests: n, Throughput: 10, RequestRate: 1}}
	return r
}

func ranked(rs []*Result, order, slo string) string {
	s, _ := rankedWhy(rs, order, slo)
	return s
}

// rankedWhy is ranked with each place's why, a line each.
func rankedWhy(rs []*Result, order, slo string) (string, string) {
	w := Workload{Order: order, SLO: slo}
	var slos []verdict.SLO
	if slo != "" {
		slos = []verdict.SLO{{Metric: "ttft", MaxMs: 100}}
	}
	for _, r := range rs {
		r.Figures = figures(r, w, slos, 0.9)
	}
	var parts, whys []string
	for _, p := range Order(rs, w) {
		s := p.Name
		if p.Tied {
			s += "="
		}
		parts = append(parts, s)
		whys = append(whys, p.Name+": "+p.Why)
	}
	return strings.Join(parts, " "), strings.Join(whys, "\n")
}

func TestOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, order, slo string
		rs               []*Result
		want             string
	}{
		{"twins tie", "slo,cost,ttft", "", []*Result{result("a", 50, 0, 50, 1, 1), result("b", 50, 0, 50, 1, 2)}, "a= b="},
		{"cheaper first", "cost,ttft", "", []*Result{result("dear", 50, 0, 20, 2, 1), result("cheap", 50, 0, 50, 1, 2)}, "cheap dear"},
		{"a cost within tolerance leaves it to TTFT", "cost,ttft", "", []*Result{result("slow", 50, 0, 80, 1, 1), result("fast", 50, 0, 40, 1.01, 2)}, "fast slow"},
		{"the SLO before cost", "slo,cost", "on", []*Result{result("cheap-slow", 50, 0, 150, 0.5, 1), result("dear-fast", 50, 0, 40, 2, 2)}, "dear-fast cheap-slow"},
		{"errors", "errors", "", []*Result{result("flaky", 50, 20, 40, 1, 1), result("steady", 50, 0, 40, 1, 2)}, "steady flaky"},
		{"no answers last", "cost", "", []*Result{result("dead", 10, 10, 0, 0, 1), result("ok", 50, 0, 40, 5, 2)}, "ok dead"},
		{"too few to tell is a tie", "ttft", "", []*Result{result("a", 10, 0, 80, 1, 1), result("b", 10, 0, 40, 1, 2)}, "a= b="},
		// The default order: failing a third of the requests at the same
		// speed and price ranks below, with or without an SLO.
		{"failures weigh by default", defaultOrder, "", []*Result{result("flaky", 48, 16, 40, 1, 1), result("steady", 48, 0, 40, 1, 2)}, "steady flaky"},
		{"failures weigh by default with an SLO", defaultOrder, "on", []*Result{result("flaky", 48, 16, 40, 1, 1), result("steady", 48, 0, 40, 1, 2)}, "steady flaky"},
		{"a slower endpoint that answers all ranks above a failing one", defaultOrder, "", []*Result{result("flaky", 48, 16, 40, 1, 1), result("slow", 48, 0, 90, 1, 2), result("fast", 48, 0, 40, 1, 3)}, "fast slow flaky"},
		{"p90 needs its interval's values", "ttft_p90", "", []*Result{result("a", 30, 0, 80, 1, 1), result("b", 30, 0, 40, 1, 2)}, "a= b="},
		{"p90 with enough values", "ttft_p90", "", []*Result{result("a", 40, 0, 80, 1, 1), result("b", 40, 0, 40, 1, 2)}, "b a"},
	} {
		if got := ranked(c.rs, c.order, c.slo); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// Every tie says why, key by key: the figures with their intervals and
// p-values, or too few values for the key's test.
func TestTieSaysWhy(t *testing.T) {
	t.Parallel()
	order, why := rankedWhy([]*Result{result("a", 50, 0, 50, 1, 1), result("b", 50, 0, 50, 1, 2)}, defaultOrder, "")
	if order != "a= b=" {
		t.Fatalf("twins: %s", order)
	}
	for _, want := range []string{"b: tied with a: slo: no SLO set; error rate 0 of 50 against 0 of 50: +0.00pt [", "]pt, its interval straddles the 2-point tolerance",
		"cost per request 1 against 1: +0.0% [+0.0, +0.0]%, p=1, within the 5% tolerance", "; TTFT p50 "} {
		if !strings.Contains(why, want) {
			t.Errorf("the twins' tie does not say %q:\n%s", want, why)
		}
	}
	_, why = rankedWhy([]*Result{result("slow", 15, 0, 280, 2.6, 1), result("fast", 15, 0, 40, 1, 2)}, "cost,ttft,ttft_p90", "")
	for _, want := range []string{"cost per request: too few answers (15 and 15; its test needs 20 each)", "TTFT p50: too few answers (15 and 15; its test needs 20 each)",
		"TTFT p90: too few answers (15 and 15; its interval needs 36 each)"} {
		if !strings.Contains(why, want) {
			t.Errorf("a 7× TTFT and 2.6× cost gap on 15 answers ties without saying %q:\n%s", want, why)
		}
	}
	_, why = rankedWhy([]*Result{result("a", 20, 0, 50, 1, 1), result("b", 20, 0, 50, 1, 2)}, "slo", "on")
	if !strings.Contains(why, "slo: a unsure, too few requests (20; showing 90% met needs 35), b unsure, too few requests") {
		t.Errorf("an SLO that 20 requests cannot show met:\n%s", why)
	}
}

// The plan's sizes are where the ranking's tests start telling endpoints
// apart: one request fewer, and they tie.
func TestPlanSizesMatchTheTests(t *testing.T) {
	t.Parallel()
	plan := func(requests, rounds int, order, slo string) Plan {
		f := &File{Endpoints: []Endpoint{{Name: "a"}, {Name: "b"}}, Workload: Workload{Requests: requests, Rounds: rounds, Order: order, SLO: slo}}
		f.Workload.Defaults()
		return planOf(f)
	}
	p := plan(0, 0, "", "")
	if p.Requests != 48 || len(p.TooSmall()) != 0 || p.Blind || len(p.Keys) != 4 {
		t.Errorf("the default workload: %+v", p)
	}
	var b strings.Builder
	small := plan(5, 3, "", "ttft=1s")
	small.Write(&b, "rank: ")
	out := b.String()
	if got := strings.Join(small.TooSmall(), ","); got != "slo,cost,ttft" {
		t.Errorf("15 requests an endpoint: too small on %s, want slo,cost,ttft\n%s", got, out)
	}
	for _, want := range []string{"rank: order slo,errors,cost,ttft, first decides first; 15 measured requests an endpoint",
		"too small: cost: at most 15 answers an endpoint, its test needs 20: every endpoint will tie on it; send --requests 7 (at 3 rounds) or --rounds 4",
		"too small: slo: 15 requests an endpoint, and showing p90 met needs 35",
		"errors: 15 requests an endpoint tell one failing 33% or more (5 of 15) from one failing none",
		"the workload is too small to tell endpoints apart on slo, cost, ttft"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}
	if p := plan(3, 3, "cost,ttft", ""); !p.Blind || p.TooSmall()[0] != "cost" {
		t.Errorf("an order without errors or an SLO: %+v", p)
	}
	if p := plan(2, 1, "errors", ""); !p.Keys[0].TooSmall || !strings.Contains(p.Keys[0].Says, "2 requests an endpoint cannot tell even one failing them all from one failing none: one failing a third would tie with it; that needs 10: send --requests 10 (at 1 round) or --rounds 5") {
		t.Errorf("two requests: %+v", p.Keys)
	}
	need := map[string]int{}
	for _, k := range plan(1, 1, "errors,slo,ttft,ttft_p90", "ttft=1s").Keys {
		need[k.Key] = k.Need
	}
	// errors: one failing a third of n, against one failing none.
	n := need["errors"]
	for _, c := range []struct {
		n    int
		want string
	}{{n - 1, "flaky= steady="}, {n, "steady flaky"}} {
		k := (c.n + 2) / 3
		if got := ranked([]*Result{result("flaky", c.n, k, 40, 1, 1), result("steady", c.n, 0, 40, 1, 2)}, "errors", ""); got != c.want {
			t.Errorf("%d of %d failed against none: %s, want %s", k, c.n, got, c.want)
		}
	}
	// slo: all n requests meeting it is "meets" from need on.
	for _, c := range []struct {
		n    int
		want string
	}{{need["slo"] - 1, Unsure}, {need["slo"], Meets}} {
		if f := figures(result("a", c.n, 0, 40, 1, 1), Workload{}, []verdict.SLO{{Metric: "ttft", MaxMs: 100}}, 0.9); f.SLO != c.want {
			t.Errorf("%d of %d met: %s, want %s", c.n, c.n, f.SLO, c.want)
		}
	}
	// ttft and ttft_p90: a 2× gap is told apart from need answers on.
	for _, key := range []string{"ttft", "ttft_p90"} {
		if got := ranked([]*Result{result("slow", need[key]-1, 0, 80, 1, 1), result("fast", need[key]-1, 0, 40, 1, 2)}, key, ""); got != "slow= fast=" {
			t.Errorf("%s on %d answers: %s, want a tie", key, need[key]-1, got)
		}
		if got := ranked([]*Result{result("slow", need[key], 0, 80, 1, 1), result("fast", need[key], 0, 40, 1, 2)}, key, ""); got != "fast slow" {
			t.Errorf("%s on %d answers: %s, want fast slow", key, need[key], got)
		}
	}
}

func run(start time.Time, rs ...*Result) *Record {
	for _, r := range rs {
		r.Figures = figures(r, Workload{}, nil, 0.9)
	}
	return &Record{Schema: schema, Start: start, Endpoints: rs, Ranking: Order(rs, Workload{Order: "cost,ttft"})}
}

func TestDrift(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	runs := []*Record{
		run(t0, result("a", 60, 0, 50, 1, 1), result("b", 60, 0, 50, 1, 2)),
		run(t0.Add(time.Hour), result("a", 60, 0, 50, 1, 3), result("b", 60, 0, 51, 1, 4)),
		run(t0.Add(2*time.Hour), result("a", 60, 0, 50, 1, 5), result("b", 60, 0, 80, 1, 6)),
	}
	flags := Drift(runs, DriftOptions{})
	if len(flags) != 1 || flags[0].Endpoint != "b" || flags[0].Figure != "ttft" || !flags[0].From.Equal(runs[1].Start) || !strings.Contains(flags[0].What, "worse") {
		t.Fatalf("flags %+v: want b's TTFT, worse, between the second and third runs", flags)
	}
	runs[2].Endpoints[0].Price.Output = 3
	runs = append(runs, run(t0.Add(3*time.Hour), result("a", 60, 0, 50, 1, 7), result("b", 60, 0, 50, 1, 8)))
	flags = Drift(runs, DriftOptions{})
	var got []string
	for _, f := range flags {
		got = append(got, f.Endpoint+":"+f.Figure)
	}
	// a's price changed in the third run and back in the fourth.
	if strings.Join(got, " ") != "a:price b:ttft a:price b:ttft" {
		t.Errorf("flags %v, want a's price and b's TTFT worse, then a's price and b's TTFT better", got)
	}
	if !strings.Contains(flags[3].What, "better") {
		t.Errorf("%s: want better", flags[3].What)
	}
	// A record saved and read back drifts the same.
	dir := t.TempDir()
	for _, r := range runs {
		if err := r.Save(filepath.Join(dir, r.FileName())); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "notes.json"), []byte("{}"), 0o600)
	back, err := LoadHistory(dir)
	if err != nil || len(back) != len(runs) {
		t.Fatalf("history: %d runs, %v", len(back), err)
	}
	if again := Drift(back, DriftOptions{}); len(again) != len(flags) {
		t.Errorf("read back: %d flags, want %d", len(again), len(flags))
	}
	// A run of another workload is not compared with the one before.
	other := run(t0.Add(4*time.Hour), result("a", 60, 0, 90, 1, 9), result("b", 60, 0, 90, 1, 10))
	other.Workload.InputTokens = "2048"
	flags = Drift(append(runs, other), DriftOptions{})
	if last := flags[len(flags)-1]; last.Figure != "workload" || last.Endpoint != "" || !strings.Contains(last.What, `workload.input_tokens "" → "2048"`) || len(flags) != 5 {
		t.Errorf("flags %+v: want the last transition not compared, naming the input length", flags)
	}
	os.WriteFile(filepath.Join(dir, "rank-bad.json"), []byte(`{"schema":"other"}`), 0o600)
	if _, err := LoadHistory(dir); err == nil || !strings.Contains(err.Error(), "rank-bad.json") {
		t.Errorf("a record of another schema: %v", err)
	}
}

// The page draws its charts in a real browser, and an endpoint named
// like markup shows as text.
func TestPageInChromium(t *testing.T) {
	t.Parallel()
	hostile := `<script>document.title="ran"</script>`
	r := run(time.Now(), result(hostile, 40, 2, 50, 1, 1), result("b", 40, 0, 60, 2, 2))
	for _, e := range r.Endpoints {
		e.Rounds = []Round{{Round: 0, TTFTP50: 50, OK: 10, Requests: 10}, {Round: 1, TTFTP50: 55, OK: 9, Requests: 10}}
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b, []*Record{r, r}, []Flag{{Endpoint: hostile, What: hostile}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<script>") {
		t.Fatal("the page holds the endpoint's name unescaped")
	}
	p := filepath.Join(t.TempDir(), "rank.html")
	os.WriteFile(p, b.Bytes(), 0o600)
	htmlcheck.Check(t, p, "#0072B2")
}

func FuzzFile(f *testing.F) {
	f.Add([]byte(one))
	f.Add([]byte(one + "    price: {input: 1, cached_input: 0.1, output: 2}\n    headers: {X-A: b}\n    overrides: {temperature: 0}\nworkload: {rounds: 2, order: slo}\n"))
	f.Add([]byte("endpoints:\n  - {name: \"\", url: \"http://[::1\"}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		var file File
		if yamlconf.Decode(src, &file) != nil || file.Validate() != nil {
			return
		}
		file.Workload.Defaults()
		if err := file.Validate(); err != nil {
			t.Fatalf("valid, then invalid with defaults: %v", err)
		}
		_ = bound(&file)
		planOf(&file).Write(io.Discard, "")
		for i := range file.Endpoints {
			_ = file.Endpoints[i].headers("k")
		}
	})
}

func TestExampleFileIsValid(t *testing.T) {
	t.Parallel()
	f, err := Load("../../rank.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Endpoints) != 3 || f.Workload.Rounds != 3 || f.Endpoints[0].Price.Cached() != 0.025 {
		t.Errorf("example: %+v", f)
	}
}

// An answer without usage is costed on cl100k_base's counts and marked;
// two content events give no speed; the report warns of both, and of
// answers of unequal length.
func TestNoUsage(t *testing.T) {
	t.Parallel()
	p := Price{Input: 1, Output: 10}
	r := &bench.Result{Status: 200, TTFT: 40 * time.Millisecond, LastToken: 41 * time.Millisecond, UsageTokens: -1, PromptTokens: -1, CachedTokens: -1,
		InputTokens: 32, OutputTokens: 2, ContentEvents: 2}
	row := requestOf(r, p, nil)
	if !row.Counted || row.PromptTokens != 32 || row.OutputTokens != 2 || row.Cost != (32+20)/1e6 || row.Speed != 0 {
		t.Errorf("row %+v: want counted tokens, their cost, and no speed", row)
	}
	short := &Result{Name: "short"}
	long := &Result{Name: "long"}
	for range 20 {
		short.Requests = append(short.Requests, row)
		long.Requests = append(long.Requests, Request{OK: true, PromptTokens: 40, CachedTokens: 0, OutputTokens: 8, TTFT: 40, Speed: 100})
	}
	for _, x := range []*Result{short, long} {
		x.Figures = figures(x, Workload{}, nil, 0.9)
	}
	if short.Figures.UsageMissing != 20 || !math.IsNaN(short.Figures.SpeedP50.Value) {
		t.Errorf("short: %+v", short.Figures)
	}
	ws := strings.Join(warnings([]*Result{short, long}), "\n")
	if !strings.Contains(ws, "short returned no usage in 20 of 20 answers") || !strings.Contains(ws, "answers differ in length (short 2.0 output tokens a request, long 8.0)") {
		t.Errorf("warnings:\n%s", ws)
	}
}

// An endpoint that answers every request with 429 and Retry-After is
// held, not hammered, and stopped once its holds pass the round's budget;
// the run goes on and ends without error.
func TestHoldBudget(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":{"message":"slow down","type":"rate_limit_error"}}`))
	}))
	defer srv.Close()
	f, err := decode(t, "endpoints:\n  - {name: busy, url: \""+srv.URL+"/v1\", model: m}\nworkload: {input_tokens: \"8\", output_tokens: \"4\", concurrency: 2, requests: 8, probes: 1, rounds: 3}\n")
	if err != nil {
		t.Fatal(err)
	}
	f.Workload.Defaults()
	start := time.Now()
	rec, err := Run(context.Background(), f, Options{Keys: []string{""}, HoldBudget: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := rec.Endpoints[0]
	if !strings.Contains(e.Stopped, "round 0: rate limited past the round's Retry-After budget") || len(e.Rounds) != 1 {
		t.Errorf("stopped %q after %d rounds: want stopped in round 0", e.Stopped, len(e.Rounds))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the run took %v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	// A gap is a burst's (the two workers' requests, each sent at once:
	// well under a second even on a loaded machine) or a hold's (the
	// Retry-After's second); one in between is a request sent inside a
	// hold.
	for i := 1; i < len(arrivals); i++ {
		if gap := arrivals[i].Sub(arrivals[i-1]); gap > 250*time.Millisecond && gap < 900*time.Millisecond {
			t.Errorf("request %d came %v after the last: inside its Retry-After", i, gap)
		}
	}
	if e.Figures.Availability != 0 || e.Figures.Errors[ClassRateLimit] == 0 {
		t.Errorf("figures %+v", e.Figures)
	}
}

// A record edited by hand (a place without its endpoint, figures gone)
// reports without a panic.
func TestEditedRecord(t *testing.T) {
	t.Parallel()
	r := &Record{Schema: schema, Ranking: []Place{{Rank: 1, Name: "ghost"}}, Endpoints: []*Result{{Name: "real"}}}
	var b bytes.Buffer
	r.Write(&b)
	if err := r.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&b, []*Record{r, r}, Drift([]*Record{r, r}, DriftOptions{})); err != nil {
		t.Fatal(err)
	}
	WriteHistory(&b, []*Record{r, r}, nil)
}

// An endpoint that answered nothing still makes a record that saves.
func TestNoAnswerSaves(t *testing.T) {
	t.Parallel()
	r := run(time.Now(), result("dead", 10, 10, 0, 0, 1))
	if err := r.Save(filepath.Join(t.TempDir(), r.FileName())); err != nil {
		t.Fatal(err)
	}
}

package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
	"github.com/infergate/infergate/tracing"
)

// classesConfig is a gateway with classes on in front of url: tenant
// "gold" (key sk-gold) may ask for priority, "basic" (sk-basic) for
// default at most, everyone else likewise.
func classesConfig(url string) Config {
	cfg := testConfig(url)
	cfg.Classes = ClassesConfig{Classes: shaping.Classes{Enabled: true}}
	cfg.Tenants = map[string]TenantConfig{
		"gold":  {Tenant: policy.Tenant{APIKeys: []string{"sk-gold"}}, MaxClass: "priority"},
		"basic": {Tenant: policy.Tenant{APIKeys: []string{"sk-basic"}}},
	}
	return cfg
}

func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// A tenant cannot raise its class above its ceiling: lowered (and said
// so) by default, refused with above_ceiling refuse; the answer echoes
// the class served in a header and, where the request set service_tier,
// in the body.
func TestClassCeiling(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	gw := startGateway(t, classesConfig(b.URL))
	tier := `{"model":"m","service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`

	code, h, body := post(t, gw.URL, "/v1/chat/completions", tier, bearer("sk-basic")...)
	if code != 200 || h.Get("X-Infergate-Class") != "default" || h.Get("X-Infergate-Class-Lowered") != "priority->default" {
		t.Fatalf("basic asking priority: %d class %q lowered %q", code, h.Get("X-Infergate-Class"), h.Get("X-Infergate-Class-Lowered"))
	}
	var r struct {
		ServiceTier string `json:"service_tier"`
	}
	if json.Unmarshal([]byte(body), &r); r.ServiceTier != "default" {
		t.Errorf("body's service_tier %q, want default: %s", r.ServiceTier, body)
	}
	code, h, body = post(t, gw.URL, "/v1/chat/completions", tier, bearer("sk-gold")...)
	if json.Unmarshal([]byte(body), &r); code != 200 || h.Get("X-Infergate-Class") != "priority" || h.Get("X-Infergate-Class-Lowered") != "" || r.ServiceTier != "priority" {
		t.Errorf("gold asking priority: %d %q %q %s", code, h.Get("X-Infergate-Class"), h.Get("X-Infergate-Class-Lowered"), body)
	}
	// The header asks too; without service_tier the body is left alone.
	code, h, body = post(t, gw.URL, "/v1/chat/completions", plainBody, append(bearer("sk-basic"), "X-Infergate-Class", "priority")...)
	if code != 200 || h.Get("X-Infergate-Class") != "default" || h.Get("X-Infergate-Class-Lowered") != "priority->default" || strings.Contains(body, "service_tier") {
		t.Errorf("basic asking priority by header: %d %q %q %s", code, h.Get("X-Infergate-Class"), h.Get("X-Infergate-Class-Lowered"), body)
	}
	code, h, _ = post(t, gw.URL, "/v1/chat/completions", plainBody, append(bearer("sk-basic"), "X-Infergate-Class", "flex")...)
	if code != 200 || h.Get("X-Infergate-Class") != "flex" {
		t.Errorf("flex by header: %d %q", code, h.Get("X-Infergate-Class"))
	}
	// The body wins over the header.
	code, h, _ = post(t, gw.URL, "/v1/chat/completions", `{"model":"m","service_tier":"flex","messages":[]}`, append(bearer("sk-gold"), "X-Infergate-Class", "priority")...)
	if code != 200 || h.Get("X-Infergate-Class") != "flex" {
		t.Errorf("body flex, header priority: %d %q", code, h.Get("X-Infergate-Class"))
	}

	cfg := classesConfig(b.URL)
	cfg.Classes.AboveCeiling = "refuse"
	gw2 := startGateway(t, cfg)
	before := b.requests.Load()
	code, _, body = post(t, gw2.URL, "/v1/chat/completions", tier, bearer("sk-basic")...)
	if _, c := errorBody(t, body); code != http.StatusForbidden || c != "class_not_allowed" {
		t.Errorf("refuse mode: %d %s", code, body)
	}
	code, _, _ = post(t, gw2.URL, "/v1/chat/completions", plainBody, append(bearer("sk-basic"), "X-Infergate-Class", "priority")...)
	if code != http.StatusForbidden {
		t.Errorf("refuse mode, header: %d", code)
	}
	if n := b.requests.Load() - before; n != 0 {
		t.Errorf("the backend saw %d refused requests", n)
	}
}

// Hostile class values are bounded and refused with 400, never echoed,
// and never reach the backend.
func TestClassHostileValues(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{}`))
	gw := startGateway(t, classesConfig(b.URL))
	long := strings.Repeat("priority", 300)
	for _, c := range []struct {
		name, body string
		hdr        []string
		param      string
	}{
		{"long header", plainBody, []string{"X-Infergate-Class", long}, ""},
		{"unknown header", plainBody, []string{"X-Infergate-Class", "gold"}, ""},
		{"case", plainBody, []string{"X-Infergate-Class", "Priority"}, ""},
		{"long tier", `{"model":"m","service_tier":"` + long + `","messages":[]}`, nil, "service_tier"},
		{"unknown tier", `{"model":"m","service_tier":"scale","messages":[]}`, nil, "service_tier"},
		{"number tier", `{"model":"m","service_tier":1,"messages":[]}`, nil, "service_tier"},
		{"escaped tier", `{"model":"m","service_tier":"fle\u0078","messages":[]}`, nil, "service_tier"},
	} {
		code, _, body := post(t, gw.URL, "/v1/chat/completions", c.body, c.hdr...)
		var e struct {
			Error struct {
				Type  string  `json:"type"`
				Param *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != 400 || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", c.name, code, body)
			continue
		}
		if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
			t.Errorf("%s: param %v, want %s", c.name, e.Error.Param, c.param)
		}
		if len(body) > 512 || strings.Contains(body, "prioritypriority") {
			t.Errorf("%s: the value is echoed: %s", c.name, body)
		}
	}
	// The same header twice.
	req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", strings.NewReader(plainBody))
	req.Header["X-Infergate-Class"] = []string{"flex", "priority"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("repeated header: %d", resp.StatusCode)
	}
	if n := b.requests.Load(); n != 0 {
		t.Errorf("the backend saw %d refused requests", n)
	}
	// auto and null are the tenant's default.
	for _, body := range []string{`{"model":"m","service_tier":"auto","messages":[]}`, `{"model":"m","service_tier":null,"messages":[]}`} {
		if code, h, resp := post(t, gw.URL, "/v1/chat/completions", body); code != 200 || h.Get("X-Infergate-Class") != "default" {
			t.Errorf("%s: %d %q %s", body, code, h.Get("X-Infergate-Class"), resp)
		}
	}
}

// holdBackend streams: a request whose body contains "hold-first" sends
// its headers and then nothing until its client (the gateway) closes the
// connection; one with "hold-after" sends one event first. closed
// receives the time each held request's connection closed. Any other
// request is answered at once.
func holdBackend(t *testing.T) (*testBackend, chan time.Time) {
	closed := make(chan time.Time, 8)
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		first, after := strings.Contains(string(body), "hold-first"), strings.Contains(string(body), "hold-after")
		if !first && !after {
			sseHandler(2, 0)(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		if after {
			io.WriteString(w, chunk("first"))
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			closed <- time.Now()
		case <-time.After(10 * time.Second):
		}
	})
	return b, closed
}

func heldBody(marker string) string {
	return `{"model":"m","stream":true,"service_tier":"flex","messages":[{"role":"user","content":"` + marker + `"}]}`
}

const priorityStream = `{"model":"m","stream":true,"service_tier":"priority","messages":[{"role":"user","content":"now"}]}`

// waitRequests waits for the backend to have seen n requests.
func waitRequests(t *testing.T, b *testBackend, n int64) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d backend requests", n), func() bool { return b.requests.Load() >= n })
}

// A flex request that has sent nothing to its client is preempted for a
// priority request that must queue: its backend connection is closed
// (the engine aborts it), it is answered 503 with the reason, and the
// priority request runs in its slot.
func TestPreemptBeforeFirstByteCancelsUpstream(t *testing.T) {
	t.Parallel()
	b, closed := holdBackend(t)
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	gw := startGateway(t, cfg)
	type answer struct {
		code int
		h    http.Header
		body string
	}
	flex := make(chan answer, 1)
	go func() {
		c, h, body := send(gw.URL, heldBody("hold-first"), bearer("sk-gold")...)
		flex <- answer{c, h, body}
	}()
	waitRequests(t, b, 1)
	start := time.Now()
	code, h, body := send(gw.URL, priorityStream, bearer("sk-gold")...)
	if code != 200 || h.Get("X-Infergate-Class") != "priority" || !strings.Contains(body, "[DONE]") {
		t.Fatalf("priority: %d %q %s", code, h.Get("X-Infergate-Class"), body)
	}
	f := <-flex
	if _, c := errorBody(t, f.body); f.code != 503 || c != "preempted" || f.h.Get("X-Infergate-Preempted") != "priority" ||
		f.h.Get("X-Infergate-Refusal") != "preempted" || f.h.Get("Retry-After") == "" || f.h.Get("X-Infergate-Class") != "flex" {
		t.Errorf("flex: %d %v %s", f.code, f.h, f.body)
	}
	select {
	case at := <-closed:
		if d := at.Sub(start); d > time.Second {
			t.Errorf("the backend saw the preempted request end %v after the priority request came", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend never saw the preempted request's connection close")
	}
	waitFor(t, 2*time.Second, "slots given back", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	if s := gw.lim.Stats().Classes[shaping.ClassFlex]; s.Preempted != 1 {
		t.Errorf("flex stats %+v", s)
	}
}

// After its first byte a flex stream is never preempted: the priority
// request waits (here past its queue_timeout) and the stream is whole.
func TestNoPreemptionAfterFirstByteOverHTTP(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "slow") {
			sseHandler(6, 100*time.Millisecond)(w, r)
			return
		}
		sseHandler(1, 0)(w, r)
	})
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	cfg.Classes.Priority.QueueTimeout = 200 * time.Millisecond
	gw := startGateway(t, cfg)
	flex := make(chan string, 1)
	go func() {
		_, _, body := send(gw.URL, heldBody("slow"), bearer("sk-gold")...)
		flex <- body
	}()
	waitRequests(t, b, 1)
	time.Sleep(150 * time.Millisecond) // its first event is out
	code, h, _ := send(gw.URL, priorityStream, bearer("sk-gold")...)
	if code != 503 || h.Get("X-Infergate-Refusal") != "queue_timeout" {
		t.Errorf("priority: %d refusal %q", code, h.Get("X-Infergate-Refusal"))
	}
	if body := <-flex; !strings.Contains(body, "[DONE]") || strings.Contains(body, "preempted") {
		t.Errorf("the flex stream was cut: %s", body)
	}
}

// With mid-stream eviction a flex stream past its first byte is
// preempted: it ends with an SSE error event (code preempted, no
// [DONE]), its backend connection closes, and its slot is released once.
func TestMidStreamEviction(t *testing.T) {
	t.Parallel()
	b, closed := holdBackend(t)
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	cfg.Classes.MidStreamEviction = true
	gw := startGateway(t, cfg)
	defer func() {
		gw.syncTelemetry()
		if !strings.Contains(gw.logs.String(), "class=flex refusal=preempted") {
			t.Errorf("the evicted stream's log line names no refusal:\n%s", gw.logs.String())
		}
	}()
	conn, br := rawStream(t, gw.Addr, heldBody("hold-after"))
	defer conn.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flex stream: %v %v", resp, err)
	}
	rd := bufio.NewReader(resp.Body)
	line, _ := rd.ReadString('\n')
	if !strings.Contains(line, "first") {
		t.Fatalf("first event %q", line)
	}
	code, _, body := send(gw.URL, priorityStream, bearer("sk-gold")...)
	if code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("priority: %d %s", code, body)
	}
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), `"code":"preempted"`) || strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the flex stream ended %q", rest)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend never saw the evicted stream's connection close")
	}
	waitFor(t, 2*time.Second, "slots given back", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	// Released once: another request gets the one slot, and only one.
	if code, _, _ := send(gw.URL, priorityStream, bearer("sk-gold")...); code != 200 {
		t.Errorf("after the eviction: %d", code)
	}
	if s := gw.lim.Stats(); s.InFlightRequests != 0 || s.Classes[shaping.ClassFlex].Preempted != 1 {
		t.Errorf("after: %d in flight, %+v", s.InFlightRequests, s.Classes[shaping.ClassFlex])
	}
}

// A full queue sheds the lowest class's newest waiter for a higher class
// (503, code shed); every request is answered or refused with a reason,
// none hangs, and the counts add up.
func TestShedAndTotalsOverHTTP(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
		sseHandler(1, 0)(w, r)
	})
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 2
	cfg.Shaping.Queue = shaping.QueueConfig{MaxWaiting: 4, MaxWaitingPerTenant: -1, Timeout: 5 * time.Second}
	cfg.Classes.Preempt = preemptOff // shedding alone
	logPath := filepath.Join(t.TempDir(), "requests.jsonl")
	cfg.RequestLog = tracing.LogConfig{Path: logPath}
	gw := startGateway(t, cfg)
	var wg sync.WaitGroup
	var ok, shed, other atomic.Int64
	counts := map[string]*atomic.Int64{}
	var mu sync.Mutex
	for i := range 60 {
		tier := shaping.ClassesByRank[i%3].String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","stream":true,"service_tier":%q,"messages":[{"role":"user","content":"%d"}]}`, tier, i)
			code, h, resp := send(gw.URL, body, bearer("sk-gold")...)
			switch {
			case code == 200 && strings.Contains(resp, "[DONE]"):
				ok.Add(1)
			case (code == 503 || code == 429) && h.Get("X-Infergate-Refusal") != "" && h.Get("Retry-After") != "":
				mu.Lock()
				if counts[h.Get("X-Infergate-Refusal")] == nil {
					counts[h.Get("X-Infergate-Refusal")] = new(atomic.Int64)
				}
				counts[h.Get("X-Infergate-Refusal")].Add(1)
				mu.Unlock()
				if h.Get("X-Infergate-Refusal") == "shed" {
					shed.Add(1)
					if h.Get("X-Infergate-Class") == "priority" {
						t.Error("a priority request was shed")
					}
				}
			default:
				other.Add(1)
				t.Errorf("%s: %d %v %s", tier, code, h, resp)
			}
		}()
	}
	wg.Wait()
	if other.Load() != 0 || ok.Load() == 0 {
		t.Errorf("ok %d, other %d", ok.Load(), other.Load())
	}
	s := gw.lim.Stats()
	var sheds int64
	for _, c := range s.Classes {
		sheds += c.Shed
	}
	if sheds != shed.Load() {
		t.Errorf("the limiter shed %d, clients were told %d", sheds, shed.Load())
	}
	if s.InFlightRequests != 0 || s.Waiting != 0 {
		t.Errorf("after: %+v", s)
	}
	if s.Classes[shaping.ClassPriority].Shed != 0 {
		t.Error("priority shed")
	}
	// The metrics say the same (names kept stable for top and dashboards).
	_, _, m := do(t, "GET", gw.AdminURL+"/metrics", "")
	var metricSheds float64
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "infergate_class_shed_total{") {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			metricSheds += v
		}
	}
	// The request log has every request once, with its class, and the
	// refused ones with their reason.
	var entries []tracing.Entry
	waitFor(t, 2*time.Second, "60 request-log lines", func() bool {
		b, _ := os.ReadFile(logPath)
		entries = entries[:0]
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e tracing.Entry
			if json.Unmarshal([]byte(l), &e) == nil {
				entries = append(entries, e)
			}
		}
		return len(entries) == 60
	})
	var logOK, logShed, logRefused int64
	for _, e := range entries {
		switch {
		case e.Class == "":
			t.Errorf("a log entry without its class: %+v", e)
		case e.Status == 200:
			logOK++
		case e.Refusal == "":
			t.Errorf("a refused entry without its reason: %+v", e)
		default:
			logRefused++
			if e.Refusal == "shed" {
				logShed++
			}
		}
	}
	if logOK != ok.Load() || logShed != shed.Load() || logOK+logRefused != 60 {
		t.Errorf("request log: %d ok, %d shed, %d refused; clients saw %d ok, %d shed", logOK, logShed, logRefused, ok.Load(), shed.Load())
	}
	if int64(metricSheds) != sheds || !strings.Contains(m, "infergate_class_queue_time_seconds_bucket") || !strings.Contains(m, "infergate_class_admitted_total") ||
		!strings.Contains(m, `infergate_class_requests_total{class="priority",outcome="ok"`) || !strings.Contains(m, "infergate_class_ttft_seconds_bucket") {
		t.Errorf("metrics: %v sheds (limiter %d), or class metrics missing", metricSheds, sheds)
	}
}

// A pool with class_priority passes the class to the engine in its
// convention; a default request is sent as it came.
func TestClassReachesEngine(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{}`))
	for _, c := range []struct{ mode, tier, want string }{
		{"vllm", "priority", `"priority":-1`}, {"vllm", "flex", `"priority":1`}, {"vllm", "default", ""},
		{"sglang", "priority", `"priority":1`}, {"sglang", "flex", `"priority":-1`}, {"none", "priority", ""},
	} {
		cfg := classesConfig(b.URL)
		pc := cfg.Pools["p"]
		pc.ClassPriority = c.mode
		cfg.Pools["p"] = pc
		gw := startGateway(t, cfg)
		code, _, _ := post(t, gw.URL, "/v1/chat/completions", `{"model":"m","service_tier":"`+c.tier+`","messages":[]}`, bearer("sk-gold")...)
		_, got := b.last()
		if code != 200 || (c.want == "" && strings.Contains(got, `"priority":`)) || (c.want != "" && !strings.Contains(got, c.want)) {
			t.Errorf("%s %s: %d, backend got %s", c.mode, c.tier, code, got)
		}
	}
}

func FuzzParseClassValue(f *testing.F) {
	for _, s := range []string{"priority", `"flex"`, `"auto"`, "auto", `""`, `"`, `"\u0066lex"`, strings.Repeat("x", 40)} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, v []byte, quoted bool) {
		c, set, ok := parseClassValue(v, quoted)
		if !ok {
			return
		}
		name := string(v)
		if quoted {
			name = name[1 : len(name)-1]
		}
		if set != (name != "auto") || (set && c.String() != name) {
			t.Fatalf("%q quoted=%v: %s set=%v", v, quoted, c, set)
		}
	})
}

// simGauge reads one of the simulator's vLLM gauges from its /metrics.
func simGauge(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			return v
		}
	}
	t.Fatalf("%s not in the simulator's metrics", name)
	return 0
}

// On the simulator (one sequence at a time, a slow prefill): a flex
// request in prefill is preempted for a priority request, the engine
// aborts it at once (the priority request is answered long before the
// flex prompt's prefill would have ended), and the engine's running
// count goes back to 0 once the priority request is done.
func TestPreemptionFreesTheSimulator(t *testing.T) {
	t.Parallel()
	sc := sim.DefaultConfig()
	sc.Model = "m"
	sc.Engine.MaxNumSeqs = 1
	sc.Engine.PrefillTokensPerS = 100
	sc.Engine.MaxBatchedTokens = 32 // chunked prefill: steps of 0.32 s
	sc.Engine.PrefixCaching = false
	s := simtest.Start(t, sc)
	cfg := classesConfig(s.URL)
	cfg.Shaping.Global.MaxRequests = 1
	gw := startGateway(t, cfg)
	long := strings.Repeat("the flex batch job's long prompt ", 60)
	flex := make(chan int, 1)
	go func() {
		c, _, _ := send(gw.URL, `{"model":"m","stream":true,"max_tokens":4,"service_tier":"flex","messages":[{"role":"user","content":"`+long+`"}]}`)
		flex <- c
	}()
	waitFor(t, 5*time.Second, "the flex request running", func() bool { return simGauge(t, s.URL, "vllm:num_requests_running") == 1 })
	start := time.Now()
	// The engine's running count drops as soon as it sees the close.
	dropped := make(chan time.Duration, 1)
	go func() {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if simGauge(t, s.URL, "vllm:num_requests_running") == 0 {
				dropped <- time.Since(start)
				return
			}
		}
		dropped <- -1
	}()
	code, _, body := send(gw.URL, `{"model":"m","stream":true,"max_tokens":2,"service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`, bearer("sk-gold")...)
	took := time.Since(start)
	if code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("priority: %d %s", code, body)
	}
	if c := <-flex; c != 503 {
		t.Errorf("flex: %d, want 503 preempted", c)
	}
	if d := <-dropped; d < 0 || d > 100*time.Millisecond {
		t.Errorf("the engine's running count dropped %v after the priority request came (-1: never), want within 100ms", d)
	}
	// The flex prompt (some 400 tokens at 100 a second) would hold the
	// engine's one sequence for seconds; aborted, it gives the engine up
	// at the end of the step in flight.
	if took > time.Second {
		t.Errorf("the priority request took %v: the engine did not abort the preempted one", took)
	}
	waitFor(t, time.Second, "the engine idle", func() bool { return simGauge(t, s.URL, "vllm:num_requests_running") == 0 })
}

// Saturated with priority requests (always some waiting), back-to-back
// flex clients still get the stated share: one grant in lower_share (10)
// while they wait. Counted, not timed.
func TestFlexShareUnderPrioritySaturation(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		jsonHandler(200, `{}`)(w, r)
	})
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	cfg.Shaping.Queue = shaping.QueueConfig{MaxWaiting: 100, MaxWaitingPerTenant: -1, Timeout: 30 * time.Second}
	gw := startGateway(t, cfg)
	var served [shaping.NumClasses]atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for i := range 8 {
		c := shaping.ClassPriority
		if i < 2 {
			c = shaping.ClassFlex
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 2000 && time.Now().Before(deadline); n++ {
				code, h, _ := send(gw.URL, `{"model":"m","service_tier":"`+c.String()+`","messages":[]}`, bearer("sk-gold")...)
				switch {
				case code == 200:
					served[c].Add(1)
				case c == shaping.ClassFlex && h.Get("X-Infergate-Refusal") == "preempted":
					// Granted while no priority request waited, then
					// preempted for one: not the share's grant.
				default:
					t.Errorf("%s: %d", c, code)
					return
				}
			}
		}()
	}
	wg.Wait()
	p, f := served[shaping.ClassPriority].Load(), served[shaping.ClassFlex].Load()
	share := float64(f) / float64(p+f)
	t.Logf("priority %d, flex %d: flex share %.3f", p, f, share)
	// Six priority clients keep the queue full of priority: flex gets its
	// 1 in 10 (a little more when no priority request happens to wait).
	if p+f < 50 || share < 0.07 || share > 0.3 {
		t.Errorf("flex got %.3f of %d grants, want about 0.1", share, p+f)
	}
}

// With preempt requeue, a flex request preempted before its first byte
// is cancelled at the backend and goes back to the queue: once the
// priority request is done it runs again and is answered 200, saying it
// was requeued.
func TestPreemptRequeue(t *testing.T) {
	t.Parallel()
	var flexSeen atomic.Int64
	closed := make(chan struct{}, 4)
	b := newTestBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "hold-first") && flexSeen.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				closed <- struct{}{}
			case <-time.After(10 * time.Second):
			}
			return
		}
		sseHandler(2, 0)(w, r)
	})
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 1
	cfg.Classes.Preempt = preemptRequeue
	gw := startGateway(t, cfg)
	type answer struct {
		code int
		h    http.Header
		body string
	}
	flex := make(chan answer, 1)
	go func() {
		c, h, body := send(gw.URL, heldBody("hold-first"))
		flex <- answer{c, h, body}
	}()
	waitRequests(t, b, 1)
	if code, _, body := send(gw.URL, priorityStream, bearer("sk-gold")...); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("priority: %d %s", code, body)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend never saw the preempted attempt's connection close")
	}
	f := <-flex
	if f.code != 200 || !strings.Contains(f.body, "[DONE]") || f.h.Get("X-Infergate-Requeued") != "1" || f.h.Get("X-Infergate-Class") != "flex" {
		t.Errorf("flex: %d %v %s", f.code, f.h, f.body)
	}
	if n := flexSeen.Load(); n != 2 {
		t.Errorf("the backend saw the flex request %d times, want 2", n)
	}
	waitFor(t, 2*time.Second, "slots given back", func() bool { return gw.lim.Stats().InFlightRequests == 0 })
	if s := gw.lim.Stats(); s.Classes[shaping.ClassFlex].Preempted != 1 || s.Classes[shaping.ClassFlex].Admitted != 2 {
		t.Errorf("flex stats %+v", s.Classes[shaping.ClassFlex])
	}
}

// Bad classes settings are refused by name.
func TestClassesConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		want string
		edit func(*Config)
	}{
		{"classes.preempt", func(c *Config) { c.Classes.Preempt = "sometimes" }},
		{"mid_stream_eviction", func(c *Config) { c.Classes.Preempt, c.Classes.MidStreamEviction = preemptRequeue, true }},
		{"classes.header", func(c *Config) { c.Classes.Header = "x class" }},
		{"classes.lower_share", func(c *Config) { c.Classes.LowerShare = 1 }},
		{"classes.above_ceiling", func(c *Config) { c.Classes.AboveCeiling = "maybe" }},
		{"pools.p.class_priority", func(c *Config) { pc := c.Pools["p"]; pc.ClassPriority = "tgi"; c.Pools["p"] = pc }},
		{"tenants.gold.max_class", func(c *Config) { c.Tenants["gold"] = TenantConfig{MaxClass: "platinum"} }},
		{"default_class", func(c *Config) { c.Tenants["gold"] = TenantConfig{DefaultClass: "priority", MaxClass: "default"} }},
		{"leave flex nothing of global.max_requests 4", func(c *Config) {
			c.Shaping.Global.MaxRequests = 4
			c.Classes.Priority.Reserved, c.Classes.Default.Reserved = 3, 1
		}},
		{"nothing is below flex", func(c *Config) { c.Classes.Flex.Reserved = 1 }},
	} {
		cfg := classesConfig("http://127.0.0.1:1")
		c.edit(&cfg)
		_, err := New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}

// Classes turned on by a reload apply to the next request; turned off,
// service_tier passes through untouched and no class header is sent.
func TestClassesByReload(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, jsonHandler(200, `{"id":"x"}`))
	off := testConfig(b.URL)
	gw := startGateway(t, off)
	tier := `{"model":"m","service_tier":"flex","messages":[]}`
	if code, h, body := post(t, gw.URL, "/v1/chat/completions", tier); code != 200 || h.Get("X-Infergate-Class") != "" || strings.Contains(body, "service_tier") {
		t.Fatalf("classes off: %d %q %s", code, h.Get("X-Infergate-Class"), body)
	}
	if _, got := b.last(); !strings.Contains(got, `"service_tier":"flex"`) {
		t.Errorf("classes off: the backend got %s", got)
	}
	if err := gw.Reload(classesConfig(b.URL)); err != nil {
		t.Fatal(err)
	}
	if code, h, body := post(t, gw.URL, "/v1/chat/completions", tier); code != 200 || h.Get("X-Infergate-Class") != "flex" || !strings.Contains(body, `"service_tier":"flex"`) {
		t.Errorf("after the reload: %d %q %s", code, h.Get("X-Infergate-Class"), body)
	}
	if err := gw.Reload(testConfig(b.URL)); err != nil {
		t.Fatal(err)
	}
	if code, h, _ := post(t, gw.URL, "/v1/chat/completions", tier); code != 200 || h.Get("X-Infergate-Class") != "" {
		t.Errorf("off again: %d %q", code, h.Get("X-Infergate-Class"))
	}
	if s := gw.lim.Stats(); s.InFlightRequests != 0 {
		t.Errorf("%d in flight", s.InFlightRequests)
	}
}

// With priority reserving 1 of a cap of 3, two flex streams running and a
// third flex request waiting (the reserve keeps it out), a priority
// request is served at once, past the waiter; the flex waiter times out
// and the backend never holds more than 2 flex requests.
func TestReservedCapacityOverHTTP(t *testing.T) {
	t.Parallel()
	b, _ := holdBackend(t)
	cfg := classesConfig(b.URL)
	cfg.Shaping.Global.MaxRequests = 3
	cfg.Classes.Priority.Reserved = 1
	cfg.Classes.Flex.QueueTimeout = 600 * time.Millisecond
	gw := startGateway(t, cfg)
	for range 2 {
		go send(gw.URL, heldBody("hold-after"), bearer("sk-gold")...)
	}
	waitRequests(t, b, 2)
	third := make(chan int, 1)
	go func() {
		code, _, _ := send(gw.URL, heldBody("hold-after"), bearer("sk-gold")...)
		third <- code
	}()
	waitFor(t, 2*time.Second, "the third flex request waiting", func() bool { return gw.lim.Stats().Waiting == 1 })
	start := time.Now()
	code, h, body := send(gw.URL, priorityStream, bearer("sk-gold")...)
	if code != 200 || h.Get("X-Infergate-Class") != "priority" || !strings.Contains(body, "[DONE]") {
		t.Fatalf("priority beside 2 flex of 3 with 1 reserved: %d %q %s", code, h.Get("X-Infergate-Class"), body)
	}
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Errorf("priority took %v: it waited behind the flex waiter", d)
	}
	if c := <-third; c != 503 {
		t.Errorf("the third flex request, with 1 of 3 reserved for priority: %d, want 503 (queue timeout)", c)
	}
	if n := b.requests.Load(); n != 3 {
		t.Errorf("the backend saw %d requests, want 3 (2 flex, 1 priority)", n)
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/verdict"
)

func TestParseClassMix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string // want: the canonical form, or "error"
	}{
		{"the issue's mix", "priority=0.2,default=0.5,flex=0.3", "priority=0.2,default=0.5,flex=0.3"},
		{"normalised", "flex=1,priority=1", "priority=0.5,flex=0.5"},
		{"spaces", " priority = 2 , default=2 ", "priority=0.5,default=0.5"},
		{"a zero weight is left out", "priority=0,default=1", "default=1"},
		{"auto", "auto=3,flex=1", "flex=0.25,auto=0.75"},
		{"empty is none", "", ""},
		{"unknown class", "gold=1", "error"},
		{"class twice", "flex=1,flex=2", "error"},
		{"negative", "flex=-1,default=2", "error"},
		{"all zero", "flex=0,default=0", "error"},
		{"NaN", "flex=NaN", "error"},
		{"infinite", "flex=Inf", "error"},
		{"sum overflows", "flex=1e308,default=1e308", "error"},
		{"no weight", "flex", "error"},
		{"empty part", "flex=1,,default=1", "error"},
		{"too long", "flex=1" + strings.Repeat(" ", maxClassMix), "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseClassMix(tc.in)
			switch {
			case tc.want == "error" && err == nil:
				t.Errorf("parseClassMix(%q) = %v, want an error", tc.in, m)
			case tc.want != "error" && err != nil:
				t.Errorf("parseClassMix(%q): %v", tc.in, err)
			case tc.want != "error" && m.String() != tc.want:
				t.Errorf("parseClassMix(%q) = %s, want %s", tc.in, m, tc.want)
			}
		})
	}
}

func FuzzClassMix(f *testing.F) {
	for _, s := range []string{"priority=0.2,default=0.5,flex=0.3", "flex=1", "auto=1e-300,flex=1e300", "=", ",", "flex=0x1p3", "default=1,default=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseClassMix(s)
		if err != nil {
			if len(err.Error()) > 600 {
				t.Fatalf("error of %d bytes for %d of input", len(err.Error()), len(s))
			}
			return
		}
		if strings.TrimSpace(s) == "" {
			if !m.none() {
				t.Fatalf("%q: a mix from nothing: %v", s, m)
			}
			return
		}
		sum := 0.0
		for _, v := range m {
			if v < 0 || math.IsNaN(v) {
				t.Fatalf("%q: share %v", s, v)
			}
			sum += v
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("%q: shares sum to %v", s, sum)
		}
		// The canonical form reads back as (nearly) the same mix.
		again, err := parseClassMix(m.String())
		if err != nil {
			t.Fatalf("%q: canonical %q does not parse: %v", s, m.String(), err)
		}
		for i := range m {
			if math.Abs(again[i]-m[i]) > 1e-3 {
				t.Fatalf("%q: canonical %q reads as %v, not %v", s, m.String(), again, m)
			}
		}
		for i := range 50 {
			if k := m.pick(7, i); m[k] <= 0 {
				t.Fatalf("%q: drew class %s of share 0", s, Classes[k])
			}
		}
	})
}

// TestClassMixDraws: the draw is the seed's and the index's alone, and
// over many requests each class gets its share.
func TestClassMixDraws(t *testing.T) {
	t.Parallel()
	m, err := parseClassMix("priority=0.2,default=0.5,flex=0.3")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	var got [len(Classes)]int
	for i := range n {
		k := m.pick(42, i)
		if m.pick(42, i) != k {
			t.Fatalf("request %d drew two classes", i)
		}
		got[k]++
	}
	for k, share := range m {
		if d := math.Abs(float64(got[k])/n - share); d > 0.015 {
			t.Errorf("%s: %d of %d, want a share of %v", Classes[k], got[k], n, share)
		}
	}
	differ := 0
	for i := range 200 {
		if m.pick(42, i) != m.pick(43, i) {
			differ++
		}
	}
	if differ < 50 {
		t.Errorf("seeds 42 and 43 drew the same class for %d of 200 requests", 200-differ)
	}
}

func TestWithServiceTier(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"object", `{"model":"m"}`, `{"service_tier":"flex","model":"m"}`},
		{"empty object", `{}`, `{"service_tier":"flex"}`},
		{"spaces", " { } ", `{"service_tier":"flex" } `},
		{"replaces a replayed one", `{"service_tier":"priority","model":"m"}`, `{"model":"m","service_tier":"flex"}`},
		{"not an object", `[1]`, `[1]`},
	}
	for _, tc := range tests {
		in := []byte(tc.in)
		got := string(withServiceTier(in, "flex"))
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		if string(in) != tc.in {
			t.Errorf("%s: the workload's own body changed to %s", tc.name, in)
		}
		if json.Valid([]byte(tc.in)) && !json.Valid([]byte(got)) {
			t.Errorf("%s: %s is not JSON", tc.name, got)
		}
	}
}

// TestSessionsKeepTheirClass: every turn of a session sends its class.
func TestSessionsKeepTheirClass(t *testing.T) {
	t.Parallel()
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	spec := WorkloadSpec{Endpoint: "chat", Model: "m", Stream: true, InputTokens: "16", OutputTokens: "4", Seed: 3, Sessions: true, Turns: 3, ClassMix: "priority=1,flex=1"}
	w, err := newWorkload(&spec, tok)
	if err != nil {
		t.Fatal(err)
	}
	sw, ok := w.(sessionWorkload)
	if !ok {
		t.Fatal("a session workload with a class mix is no session workload")
	}
	seen := map[string]bool{}
	for u := range 20 {
		class := ""
		for _, tn := range sw.Session(u) {
			r := sw.Turn(u, nil, tn)
			if class == "" {
				class = r.Class
			}
			if r.Class != class || !bytes.Contains(r.Body, []byte(`"service_tier":"`+class+`"`)) {
				t.Fatalf("session %d: turn of class %s (body %.80s), its first was %s", u, r.Class, r.Body, class)
			}
		}
		seen[class] = true
	}
	if !seen["priority"] || !seen["flex"] || len(seen) != 2 {
		t.Errorf("classes drawn for 20 sessions: %v", seen)
	}
	if spec.ClassMix != "priority=0.5,flex=0.5" {
		t.Errorf("recorded mix %q, want its canonical form", spec.ClassMix)
	}
}

// classGateway answers like a gateway serving classes: priority and
// default streams (the class echoed), every flex request preempted (503
// with X-Infergate-Preempted) and every fourth default refused 429 with
// an error code and no reason header.
func classGateway(t *testing.T) (string, *atomic.Int64) {
	var defaults, posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"sim-model","object":"model"}]}`)
			return
		}
		posts.Add(1)
		var req struct {
			Tier string `json:"service_tier"`
		}
		json.Unmarshal(body, &req)
		switch {
		case req.Tier == "flex":
			w.Header().Set("X-Infergate-Preempted", "priority")
			w.Header().Set("X-Infergate-Class", "flex")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"preempted","type":"server_error","code":"preempted"}}`)
			return
		case req.Tier == "default" && defaults.Add(1)%4 == 0:
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"too many","type":"rate_limit_error","code":"Tenant Limit Reached"}}`)
			return
		}
		w.Header().Set("X-Infergate-Class", req.Tier)
		if req.Tier == "priority" {
			w.Header().Set("X-Infergate-Requeued", "0")
		} else if req.Tier == "default" {
			w.Header().Set("X-Infergate-Requeued", "1")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if req.Tier == "default" {
			time.Sleep(100 * time.Millisecond) // twice the SLO below
		}
		io.WriteString(w, roleChunk+chunk("a")+chunk("b")+chunk("c")+finalChunk+usageChunk+doneChunk)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &posts
}

// TestRunReportsByClass: a run with a class mix gives each class its
// row, whose counts add up to the stage's, with refusals by reason, the
// class served, TTFT and SLO attainment; the text and HTML reports show
// the table.
func TestRunReportsByClass(t *testing.T) {
	t.Parallel()
	url, posts := classGateway(t)
	cfg := baseConfig(url)
	cfg.Workload.ClassMix = "priority=0.2,default=0.5,flex=0.3"
	cfg.Load = LoadSpec{Mode: "closed", Concurrency: 4, Requests: 200}
	// Priority is answered at once, default after 100 ms: an SLO of
	// 50 ms splits them with room on both sides for a machine busy with
	// other tests (at 20 ms against 30, priority's attainment fell to
	// 0.47 on a starved -race run).
	cfg.SLOs = []verdict.SLO{{Metric: "ttft", MaxMs: 50}}
	rec, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Stages[0]
	if len(s.Classes) != 3 {
		t.Fatalf("classes %+v, want priority, default and flex", s.Classes)
	}
	by := map[string]ClassSummary{}
	total := 0
	for _, c := range s.Classes {
		by[c.Class] = c
		total += c.Requests
		if c.OK+c.RefusedTotal()+c.Failed != c.Requests {
			t.Errorf("%s: %d ok + %d refused + %d failed ≠ %d requests", c.Class, c.OK, c.RefusedTotal(), c.Failed, c.Requests)
		}
	}
	if total != s.Requests || s.Requests != 200 {
		t.Errorf("classes hold %d requests, the stage %d, want 200 (%d posts)", total, s.Requests, posts.Load())
	}
	p, d, f := by["priority"], by["default"], by["flex"]
	if f.OK != 0 || f.Refused["503 preempted"] != f.Requests || f.Served["flex"] != f.Requests {
		t.Errorf("flex %+v: want every one refused as 503 preempted, served as flex", f)
	}
	if d.Refused["429 tenant_limit_reached"] == 0 || len(d.Refused) != 1 {
		t.Errorf("default refusals %v, want 429 tenant_limit_reached (the body's code, tidied)", d.Refused)
	}
	if p.Requeued != 0 || d.Requeued != d.OK {
		t.Errorf("requeued: priority %d (their header said 0), default %d of %d answered", p.Requeued, d.Requeued, d.OK)
	}
	if p.OK != p.Requests || p.Served["priority"] != p.Requests || p.TTFTP50 == nil {
		t.Errorf("priority %+v: want all served as priority, with a TTFT", p)
	}
	for _, c := range []struct {
		cs     ClassSummary
		lo, hi float64
	}{{p, 0.5, 1}, {d, 0, 0}, {f, 0, 0}} {
		if a := c.cs.SLOAttainment; a == nil || *a < c.lo || *a > c.hi {
			t.Errorf("%s SLO attainment %v, want in [%v, %v]", c.cs.Class, ptr(a), c.lo, c.hi)
		}
	}
	for share, c := range map[float64]ClassSummary{0.2: p, 0.5: d, 0.3: f} {
		if got := float64(c.Requests) / 200; math.Abs(got-share) > 0.1 {
			t.Errorf("%s: %d of 200 requests, want about %v", c.Class, c.Requests, share)
		}
	}
	var text, page bytes.Buffer
	rec.WriteText(&text)
	if !strings.Contains(text.String(), "by class") || !strings.Contains(text.String(), "503 preempted") {
		t.Errorf("the text report has no class table:\n%s", text.String())
	}
	if err := rec.WriteHTML(&page); err != nil || !strings.Contains(page.String(), "by class") || !strings.Contains(page.String(), "503 preempted") {
		t.Errorf("the HTML report has no class table (%v)", err)
	}
	raw, _ := json.Marshal(rec)
	var back Record
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Stages[0].Classes) != 3 || back.Conditions.Workload.ClassMix != "priority=0.2,default=0.5,flex=0.3" {
		t.Errorf("the JSON record lost the classes or the mix: %v", err)
	}
}

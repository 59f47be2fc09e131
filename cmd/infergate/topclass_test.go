package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

// classExposition is a gateway's per-class series after n rounds of
// traffic: each round, 2 priority requests admitted (TTFT 50 ms), 4
// default admitted and 1 shed (TTFT 200 ms), 2 flex admitted, 1 of them
// preempted, and 1 shed; 3 flex waiting, 1 priority in flight now.
func classExposition(n int) string {
	var b strings.Builder
	for _, m := range []struct {
		name, kind     string
		pri, def, flex int
	}{
		{"infergate_class_admitted_total", "counter", 2 * n, 4 * n, 2 * n},
		{"infergate_class_shed_total", "counter", 0, n, n},
		{"infergate_class_preempted_total", "counter", 0, 0, n},
		{"infergate_class_timed_out_total", "counter", 0, 0, 0},
		{"infergate_class_waiting", "gauge", 0, 0, 3},
		{"infergate_class_in_flight", "gauge", 1, 0, 0},
		{"infergate_class_slo_judged_total", "counter", 2 * n, 5 * n, 0},
		{"infergate_class_slo_met_total", "counter", 2 * n, 2 * n, 0},
	} {
		fmt.Fprintf(&b, "# TYPE %s %s\n%s{class=\"priority\"} %d\n%s{class=\"default\"} %d\n%s{class=\"flex\"} %d\n", m.name, m.kind, m.name, m.pri, m.name, m.def, m.name, m.flex)
	}
	b.WriteString("# TYPE infergate_class_ttft_seconds histogram\n")
	for _, c := range []struct {
		class string
		fast  int // under 0.1 s
		n     int
	}{{"priority", 2, 2}, {"default", 0, 4}, {"flex", 0, 1}} {
		fmt.Fprintf(&b, "infergate_class_ttft_seconds_bucket{class=%q,le=\"0.1\"} %d\n", c.class, c.fast*n)
		fmt.Fprintf(&b, "infergate_class_ttft_seconds_bucket{class=%q,le=\"0.25\"} %d\n", c.class, c.n*n)
		fmt.Fprintf(&b, "infergate_class_ttft_seconds_bucket{class=%q,le=\"+Inf\"} %d\n", c.class, c.n*n)
		fmt.Fprintf(&b, "infergate_class_ttft_seconds_sum{class=%q} 1\ninfergate_class_ttft_seconds_count{class=%q} %d\n", c.class, c.class, c.n*n)
	}
	return b.String()
}

// TestTopShowsClasses: top reads the per-class series from the admin
// listener's /metrics and shows a row per class, highest first, each
// frame's counts over the time since the one before.
func TestTopShowsClasses(t *testing.T) {
	t.Parallel()
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case adminapi.PathStats:
			json.NewEncoder(w).Encode(adminapi.Stats{Time: time.Now(), Window: 60})
		case "/metrics":
			// 10 rounds before the first frame, 13 by the second.
			n := 10 + 3*int(scrapes.Add(1)-1)
			fmt.Fprint(w, classExposition(n))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errs bytes.Buffer
	if err := runTop(context.Background(), []string{"--admin", srv.URL, "--count", "2", "--interval", "50ms"}, &out, &errs); err != nil {
		t.Fatalf("top: %v %s", err, errs.String())
	}
	text := out.String()
	frames := strings.Split(text, "infergate top")
	if len(frames) != 3 {
		t.Fatalf("%d frames:\n%s", len(frames)-1, text)
	}
	first, second := frames[1], frames[2]
	if !strings.Contains(first, "by class (since the gateway started;") || !regexp.MustCompile(`by class \(last 0\.\d s;`).MatchString(second) {
		t.Errorf("spans wrong:\n%s", text)
	}
	row := func(frame, class string) []string {
		for _, l := range strings.Split(frame, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == class {
				return f
			}
		}
		t.Fatalf("no %s row in:\n%s", class, frame)
		return nil
	}
	// class admitted /s waiting in-flight shed preempted timed-out queue-p50 p99 TTFT-p50 p99 SLO
	if got := strings.Join(row(first, "priority"), " "); got != "priority 20 - 0 1 0 0 0 - - 50.0 99.0 100.0%" {
		t.Errorf("first frame, priority: %q", got)
	}
	if got := strings.Join(row(second, "flex"), " "); !regexp.MustCompile(`^flex 6 [0-9.]+ 3 0 3 3 0 - - 175 248 -$`).MatchString(got) {
		t.Errorf("second frame, flex (3 rounds: 6 admitted, 3 waiting, 3 shed, 3 preempted, no SLO): %q", got)
	}
	if got := row(second, "default"); got[1] != "12" || got[12] != "40.0%" {
		t.Errorf("second frame, default (12 admitted, 6 of 15 judged met the SLO): %q", got)
	}
	at := func(class string) int { return regexp.MustCompile(`\n\s*` + class + ` `).FindStringIndex(second)[0] }
	if i, j, k := at("priority"), at("default"), at("flex"); i > j || j > k {
		t.Errorf("rows not highest class first:\n%s", second)
	}
}

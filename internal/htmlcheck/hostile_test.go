package htmlcheck_test

import (
	"bytes"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/bench/rank"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/internal/htmlcheck"
	"github.com/infergate/infergate/internal/svgchart"
	"github.com/infergate/infergate/mirror/ab"
	"github.com/infergate/infergate/tune"
	"github.com/infergate/infergate/verdict"
)

// marker appears in a page's document only if one of the payloads ran:
// the payloads compute it, so their escaped text never holds it.
const marker = "PWNED-42"

// hostile is what a model answer, a prompt, a model name or a backend's
// metrics could carry into a report: a way out of every element the
// pages put text in, then a script, an event handler and a javascript:
// link, each of which writes the marker when it runs.
const hostile = `</pre></td></tr></table></title></text></svg>"'><script>document.body.setAttribute("data-x","PW"+"NED-"+6*7)</script>` +
	`<img src=x onerror="document.title='PW'+'NED-'+6*7"><svg onload="document.body.id='PW'+'NED-'+6*7"></svg>` +
	`<a id=l href="javascript:document.body.id='PW'+'NED-'+6*7">x</a><script>document.getElementById('l')&&document.getElementById('l').click()</script>`

func write(t *testing.T, name string, fill func(*bytes.Buffer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := fill(&b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReportsRunNoScript: every report page built from hostile content,
// opened in headless Chromium, runs none of it: the content is escaped,
// and the page's Content-Security-Policy would stop it were it not.
func TestReportsRunNoScript(t *testing.T) {
	// The control: in this browser, on a file page, a script runs; so
	// a marker missing below means the page stopped it.
	bare := write(t, "bare.html", func(b *bytes.Buffer) error {
		b.WriteString("<!DOCTYPE html><html><body>" + hostile + "</body></html>")
		return nil
	})
	if dom := htmlcheck.DOM(t, bare); !strings.Contains(dom, marker) {
		t.Fatalf("the control page's script did not run; the test could not see one run:\n%s", dom)
	}
	// The policy alone: the same payload unescaped in a page that starts
	// as the reports start is stopped.
	csp := write(t, "csp.html", func(b *bytes.Buffer) error {
		page := svgchart.Page(`{{define "body"}}{{.Body}}{{end}}`)
		return svgchart.WritePage(b, page, struct {
			Title string
			Body  template.HTML
		}{"csp", template.HTML(hostile)})
	})
	if dom := htmlcheck.DOM(t, csp); strings.Contains(dom, marker) {
		t.Errorf("a script ran despite the pages' Content-Security-Policy")
	}

	rep := &ab.Report{Result: verdict.Result{Verdict: hostile, Reasons: []string{hostile}}, Pairs: 3,
		Changes: []verdict.Change{{Metric: hostile, Test: hostile, Judgement: hostile}},
		Samples: map[string]map[string][]float64{"ttft": {"primary": {1, 2, 3}, "candidate": {2, 3, 4}}}}
	rec := &bench.Record{Conditions: bench.Conditions{URL: "http://x/" + hostile, Host: hostile,
		Workload: bench.WorkloadSpec{Model: hostile, Trace: hostile}}}
	diag := &diagnose.Report{Bottleneck: hostile, Confidence: hostile, Summary: hostile, Load: hostile, LoadDetail: hostile,
		Evidence: []diagnose.Finding{{Signal: hostile, Detail: hostile}}, Backends: []diagnose.Backend{{Name: hostile, Server: hostile}}}
	res := &tune.Result{Objective: hostile, Bottleneck: hostile, Diagnosis: hostile, Stopped: hostile}
	ranked := &rank.Record{Bound: hostile, Host: hostile, Workload: rank.Workload{Order: hostile, SLO: hostile},
		Endpoints: []*rank.Result{{Name: hostile, URL: hostile, Model: hostile, Rounds: []rank.Round{{TTFTP50: 1}, {Round: 1, TTFTP50: 2}}}},
		Ranking:   []rank.Place{{Rank: 1, Name: hostile, Why: hostile}}}
	pages := map[string]func(*bytes.Buffer) error{
		"ab.html": func(b *bytes.Buffer) error {
			return rep.WriteHTML(b, hostile, []ab.Example{{ID: hostile, Primary: hostile, Candidate: hostile}})
		},
		"bench.html":    func(b *bytes.Buffer) error { return rec.WriteHTML(b) },
		"diagnose.html": func(b *bytes.Buffer) error { return diag.WriteHTML(b, hostile) },
		"tune.html":     func(b *bytes.Buffer) error { return res.WriteHTML(b) },
		"rank.html": func(b *bytes.Buffer) error {
			return ranked.WriteHTML(b, []*rank.Record{ranked, ranked}, []rank.Flag{{Endpoint: hostile, What: hostile}})
		},
	}
	for name, fill := range pages {
		p := write(t, name, fill)
		raw, _ := os.ReadFile(p)
		if !strings.Contains(string(raw), svgchart.CSP) {
			t.Errorf("%s has no Content-Security-Policy", name)
		}
		if strings.Contains(string(raw), "<script") || strings.Contains(string(raw), "<img") {
			t.Errorf("%s holds the payload's markup unescaped", name)
		}
		dom := htmlcheck.DOM(t, p)
		if strings.Contains(dom, marker) {
			t.Errorf("%s: a payload ran", name)
		}
		if !strings.Contains(dom, "&lt;script&gt;") {
			t.Errorf("%s: the hostile text is not shown as text", name)
		}
	}
}

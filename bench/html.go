package bench

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"

	"github.com/infergate/infergate/internal/svgchart"
)

// htmlPage is what the record's page shows, every value as text the
// template escapes; only the charts go in as markup.
type htmlPage struct {
	Title      string
	Conditions [][2]string
	Stages     [][]string // the results table, one row a stage
	Knee       string
	NoKnee     string
	Stopped    string
	Turns      []htmlTurns
	Classes    []htmlClasses
	Charts     []template.HTML
}

// htmlClasses is a stage's table by service class.
type htmlClasses struct {
	Stage   int
	Columns []string
	Rows    [][]string
}

// htmlTurns is a stage's note on a reasoning model and its table by turn.
type htmlTurns struct {
	Stage     int
	Reasoning string
	Rows      [][]string
	// FollowUps says the last row pools turns 2 and later.
	FollowUps bool
}

var pageHTML = svgchart.Page(`{{define "body"}}<h2>Conditions</h2>
<table>
{{range .Conditions}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{end}}</table>
<h2>Results</h2>
<table class="num">
<tr><th>stage</th><th>level</th><th>requests</th><th>failed</th><th>output tok/s</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th><th>TPOT p50 ms</th><th>e2e p50 ms</th><th>cached prompt tokens</th><th>input tokens asked / by the server</th></tr>
{{template "rows" .Stages}}</table>
{{with .Knee}}<p>knee: {{.}} (the first stage at 90% of the sweep's peak throughput, with more load beyond it adding less than 11%)</p>
{{end}}{{with .NoKnee}}<p>{{.}}</p>
{{end}}{{with .Stopped}}<p>sweep stopped: {{.}}</p>
{{end}}{{range .Turns}}{{with .Reasoning}}<p>{{.}}</p>
{{end}}{{if .Rows}}<h3>Stage {{.Stage}} by turn</h3>
<table class="num">
<tr><th>turn</th><th>n</th><th>failed</th><th>TTFT p50 ms</th><th>TTFT p90 ms</th><th>e2e p50 ms</th><th>prompt tokens p50</th><th>cached</th></tr>
{{template "rows" .Rows}}</table>
{{if .FollowUps}}<p>2+: turns 2 and later pooled.</p>
{{end}}{{end}}{{end}}{{range .Classes}}<h3>Stage {{.Stage}} by class</h3>
<table class="num">
<tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{template "rows" .Rows}}</table>
<p>refused: 429 and 503 answers by reason; queue: the gateway's own wait (--gateway-timing); slo met: the share of the class's requests meeting every SLO.</p>
{{end}}<h2>Charts</h2>
{{range .Charts}}{{.}}
{{end}}{{end}}`)

// WriteHTML renders the record as one self-contained HTML page: the
// conditions and the headline figures as tables at the top, then the
// charts, drawn as inline SVG (no script, nothing fetched: the page opens
// from a file on a machine with no network): TTFT, TPOT and end-to-end
// distributions as CDFs, throughput and TTFT over time, and for a sweep
// the throughput-latency curve with its knee.
func (r *Record) WriteHTML(w io.Writer) error {
	pg := htmlPage{Title: "infergate bench: " + r.Conditions.URL, Conditions: r.htmlConditions()}
	for _, s := range r.Stages {
		pg.Stages = append(pg.Stages, htmlStage(s))
	}
	if r.Knee >= 0 && r.Knee < len(r.Stages) {
		pg.Knee = fmt.Sprintf("stage %d, level %g", r.Knee, r.Stages[r.Knee].Level)
	}
	pg.NoKnee = r.NoKnee()
	pg.Stopped = r.StopReason
	for _, s := range r.Stages {
		t := htmlTurns{Stage: s.Stage}
		if m, rs := s.Metrics["ttfo"], s.Metrics["reasoning"]; m != nil && rs != nil {
			t.Reasoning = fmt.Sprintf("stage %d, a reasoning model: time to first output token p50 %.1f ms, of it thinking p50 %.1f ms (TTFT counts the first token of any kind)", s.Stage, m.P50, rs.P50)
		}
		turns := s.Turns
		if s.FollowUps != nil {
			turns, t.FollowUps = append(slices.Clip(turns), *s.FollowUps), true
		}
		for _, u := range turns {
			p90, cached := u.optional("%.1f")
			t.Rows = append(t.Rows, []string{u.label(), strconv.Itoa(u.N), strconv.Itoa(u.Failed), fmt.Sprintf("%.1f", u.TTFTP50), p90,
				fmt.Sprintf("%.1f", u.E2EP50), fmt.Sprintf("%.0f", u.PromptTokensP50), cached})
		}
		if t.Reasoning != "" || len(t.Rows) > 0 {
			pg.Turns = append(pg.Turns, t)
		}
	}
	for _, s := range r.Stages {
		if len(s.Classes) == 0 {
			continue
		}
		c := htmlClasses{Stage: s.Stage, Columns: classColumns}
		for _, cs := range s.Classes {
			c.Rows = append(c.Rows, cs.cells("%.1f"))
		}
		pg.Classes = append(pg.Classes, c)
	}
	pg.Charts = r.htmlCharts()
	if err := svgchart.WritePage(w, pageHTML, pg); err != nil {
		return fmt.Errorf("bench: html: %w", err)
	}
	return nil
}

// htmlConditions are the rows of the conditions table.
func (r *Record) htmlConditions() [][2]string {
	c := r.Conditions
	rows := [][2]string{{"URL", c.URL}, {"model", c.Workload.Model},
		{"endpoint", fmt.Sprintf("%s, stream %v", c.Workload.Endpoint, c.Workload.Stream)},
		{"input / output tokens", fmt.Sprintf("%s / %s", c.Workload.InputTokens, c.Workload.OutputTokens)}}
	rows = append(rows, [2]string{"load", c.LoadText()})
	if cache := c.CacheText(); cache != "" {
		rows = append(rows, [2]string{"cache", cache})
	}
	if c.GatewayConfigHash != "" {
		rows = append(rows, [2]string{"gateway config hash", c.GatewayConfigHash})
	}
	return append(rows, [2]string{"started", c.Start.Format("2006-01-02 15:04:05 MST")},
		[2]string{"tool, host", fmt.Sprintf("%s, %s (%d CPUs)", c.ToolVersion, c.Host, c.CPUs)})
}

// htmlStage is a stage's row of the results table.
func htmlStage(s *Summary) []string {
	p := func(key string, p99 bool) string {
		m := s.Metrics[key]
		switch {
		case m == nil:
			return "-"
		case p99 && m.P99 != nil:
			return fmt.Sprintf("%.1f", *m.P99)
		case p99:
			return "-"
		}
		return fmt.Sprintf("%.1f", m.P50)
	}
	cached, input := "not reported", "-"
	if s.CachedShare != nil {
		cached = fmt.Sprintf("%.1f%% (%d answers)", *s.CachedShare*100, s.CachedAnswers)
	}
	if s.InputTokensServer > 0 {
		input = fmt.Sprintf("%.1f / %.1f", s.InputTokensAsked, s.InputTokensServer)
	}
	return []string{strconv.Itoa(s.Stage), fmt.Sprintf("%g", s.Level), strconv.Itoa(s.Requests), strconv.Itoa(s.Failed), fmt.Sprintf("%.1f", s.OutputTokenThroughput),
		p("ttft", false), p("ttft", true), p("tpot", false), p("e2e", false), cached, input}
}

// htmlCharts draws the record's charts.
func (r *Record) htmlCharts() []template.HTML {
	var out []template.HTML
	for _, m := range []struct{ key, title string }{{"ttft", "TTFT"}, {"tpot", "TPOT"}, {"e2e", "end-to-end latency"}} {
		ch := svgchart.Chart{Title: m.title + " distribution: share of requests at or below each value", XLabel: "ms", YLabel: "share"}
		for _, s := range r.Stages {
			if xs := s.Samples[m.key]; len(xs) > 0 {
				ch.Series = append(ch.Series, svgchart.CDF(fmt.Sprintf("level %g", s.Level), xs, 400))
			}
		}
		if len(ch.Series) > 0 {
			out = append(out, ch.SVG())
		}
	}
	tok := svgchart.Chart{Title: "Output tokens per second, over time", XLabel: "s", YLabel: "tokens/s"}
	ttft := svgchart.Chart{Title: "TTFT p50 per second, over time", XLabel: "s", YLabel: "ms"}
	var ts, tv, fs, fv []float64
	offset := 0.0
	for _, s := range r.Stages {
		for _, b := range s.Timeline {
			ts, tv = append(ts, offset+b.T), append(tv, b.OutputTokens)
			if b.TTFTP50 > 0 {
				fs, fv = append(fs, offset+b.T), append(fv, b.TTFTP50)
			}
		}
		offset += float64(len(s.Timeline))
	}
	tok.Series = []svgchart.Series{{Name: "output tokens/s", X: ts, Y: tv}}
	ttft.Series = []svgchart.Series{{Name: "TTFT p50", X: fs, Y: fv}}
	out = append(out, tok.SVG(), ttft.SVG())
	if len(r.Stages) > 1 {
		sw := svgchart.Chart{Title: "Sweep: TTFT against throughput, one point per stage", XLabel: "output tokens/s", YLabel: "TTFT (ms)"}
		var x, p50, p99 []float64
		for _, s := range r.Stages {
			if t := s.Metrics["ttft"]; t != nil {
				x, p50 = append(x, s.OutputTokenThroughput), append(p50, t.P50)
				if t.P99 != nil {
					p99 = append(p99, *t.P99)
				}
			}
		}
		sw.Series = []svgchart.Series{{Name: "TTFT p50", X: x, Y: p50}}
		if len(p99) == len(x) {
			sw.Series = append(sw.Series, svgchart.Series{Name: "TTFT p99", X: x, Y: p99})
		}
		out = append(out, sw.SVG())
	}
	return out
}

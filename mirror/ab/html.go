package ab

import (
	"fmt"
	"html/template"
	"io"
	"strconv"

	"github.com/infergate/infergate/internal/svgchart"
	"github.com/infergate/infergate/verdict"
)

// Example is a pair shown in the report: two answers that differ.
type Example struct {
	ID                 string
	Similarity         float64
	Primary, Candidate string
}

// htmlPage is what the report's page shows, every value as text the
// template escapes; only the charts go in as markup.
type htmlPage struct {
	Title, Verdict     string
	Reasons            []string
	Pairs              int
	Arms, Changes      [][]string // a headed row each: the label first
	Similarity, Length float64
	Judge              string
	Charts             []template.HTML
	Examples           []Example
}

var pageHTML = svgchart.Page(`{{define "body"}}<p class="verdict {{tone .Verdict}}">verdict: {{.Verdict}}</p>
<ul>
{{range .Reasons}}<li>{{.}}</li>
{{end}}</ul>
<p>{{.Pairs}} pairs: each request answered by the primary (the base) and the candidate (the change).</p>
<h2>The arms</h2>
<table class="num">
<tr><th></th><th>primary</th><th>candidate</th></tr>
{{template "headed" .Arms}}</table>
<p>outputs: median similarity {{printf "%.2f" .Similarity}}, median length ratio {{printf "%.2f" .Length}}</p>
<h2>Paired changes</h2>
<table class="num">
<tr><th>figure</th><th>primary</th><th>candidate</th><th>change</th><th>95% CI</th><th>p</th><th>test</th><th>n</th><th>judgement</th><th>A/A</th></tr>
{{template "headed" .Changes}}</table>
{{with .Judge}}<p>{{.}}</p>
{{end}}<h2>Distributions</h2>
{{range .Charts}}{{.}}{{end}}{{with .Examples}}<h2>Pairs whose answers differ most</h2>
{{range .}}<h3>{{.ID}} (similarity {{printf "%.2f" .Similarity}})</h3>
<table><tr><th>primary</th><th>candidate</th></tr><tr><td><pre>{{.Primary}}</pre></td><td><pre>{{.Candidate}}</pre></td></tr></table>
{{end}}{{end}}{{end}}
{{define "headed"}}{{range .}}<tr><th>{{index . 0}}</th>{{range slice . 1}}<td>{{.}}</td>{{end}}</tr>
{{end}}{{end}}`)

// WriteHTML writes the report as one self-contained page: the verdict
// and the figures as tables at the top, the arms' distributions side by
// side as inline SVG, and a few pairs whose answers differ.
func (r *Report) WriteHTML(w io.Writer, title string, examples []Example) error {
	pg := htmlPage{Title: title, Verdict: r.Verdict, Reasons: r.Reasons, Pairs: r.Pairs, Similarity: r.Similarity, Length: r.LengthRatio,
		Examples: examples}
	if j := r.Judge; j != nil {
		pg.Judge = fmt.Sprintf("judge (blind, order randomised): candidate preferred %d, primary %d, ties %d; preference for the candidate %.0f%% [%.0f, %.0f]%% (50%%: none)",
			j.Wins, j.Losses, j.Ties, j.Preference*100, j.Low*100, j.High*100)
	}
	d := func(x Dist) string { return x.Text("%.1f") }
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", x*100) }
	pg.Arms = [][]string{
		{"TTFT ms p50 / p90 / p99", d(r.Primary.TTFT), d(r.Candidate.TTFT)},
		{"TPOT ms", d(r.Primary.TPOT), d(r.Candidate.TPOT)},
		{"end-to-end ms", d(r.Primary.E2E), d(r.Candidate.E2E)},
		{"output speed tok/s", d(r.Primary.Speed), d(r.Candidate.Speed)},
		{"throughput tok/s", fmt.Sprintf("%.1f", r.Primary.Throughput), fmt.Sprintf("%.1f", r.Candidate.Throughput)},
		{"errors", pct(r.Primary.ErrorRate), pct(r.Candidate.ErrorRate)},
		{"invalid JSON", pct(r.Primary.InvalidJSONRate), pct(r.Candidate.InvalidJSONRate)},
		{"refusals", pct(r.Primary.RefusalRate), pct(r.Candidate.RefusalRate)},
		{"empty", pct(r.Primary.EmptyRate), pct(r.Candidate.EmptyRate)},
		{"cut at the output limit (not the gateway's cap)", pct(r.Primary.TruncatedRate), pct(r.Candidate.TruncatedRate)},
		{"cached prompt tokens (as the backend reported)", verdict.ShareText(r.Primary.CachedShare), verdict.ShareText(r.Candidate.CachedShare)},
	}
	for _, ch := range r.Changes {
		base, nw, delta, ci, p := ch.Cells()
		aa := ""
		if n := noiseOf(r.Noise, ch.Metric); n != nil {
			aa = fmtShort(*n)
		}
		pg.Changes = append(pg.Changes, []string{ch.Metric, base, nw, delta, ci, p, ch.Test, strconv.Itoa(ch.N), ch.Judgement, aa})
	}
	for _, m := range []struct{ key, title string }{{"ttft", "TTFT"}, {"tpot", "TPOT"}, {"e2e", "end-to-end latency"}} {
		ch := svgchart.Chart{Title: m.title + ": share of requests at or below each value", XLabel: "ms", YLabel: "share"}
		for _, arm := range []string{"primary", "candidate", "A/A"} {
			if xs := r.Samples[m.key][arm]; len(xs) > 0 {
				ch.Series = append(ch.Series, svgchart.CDF(arm, xs, 400))
			}
		}
		if len(ch.Series) > 0 {
			pg.Charts = append(pg.Charts, ch.SVG())
		}
	}
	if err := svgchart.WritePage(w, pageHTML, pg); err != nil {
		return fmt.Errorf("ab: html: %w", err)
	}
	return nil
}

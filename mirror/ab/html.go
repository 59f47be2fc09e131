package ab

import (
	"bufio"
	"fmt"
	"html"
	"io"

	"github.com/infergate/infergate/internal/svgchart"
)

// Example is a pair shown in the report: two answers that differ.
type Example struct {
	ID                 string
	Similarity         float64
	Primary, Candidate string
}

// WriteHTML writes the report as one self-contained page: the verdict
// and the figures as tables at the top, the arms' distributions side by
// side as inline SVG, and a few pairs whose answers differ.
func (r *Report) WriteHTML(w io.Writer, title string, examples []Example) error {
	bw := bufio.NewWriter(w)
	svgchart.PageStart(bw, title)
	fmt.Fprintf(bw, "<p class=\"verdict\">verdict: %s</p>\n<ul>\n", html.EscapeString(r.Verdict))
	for _, s := range r.Reasons {
		fmt.Fprintf(bw, "<li>%s</li>\n", html.EscapeString(s))
	}
	fmt.Fprintf(bw, "</ul>\n<p>%d pairs: each request answered by the primary (the base) and the candidate (the change).</p>\n", r.Pairs)

	fmt.Fprintf(bw, "<h2>The arms</h2>\n<table class=\"num\">\n<tr><th></th><th>primary</th><th>candidate</th></tr>\n")
	d := func(x Dist) string { return x.Text("%.1f") }
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", x*100) }
	for _, row := range [][3]string{
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
		{"cached prompt tokens (as the backend reported)", shareText(r.Primary.CachedShare), shareText(r.Candidate.CachedShare)},
	} {
		fmt.Fprintf(bw, "<tr><th>%s</th><td>%s</td><td>%s</td></tr>\n", row[0], row[1], row[2])
	}
	fmt.Fprintf(bw, "</table>\n<p>outputs: median similarity %.2f, median length ratio %.2f</p>\n", r.Similarity, r.LengthRatio)

	fmt.Fprintf(bw, "<h2>Paired changes</h2>\n<table class=\"num\">\n<tr><th>figure</th><th>primary</th><th>candidate</th><th>change</th><th>95%% CI</th><th>p</th><th>test</th><th>n</th><th>judgement</th><th>A/A</th></tr>\n")
	for _, ch := range r.Changes {
		base, nw, delta, ci, p := ch.Cells()
		aa := ""
		if n := noiseOf(r.Noise, ch.Metric); n != nil {
			aa = fmtShort(*n)
		}
		fmt.Fprintf(bw, "<tr><th>%s</th><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
			html.EscapeString(ch.Metric), base, nw, delta, ci, p, html.EscapeString(ch.Test), ch.N, html.EscapeString(ch.Judgement), html.EscapeString(aa))
	}
	fmt.Fprintf(bw, "</table>\n")
	if j := r.Judge; j != nil {
		fmt.Fprintf(bw, "<p>judge (blind, order randomised): candidate preferred %d, primary %d, ties %d; preference for the candidate %.0f%% [%.0f, %.0f]%% (50%%: none)</p>\n",
			j.Wins, j.Losses, j.Ties, j.Preference*100, j.Low*100, j.High*100)
	}
	fmt.Fprintf(bw, "<h2>Distributions</h2>\n")
	for _, m := range []struct{ key, title string }{{"ttft", "TTFT"}, {"tpot", "TPOT"}, {"e2e", "end-to-end latency"}} {
		ch := svgchart.Chart{Title: m.title + ": share of requests at or below each value", XLabel: "ms", YLabel: "share"}
		for _, arm := range []string{"primary", "candidate", "A/A"} {
			if xs := r.Samples[m.key][arm]; len(xs) > 0 {
				ch.Series = append(ch.Series, svgchart.CDF(arm, xs, 400))
			}
		}
		if len(ch.Series) > 0 {
			ch.Write(bw)
		}
	}
	if len(examples) > 0 {
		fmt.Fprintf(bw, "<h2>Pairs whose answers differ most</h2>\n")
		for _, e := range examples {
			fmt.Fprintf(bw, "<h3>%s (similarity %.2f)</h3>\n<table><tr><th>primary</th><th>candidate</th></tr><tr><td><pre>%s</pre></td><td><pre>%s</pre></td></tr></table>\n",
				html.EscapeString(e.ID), e.Similarity, html.EscapeString(e.Primary), html.EscapeString(e.Candidate))
		}
	}
	svgchart.PageEnd(bw)
	return bw.Flush()
}

package diagnose

import (
	"fmt"
	"html/template"
	"io"
	"strconv"

	"github.com/infergate/infergate/internal/svgchart"
)

// htmlPage is what the report's page shows, every value as text the
// template escapes; only the charts go in as markup.
type htmlPage struct {
	Title                                 string
	Bottleneck, Confidence, Summary       string
	Load, LoadDetail                      string
	Evidence, PerBackend, Knobs, Backends [][]string
	NotSeen                               []string
	Sweep                                 []template.HTML
}

var pageHTML = svgchart.Page(`{{define "body"}}<p class="verdict">bottleneck: {{.Bottleneck}} (confidence {{.Confidence}})</p>
<p>{{.Summary}}</p>
<p>load: {{.Load}}: {{.LoadDetail}}</p>
<h2>Evidence</h2>
<table>
<tr><th>signal</th><th>holds</th><th>what was seen</th></tr>
{{template "rows" .Evidence}}</table>
{{with .PerBackend}}<h2>Each backend on its own</h2>
<table>
<tr><th>backend</th><th>bottleneck</th><th>confidence</th><th>why</th></tr>
{{template "rows" .}}</table>
{{end}}<h2>What to turn next, cheapest first</h2>
<table>
<tr><th></th><th>knob</th><th>action</th><th>re-measure</th><th>not if</th></tr>
{{template "rows" .Knobs}}</table>
<h2>Backends</h2>
<table class="num">
<tr><th>backend</th><th>server</th><th>running</th><th>waiting</th><th>KV max</th><th>GPU %</th><th>preempt/s</th><th>out tok/s</th><th>TTFT s</th><th>queue s</th></tr>
{{template "rows" .Backends}}</table>
{{with .NotSeen}}<h2>Not seen (the verdict is made without)</h2>
<ul>
{{range .}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{with .Sweep}}<h2>Sweep</h2>
{{range .}}{{.}}
{{end}}{{end}}{{end}}`)

// WriteHTML writes the report as one self-contained page: the verdict,
// its evidence and the knobs as tables, and with a sweep, how speed,
// TTFT and the backends' state moved with load as inline SVG charts.
func (r *Report) WriteHTML(w io.Writer, title string) error {
	pg := htmlPage{Title: title, Bottleneck: r.Bottleneck, Confidence: r.Confidence, Summary: r.Summary, Load: r.Load, LoadDetail: r.LoadDetail,
		NotSeen: r.NotSeen, Sweep: r.sweepCharts()}
	for _, f := range r.Evidence {
		pg.Evidence = append(pg.Evidence, []string{f.Signal, f.verdict(), f.Detail})
	}
	for _, f := range r.Against {
		pg.Evidence = append(pg.Evidence, []string{f.Signal + " (another verdict's)", "yes", f.Detail})
	}
	for _, b := range r.PerBackend {
		pg.PerBackend = append(pg.PerBackend, []string{b.Name, b.Bottleneck, b.Confidence, b.Summary})
	}
	for i, k := range r.Knobs {
		pg.Knobs = append(pg.Knobs, []string{strconv.Itoa(i + 1), k.Knob, k.Action, k.Remeasure, k.Skip})
	}
	for _, b := range r.Backends {
		pg.Backends = append(pg.Backends, []string{b.Name, b.Server, f1(b.Running.Mean), f1(b.Waiting.Mean), pctOf(b.KVUsage.Max),
			f1(b.GPUUtil.Mean), f2(b.PreemptionsPerS), f1(b.OutputTokPerS), f2(b.TTFT), f2(b.Queue)})
	}
	if err := svgchart.WritePage(w, pageHTML, pg); err != nil {
		return fmt.Errorf("diagnose: html: %w", err)
	}
	return nil
}

// sweepCharts draws how speed, TTFT and the backends' state moved with
// the sweep's load; none without a sweep.
func (r *Report) sweepCharts() []template.HTML {
	if len(r.Sweep) == 0 {
		return nil
	}
	var c, speed, tput, ttft, kv, pre []float64
	for _, p := range r.Sweep {
		c = append(c, p.Concurrency)
		speed, tput, ttft = append(speed, float64(p.PerRequestTokPerS)), append(tput, float64(p.OutputTokPerS)), append(ttft, float64(p.TTFTp50))
		k, q := Unknown(), Unknown()
		for _, b := range p.Backends {
			k, q = maxNaN(k, float64(b.KVUsage.Max)), add(q, float64(b.PreemptionsPerS))
		}
		kv, pre = append(kv, k*100), append(pre, q)
	}
	var out []template.HTML
	for _, ch := range []svgchart.Chart{
		{Title: "Speed as concurrency rises", XLabel: "concurrency", YLabel: "tokens/s",
			Series: []svgchart.Series{{Name: "per request (median)", X: c, Y: speed}, {Name: "throughput / 10", X: c, Y: scale(tput, 0.1)}}},
		{Title: "TTFT p50 (ms)", XLabel: "concurrency", YLabel: "ms", Series: []svgchart.Series{{Name: "TTFT p50", X: c, Y: ttft}}},
		{Title: "KV cache and preemptions", XLabel: "concurrency", YLabel: "",
			Series: []svgchart.Series{{Name: "KV cache % (max)", X: c, Y: kv}, {Name: "preemptions/s", X: c, Y: pre}}},
	} {
		out = append(out, ch.SVG())
	}
	return out
}

func scale(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
}

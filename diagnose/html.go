package diagnose

import (
	"bufio"
	"fmt"
	"html"
	"io"

	"github.com/infergate/infergate/internal/svgchart"
)

// WriteHTML writes the report as one self-contained page: the verdict,
// its evidence and the knobs as tables, and with a sweep, how speed,
// TTFT and the backends' state moved with load as inline SVG charts.
func (r *Report) WriteHTML(w io.Writer, title string) error {
	bw := bufio.NewWriter(w)
	svgchart.PageStart(bw, title)
	fmt.Fprintf(bw, "<p class=\"verdict\">bottleneck: %s (confidence %s)</p>\n<p>%s</p>\n<p>load: %s: %s</p>\n",
		html.EscapeString(r.Bottleneck), html.EscapeString(r.Confidence), html.EscapeString(r.Summary), html.EscapeString(r.Load), html.EscapeString(r.LoadDetail))
	fmt.Fprintf(bw, "<h2>Evidence</h2>\n<table>\n<tr><th>signal</th><th>holds</th><th>what was seen</th></tr>\n")
	for _, f := range r.Evidence {
		fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(f.Signal), f.verdict(), html.EscapeString(f.Detail))
	}
	for _, f := range r.Against {
		fmt.Fprintf(bw, "<tr><td>%s (another verdict's)</td><td>yes</td><td>%s</td></tr>\n", html.EscapeString(f.Signal), html.EscapeString(f.Detail))
	}
	if len(r.PerBackend) > 0 {
		fmt.Fprintf(bw, "</table>\n<h2>Each backend on its own</h2>\n<table>\n<tr><th>backend</th><th>bottleneck</th><th>confidence</th><th>why</th></tr>\n")
		for _, b := range r.PerBackend {
			fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", html.EscapeString(b.Name), html.EscapeString(b.Bottleneck),
				html.EscapeString(b.Confidence), html.EscapeString(b.Summary))
		}
	}
	fmt.Fprintf(bw, "</table>\n<h2>What to turn next, cheapest first</h2>\n<table>\n<tr><th></th><th>knob</th><th>action</th><th>re-measure</th><th>not if</th></tr>\n")
	for i, k := range r.Knobs {
		fmt.Fprintf(bw, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", i+1, html.EscapeString(k.Knob),
			html.EscapeString(k.Action), html.EscapeString(k.Remeasure), html.EscapeString(k.Skip))
	}
	fmt.Fprintf(bw, "</table>\n<h2>Backends</h2>\n<table class=\"num\">\n<tr><th>backend</th><th>server</th><th>running</th><th>waiting</th><th>KV max</th><th>GPU %%</th><th>preempt/s</th><th>out tok/s</th><th>TTFT s</th><th>queue s</th></tr>\n")
	for _, b := range r.Backends {
		fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			html.EscapeString(b.Name), html.EscapeString(b.Server), f1(b.Running.Mean), f1(b.Waiting.Mean), pctOf(b.KVUsage.Max),
			f1(b.GPUUtil.Mean), f2(b.PreemptionsPerS), f1(b.OutputTokPerS), f2(b.TTFT), f2(b.Queue))
	}
	fmt.Fprintf(bw, "</table>\n")
	if len(r.NotSeen) > 0 {
		fmt.Fprintf(bw, "<h2>Not seen (the verdict is made without)</h2>\n<ul>\n")
		for _, n := range r.NotSeen {
			fmt.Fprintf(bw, "<li>%s</li>\n", html.EscapeString(n))
		}
		fmt.Fprintf(bw, "</ul>\n")
	}
	if len(r.Sweep) > 0 {
		fmt.Fprintf(bw, "<h2>Sweep</h2>\n")
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
		for _, ch := range []svgchart.Chart{
			{Title: "Speed as concurrency rises", XLabel: "concurrency", YLabel: "tokens/s",
				Series: []svgchart.Series{{Name: "per request (median)", X: c, Y: speed}, {Name: "throughput / 10", X: c, Y: scale(tput, 0.1)}}},
			{Title: "TTFT p50 (ms)", XLabel: "concurrency", YLabel: "ms", Series: []svgchart.Series{{Name: "TTFT p50", X: c, Y: ttft}}},
			{Title: "KV cache and preemptions", XLabel: "concurrency", YLabel: "",
				Series: []svgchart.Series{{Name: "KV cache % (max)", X: c, Y: kv}, {Name: "preemptions/s", X: c, Y: pre}}},
		} {
			if err := ch.Write(bw); err != nil {
				return err
			}
		}
	}
	svgchart.PageEnd(bw)
	return bw.Flush()
}

func scale(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
}

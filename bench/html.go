package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"

	"github.com/infergate/infergate/internal/svgchart"
)

// WriteHTML renders the record as one self-contained HTML page: the
// conditions and the headline figures as tables at the top, then the
// charts, drawn as inline SVG (no script, nothing fetched: the page opens
// from a file on a machine with no network): TTFT, TPOT and end-to-end
// distributions as CDFs, throughput and TTFT over time, and for a sweep
// the throughput-latency curve with its knee.
func (r *Record) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	title := "infergate bench: " + r.Conditions.URL
	svgchart.PageStart(bw, title)
	c := r.Conditions
	fmt.Fprintf(bw, "<h2>Conditions</h2>\n<table>\n")
	row := func(k, v string) {
		fmt.Fprintf(bw, "<tr><th>%s</th><td>%s</td></tr>\n", html.EscapeString(k), html.EscapeString(v))
	}
	row("URL", c.URL)
	row("model", c.Workload.Model)
	row("endpoint", fmt.Sprintf("%s, stream %v", c.Workload.Endpoint, c.Workload.Stream))
	row("input / output tokens", fmt.Sprintf("%s / %s", c.Workload.InputTokens, c.Workload.OutputTokens))
	load := fmt.Sprintf("%s, concurrency %d", c.Load.Mode, c.Load.Concurrency)
	if c.Load.Mode == "open" {
		load = fmt.Sprintf("open, %g requests/s (%s)", c.Load.Rate, c.Load.Arrival)
	}
	switch c.Load.Mode {
	case "sessions":
		load = fmt.Sprintf("sessions: %d users at once, %d turns, think time %v", c.Load.Concurrency, c.Workload.Turns, c.Load.ThinkTime)
	case "replay":
		load = fmt.Sprintf("replay ×%g", c.Workload.Speedup)
		if c.Workload.Trace != "" {
			load = fmt.Sprintf("%s trace %s ×%g %s", c.Workload.TraceFormat, c.Workload.Trace, c.Workload.Speedup, c.Workload.TraceWindow)
		}
	}
	row("load", load)
	if cache := c.CacheText(); cache != "" {
		row("cache", cache)
	}
	if c.GatewayConfigHash != "" {
		row("gateway config hash", c.GatewayConfigHash)
	}
	row("started", c.Start.Format("2006-01-02 15:04:05 MST"))
	row("tool, host", fmt.Sprintf("%s, %s (%d CPUs)", c.ToolVersion, c.Host, c.CPUs))
	fmt.Fprintf(bw, "</table>\n<h2>Results</h2>\n<table class=\"num\">\n<tr><th>stage</th><th>level</th><th>requests</th><th>failed</th><th>output tok/s</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th><th>TPOT p50 ms</th><th>e2e p50 ms</th><th>cached prompt tokens</th><th>input tokens asked / by the server</th></tr>\n")
	for _, s := range r.Stages {
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
		fmt.Fprintf(bw, "<tr><td>%d</td><td>%g</td><td>%d</td><td>%d</td><td>%.1f</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			s.Stage, s.Level, s.Requests, s.Failed, s.OutputTokenThroughput, p("ttft", false), p("ttft", true), p("tpot", false), p("e2e", false), cached, input)
	}
	fmt.Fprintf(bw, "</table>\n")
	if r.Knee >= 0 && r.Knee < len(r.Stages) {
		fmt.Fprintf(bw, "<p>knee: stage %d, level %g (the first stage at 90%% of the sweep's peak throughput)</p>\n", r.Knee, r.Stages[r.Knee].Level)
	}
	if r.StopReason != "" {
		fmt.Fprintf(bw, "<p>sweep stopped: %s</p>\n", html.EscapeString(r.StopReason))
	}
	for _, s := range r.Stages {
		if m, rs := s.Metrics["ttfo"], s.Metrics["reasoning"]; m != nil && rs != nil {
			fmt.Fprintf(bw, "<p>stage %d, a reasoning model: time to first output token p50 %.1f ms, of it thinking p50 %.1f ms (TTFT counts the first token of any kind)</p>\n", s.Stage, m.P50, rs.P50)
		}
		if len(s.Turns) == 0 {
			continue
		}
		fmt.Fprintf(bw, "<h3>Stage %d by turn</h3>\n<table class=\"num\">\n<tr><th>turn</th><th>n</th><th>failed</th><th>TTFT p50 ms</th><th>TTFT p90 ms</th><th>e2e p50 ms</th><th>prompt tokens p50</th><th>cached</th></tr>\n", s.Stage)
		for _, t := range s.Turns {
			p90, cached := t.optional("%.1f")
			fmt.Fprintf(bw, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%.1f</td><td>%s</td><td>%.1f</td><td>%.0f</td><td>%s</td></tr>\n", t.Turn, t.N, t.Failed, t.TTFTP50, p90, t.E2EP50, t.PromptTokensP50, cached)
		}
		fmt.Fprintf(bw, "</table>\n")
	}
	fmt.Fprintf(bw, "<h2>Charts</h2>\n")
	for _, m := range []struct{ key, title string }{{"ttft", "TTFT"}, {"tpot", "TPOT"}, {"e2e", "end-to-end latency"}} {
		ch := svgchart.Chart{Title: m.title + " distribution: share of requests at or below each value", XLabel: "ms", YLabel: "share"}
		for _, s := range r.Stages {
			if xs := s.Samples[m.key]; len(xs) > 0 {
				ch.Series = append(ch.Series, svgchart.CDF(fmt.Sprintf("level %g", s.Level), xs, 400))
			}
		}
		if len(ch.Series) > 0 {
			ch.Write(bw)
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
	tok.Write(bw)
	ttft.Write(bw)
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
		sw.Write(bw)
	}
	svgchart.PageEnd(bw)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("bench: html: %w", err)
	}
	return nil
}

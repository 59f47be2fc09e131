package bench

import (
	"fmt"
	"io"
	"slices"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/components"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// WriteHTML renders the record as one HTML page of charts (go-echarts;
// the page loads the ECharts script from its CDN when opened): TTFT and
// TPOT distributions as CDFs, throughput and TTFT over time, and for a
// sweep the throughput-latency curve with its knee.
func (r *Record) WriteHTML(w io.Writer) error {
	page := components.NewPage()
	page.SetPageTitle("infergate bench: " + r.Conditions.URL)
	page.PageTitle = "infergate bench: " + r.Conditions.URL
	for _, m := range []struct{ key, title string }{{"ttft", "TTFT"}, {"tpot", "TPOT"}, {"e2e", "end-to-end latency"}} {
		if c := r.cdf(m.key, m.title); c != nil {
			page.AddCharts(c)
		}
	}
	page.AddCharts(r.overTime())
	if len(r.Stages) > 1 {
		page.AddCharts(r.sweepCurve())
	}
	if err := page.Render(w); err != nil {
		return fmt.Errorf("bench: html: %w", err)
	}
	return nil
}

func xy(x, y float64) opts.LineData { return opts.LineData{Value: []any{x, y}} }

func valueAxes(c *charts.Line, title, sub, x, y string) {
	c.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Subtitle: sub}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: x, Scale: opts.Bool(true)}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: y}),
		charts.WithInitializationOpts(opts.Initialization{Width: "960px", Height: "420px"}),
	)
}

// cdf plots the distribution of one per-request metric, one line per stage.
func (r *Record) cdf(key, title string) *charts.Line {
	c := charts.NewLine()
	valueAxes(c, title+" distribution", "share of requests at or below each value", "ms", "share")
	any := false
	for _, s := range r.Stages {
		xs := slices.Clone(s.Samples[key])
		if len(xs) == 0 {
			continue
		}
		any = true
		slices.Sort(xs)
		step := max(1, len(xs)/400)
		var pts []opts.LineData
		for i := 0; i < len(xs); i += step {
			pts = append(pts, xy(xs[i], float64(i+1)/float64(len(xs))))
		}
		pts = append(pts, xy(xs[len(xs)-1], 1))
		c.AddSeries(fmt.Sprintf("level %g", s.Level), pts, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
	}
	if !any {
		return nil
	}
	return c
}

// overTime plots output tokens/s and the TTFT median per second.
func (r *Record) overTime() *charts.Line {
	c := charts.NewLine()
	valueAxes(c, "Throughput and TTFT over time", "per second of each stage", "s", "tokens/s")
	c.SetGlobalOptions(charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "tokens/s"}))
	c.ExtendYAxis(opts.YAxis{Type: "value", Name: "TTFT p50 (ms)"})
	offset := 0.0
	var tok, ttft []opts.LineData
	for _, s := range r.Stages {
		for _, b := range s.Timeline {
			tok = append(tok, xy(offset+b.T, b.OutputTokens))
			if b.TTFTP50 > 0 {
				ttft = append(ttft, xy(offset+b.T, b.TTFTP50))
			}
		}
		offset += float64(len(s.Timeline))
	}
	c.AddSeries("output tokens/s", tok, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
	c.AddSeries("TTFT p50", ttft, charts.WithLineChartOpts(opts.LineChart{YAxisIndex: 1, ShowSymbol: opts.Bool(false)}))
	return c
}

// sweepCurve plots throughput against TTFT p50 and p99, knee marked.
func (r *Record) sweepCurve() *charts.Line {
	c := charts.NewLine()
	valueAxes(c, "Sweep: throughput against latency", "one point per stage; the knee is the first stage at 90% of peak throughput", "output tokens/s", "TTFT (ms)")
	var p50, p99 []opts.LineData
	for _, s := range r.Stages {
		t := s.Metrics["ttft"]
		if t == nil {
			continue
		}
		p50 = append(p50, opts.LineData{Name: fmt.Sprintf("level %g", s.Level), Value: []any{s.OutputTokenThroughput, t.P50}})
		if t.P99 != nil {
			p99 = append(p99, opts.LineData{Name: fmt.Sprintf("level %g", s.Level), Value: []any{s.OutputTokenThroughput, *t.P99}})
		}
	}
	var mark []charts.SeriesOpts
	if r.Knee >= 0 && r.Knee < len(r.Stages) {
		if t := r.Stages[r.Knee].Metrics["ttft"]; t != nil {
			mark = append(mark, charts.WithMarkPointNameCoordItemOpts(opts.MarkPointNameCoordItem{
				Name: "knee", Coordinate: []any{r.Stages[r.Knee].OutputTokenThroughput, t.P50},
				Label: &opts.Label{Show: opts.Bool(true), Formatter: fmt.Sprintf("knee: level %g", r.Stages[r.Knee].Level)},
			}))
		}
	}
	c.AddSeries("TTFT p50", p50, mark...)
	if len(p99) > 0 {
		c.AddSeries("TTFT p99", p99)
	}
	return c
}

package rank

import (
	"encoding/csv"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/svgchart"
)

func ci(i Interval, format string) string {
	if math.IsNaN(i.Value) {
		return "-"
	}
	if math.IsNaN(i.Lo) || math.IsNaN(i.Hi) {
		return fmt.Sprintf(format, i.Value)
	}
	return fmt.Sprintf(format+" ["+format+", "+format+"]", i.Value, i.Lo, i.Hi)
}

func rankText(p Place) string {
	if p.Tied {
		return strconv.Itoa(p.Rank) + "="
	}
	return strconv.Itoa(p.Rank)
}

// Headline is the run's outcome in one line: who ranked first (every
// endpoint tied for it), out of how many, by which order.
func (r *Record) Headline() string {
	var first []string
	for _, p := range r.Ranking {
		if p.Rank == 1 {
			first = append(first, p.Name)
		}
	}
	if len(first) == 0 {
		return fmt.Sprintf("no ranking (%d endpoints)", len(r.Endpoints))
	}
	tied := ""
	if len(first) > 1 {
		tied = " (tied)"
	}
	return fmt.Sprintf("first: %s%s of %d endpoints, by %s", strings.Join(first, ", "), tied, len(r.Ranking), r.Workload.Order)
}

// Write prints the ranking and each endpoint's figures as a table.
func (r *Record) Write(w io.Writer) {
	wl := r.Workload
	fmt.Fprintf(w, "%d endpoints, %d rounds, started %s\n", len(r.Endpoints), wl.Rounds, r.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	if r.Interrupted {
		fmt.Fprintf(w, "interrupted: the figures are of the requests that finished\n")
	}
	if wl.SLO != "" {
		fmt.Fprintf(w, "objective: %s at %s; order: %s\n", wl.SLO, wl.SLOPercentile, wl.Order)
	} else {
		fmt.Fprintf(w, "order: %s\n", wl.Order)
	}
	fmt.Fprintf(w, "\n%-5s %-20s %-8s %-22s %-22s %-22s %-16s %-8s %-14s %-10s %-10s\n", "rank", "endpoint", "slo", "TTFT p50 ms", "TTFT p90 ms", "speed tok/s", "throughput", "errors", "avail (worst)", "$/request", "$/hour")
	for _, p := range r.Ranking {
		e := find(r, p.Name)
		if e == nil {
			continue // a record edited by hand: a place without its endpoint
		}
		f := e.Figures
		slo := f.SLO
		if slo == "" {
			slo = "-"
		}
		fmt.Fprintf(w, "%-5s %-20s %-8s %-22s %-22s %-22s %-16s %-8s %-14s %-10s %-10s\n", rankText(p), e.Name, slo,
			ci(f.TTFTP50, "%.1f"), ci(f.TTFTP90, "%.1f"), ci(f.SpeedP50, "%.1f"), fmt.Sprintf("%.1f tok/s", f.Throughput.Value),
			fmt.Sprintf("%.1f%%", f.ErrorRate.Value*100), fmt.Sprintf("%.1f%% (%.0f%%)", f.Availability*100, f.WorstRound*100),
			fmt.Sprintf("%.6f", f.CostPerRequest.Value), fmt.Sprintf("%.4f", f.CostPerHour))
	}
	fmt.Fprintf(w, "\n")
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
	for _, p := range r.Ranking {
		e := find(r, p.Name)
		if e == nil {
			continue // a record edited by hand: a place without its endpoint
		}
		f := e.Figures
		fmt.Fprintf(w, "%s %s (%s, %s)\n", rankText(p), e.Name, e.URL, e.Model)
		if p.Why != "" {
			fmt.Fprintf(w, "  %s\n", p.Why)
		}
		fmt.Fprintf(w, "  requests %d: %d ok, %d failed%s\n", f.Requests, f.OK, f.Failed, errorsText(f.Errors))
		if f.RetryAfter > 0 {
			fmt.Fprintf(w, "  rate limited: %d answers asked to wait (Retry-After); their requests were held back %.1f s in all, none sent before its time\n", f.RetryAfter, f.HeldS)
		}
		if f.Attainment != nil {
			fmt.Fprintf(w, "  SLO: %s, attainment %s\n", f.SLO, ciPct(*f.Attainment))
		}
		fmt.Fprintf(w, "  probe (new connection each, medians): dns %.1f ms, connect %.1f ms, tls %.1f ms, wait %.1f ms, first token %.1f ms, TTFT %.1f ms\n",
			f.Probe.DNS, f.Probe.Connect, f.Probe.TLS, f.Probe.Wait, f.Probe.FirstToken, f.Probe.TTFT)
		fmt.Fprintf(w, "  tokens: %d prompt (%d cached), %d output%s\n", f.PromptTokens, f.CachedTokens, f.OutputTokens, missingText(f.UsageMissing))
		fmt.Fprintf(w, "  cost: %s a request, %.4f per M output tokens at this mix, %.4f per M tokens at this mix, %.4f per M blended 3:1, %.4f an hour of %s (price: %s)\n",
			ci(f.CostPerRequest, "%.6f"), f.CostPerMOutput, f.CostPerMTokens, f.Blended, f.CostPerHour, r.Workload.HourlyLoad(), e.Price)
		if e.Stopped != "" {
			fmt.Fprintf(w, "  stopped: %s\n", e.Stopped)
		}
	}
}

func ciPct(i Interval) string {
	return fmt.Sprintf("%.1f%% [%.1f%%, %.1f%%]", i.Value*100, i.Lo*100, i.Hi*100)
}

func errorsText(m map[string]int) string {
	var parts []string
	for _, c := range Classes {
		if n := m[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (failures, probes included: " + strings.Join(parts, ", ") + ")"
}

func missingText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d answers without usage: their tokens, and so their cost, are cl100k_base counts of the prompt and the answer, an estimate)", n)
}

// csvHeader is the columns of WriteCSV.
var csvHeader = []string{"rank", "tied", "endpoint", "url", "model", "slo", "slo_attainment", "ttft_p50_ms", "ttft_p50_lo", "ttft_p50_hi", "ttft_p90_ms",
	"speed_p50", "output_tokens_per_s", "requests", "failed", "error_rate", "availability", "worst_round", "retry_after", "held_s",
	"prompt_tokens", "cached_tokens", "output_tokens", "cost_per_request", "cost_per_m_output", "cost_per_m_tokens", "blended_3to1", "cost_per_hour",
	"price_input", "price_cached_input", "price_output"}

// WriteCSV writes one row per endpoint, in ranking order.
func (r *Record) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader)
	g := func(f float64) string { return strconv.FormatFloat(f, 'g', 8, 64) }
	for _, p := range r.Ranking {
		e := find(r, p.Name)
		if e == nil {
			continue // a record edited by hand: a place without its endpoint
		}
		f := e.Figures
		att := ""
		if f.Attainment != nil {
			att = g(f.Attainment.Value)
		}
		_ = cw.Write([]string{strconv.Itoa(p.Rank), strconv.FormatBool(p.Tied), e.Name, e.URL, e.Model, f.SLO, att,
			g(f.TTFTP50.Value), g(f.TTFTP50.Lo), g(f.TTFTP50.Hi), g(f.TTFTP90.Value), g(f.SpeedP50.Value), g(f.Throughput.Value),
			strconv.Itoa(f.Requests), strconv.Itoa(f.Failed), g(f.ErrorRate.Value), g(f.Availability), g(f.WorstRound),
			strconv.Itoa(f.RetryAfter), g(f.HeldS), strconv.FormatInt(f.PromptTokens, 10), strconv.FormatInt(f.CachedTokens, 10),
			strconv.FormatInt(f.OutputTokens, 10), g(f.CostPerRequest.Value), g(f.CostPerMOutput), g(f.CostPerMTokens), g(f.Blended), g(f.CostPerHour),
			g(e.Price.Input), g(e.Price.Cached()), g(e.Price.Output)})
	}
	cw.Flush()
	return cw.Error()
}

// htmlPage is what the run's page shows, every value as text the
// template escapes; only the charts go in as markup.
type htmlPage struct {
	Title, Bound, Order, SLO, Percentile, Started, Host string
	Ranking                                             [][]string
	Rounds                                              []template.HTML
	Runs                                                int // with history, how many runs
	History                                             []template.HTML
	Flags                                               []Flag
}

var pageHTML = svgchart.Page(`{{define "body"}}<p>{{.Bound}}</p>
<p>order: {{.Order}}{{if .SLO}}; objective {{.SLO}} at {{.Percentile}}{{end}}; started {{.Started}} on {{.Host}}</p>
<h2>Ranking</h2>
<table class="num">
<tr><th>rank</th><th>endpoint</th><th>SLO</th><th>TTFT p50 ms</th><th>TTFT p90 ms</th><th>speed tok/s</th><th>throughput tok/s</th><th>error rate</th><th>availability</th><th>$/request</th><th>$/M output</th><th>blended 3:1</th><th>$/hour</th><th>why</th></tr>
{{template "rows" .Ranking}}</table>
<h2>By round</h2>
{{range .Rounds}}{{.}}{{end}}{{if .Runs}}<h2>Over {{.Runs}} runs</h2>
{{range .History}}{{.}}{{end}}<h3>Changes beyond noise</h3>
<ul>
{{range .Flags}}<li>{{.Endpoint}}: {{.What}}</li>
{{else}}<li>none between consecutive runs</li>
{{end}}</ul>
{{end}}{{end}}`)

// WriteHTML renders the run as one self-contained page (no script,
// nothing fetched): the ranking and the figures as a table, then a chart
// per figure over the rounds, and, given earlier runs (oldest first, this
// one last), each figure over the runs with the flags.
func (r *Record) WriteHTML(w io.Writer, history []*Record, flags []Flag) error {
	pg := htmlPage{Title: "infergate rank", Bound: r.Bound, Order: r.Workload.Order, SLO: r.Workload.SLO, Percentile: r.Workload.SLOPercentile,
		Started: r.Start.UTC().Format("2006-01-02 15:04:05 UTC"), Host: r.Host, Flags: flags}
	for _, p := range r.Ranking {
		e := find(r, p.Name)
		if e == nil {
			continue // a record edited by hand: a place without its endpoint
		}
		f := e.Figures
		pg.Ranking = append(pg.Ranking, []string{rankText(p), e.Name, f.SLO, ci(f.TTFTP50, "%.1f"), ci(f.TTFTP90, "%.1f"), ci(f.SpeedP50, "%.1f"),
			fmt.Sprintf("%.1f", f.Throughput.Value), fmt.Sprintf("%.1f%%", f.ErrorRate.Value*100), fmt.Sprintf("%.1f%%", f.Availability*100),
			ci(f.CostPerRequest, "%.6f"), fmt.Sprintf("%.4f", f.CostPerMOutput), fmt.Sprintf("%.4f", f.Blended), fmt.Sprintf("%.4f", f.CostPerHour), p.Why})
	}
	for _, c := range []struct {
		title, unit string
		v           func(Round) float64
	}{
		{"TTFT p50", "ms", func(x Round) float64 { return x.TTFTP50 }},
		{"Output speed of a request, p50", "tokens/s", func(x Round) float64 { return x.SpeedP50 }},
		{"Throughput at the concurrency", "output tokens/s", func(x Round) float64 { return x.Throughput }},
		{"Cost per request", "cost", func(x Round) float64 { return x.CostPerRequest }},
		{"Answered share", "share", func(x Round) float64 { return share(x.OK, x.Requests) }},
		{"Probe TTFT (new connection)", "ms", func(x Round) float64 { return x.Probe.TTFT }},
	} {
		ch := svgchart.Chart{Title: c.title + ", by round", XLabel: "round", YLabel: c.unit}
		for _, e := range r.Endpoints {
			s := svgchart.Series{Name: e.Name}
			for _, rd := range e.Rounds {
				s.X, s.Y = append(s.X, float64(rd.Round+1)), append(s.Y, c.v(rd))
			}
			ch.Series = append(ch.Series, s)
		}
		pg.Rounds = append(pg.Rounds, ch.SVG())
	}
	ttft := svgchart.Chart{Title: "TTFT distribution: share of requests at or below each value", XLabel: "ms", YLabel: "share"}
	for _, e := range r.Endpoints {
		if xs := ttfts(e); len(xs) > 0 {
			ttft.Series = append(ttft.Series, svgchart.CDF(e.Name, xs, 400))
		}
	}
	pg.Rounds = append(pg.Rounds, ttft.SVG())
	if len(history) > 1 {
		pg.Runs = len(history)
		for _, c := range []struct {
			title, unit string
			v           func(Figures) float64
		}{
			{"TTFT p50", "ms", func(f Figures) float64 { return f.TTFTP50.Value }},
			{"Speed p50", "tokens/s", func(f Figures) float64 { return f.SpeedP50.Value }},
			{"Error rate", "share", func(f Figures) float64 { return f.ErrorRate.Value }},
			{"Cost per request", "cost", func(f Figures) float64 { return f.CostPerRequest.Value }},
		} {
			ch := svgchart.Chart{Title: c.title + ", run by run", XLabel: "run", YLabel: c.unit}
			for _, e := range r.Endpoints {
				s := svgchart.Series{Name: e.Name}
				for i, h := range history {
					if x := find(h, e.Name); x != nil {
						s.X, s.Y = append(s.X, float64(i+1)), append(s.Y, c.v(x.Figures))
					}
				}
				ch.Series = append(ch.Series, s)
			}
			pg.History = append(pg.History, ch.SVG())
		}
	}
	if err := svgchart.WritePage(w, pageHTML, pg); err != nil {
		return fmt.Errorf("rank: html: %w", err)
	}
	return nil
}

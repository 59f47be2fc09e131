package tune

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/svgchart"
)

// decided are the baseline and each step's outcome, in order.
func (r *Result) decided() []Entry {
	var out []Entry
	for _, e := range r.Steps {
		if e.Event == "baseline" || e.Event == "keep" || e.Event == "roll back" {
			out = append(out, e)
		}
	}
	return out
}

// WriteSummary prints the walk in a table: goodput and attainment at the
// baseline and after each knob, what was decided, and where the gateway
// ends.
func (r *Result) WriteSummary(w io.Writer) {
	d := r.decided()
	if len(d) == 0 {
		if r.Stopped != "" && r.Stopped != "dry run" {
			fmt.Fprintf(w, "\ntune: stopped before a baseline: %s\n", r.Stopped)
		}
		return
	}
	fmt.Fprintf(w, "\n== summary (objective: %s; bottleneck: %s)\n", r.Objective, r.Bottleneck)
	if r.Rule != "" {
		fmt.Fprintf(w, "size: %s\nrule: %s\n", r.Size, r.Rule)
	}
	fmt.Fprintf(w, "%-4s %-11s %-42s %12s %11s  %s\n", "step", "knob", "change", "goodput/s", "attainment", "decision")
	for _, e := range d {
		change, decision := "", "baseline"
		if e.Event != "baseline" {
			change, decision = strings.Join(e.Diff, "; "), e.Event
		}
		if e.Decided != "" {
			decision += " (" + e.Verdict + ": " + e.Decided + ")"
		}
		fmt.Fprintf(w, "%-4d %-11s %-42s %12.2f %10.1f%%  %s\n", e.Step, e.Knob, clip(change, 42), e.Goodput, e.Attainment*100, decision)
	}
	fmt.Fprintf(w, "the gateway runs configuration version %d (%s)", r.Final.Version, r.Final.Hash)
	if r.Final.Hash == r.Start.Hash {
		fmt.Fprintf(w, ", the one it started with")
	}
	fmt.Fprintln(w)
	if r.Stopped != "" {
		fmt.Fprintf(w, "stopped early: %s\n", r.Stopped)
	}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Headline is the walk's outcome in one line, and its tone (see
// svgchart.Tone): the steps kept of those judged, and goodput from the
// baseline to where the gateway ends.
func (r *Result) Headline() (line, tone string) {
	d := r.decided()
	if len(d) == 0 {
		if r.Stopped != "" {
			return "stopped before a baseline: " + r.Stopped, "bad"
		}
		return "no measurement", ""
	}
	kept, judged := 0, 0
	for _, e := range d[1:] {
		judged++
		if e.Event == "keep" {
			kept++
		}
	}
	end := d[0]
	for _, e := range d {
		if e.Event != "roll back" {
			end = e // the last step in force: the baseline or a kept one
		}
	}
	line = fmt.Sprintf("kept %d of %d steps: goodput %.2f → %.2f req/s, attainment %.1f%% → %.1f%%", kept, judged, d[0].Goodput, end.Goodput,
		d[0].Attainment*100, end.Attainment*100)
	switch {
	case judged == 0:
		return "baseline only: goodput " + fmt.Sprintf("%.2f req/s, attainment %.1f%%", d[0].Goodput, d[0].Attainment*100), ""
	case kept > 0:
		return line, "good"
	}
	return line + " (the gateway keeps the configuration it started with)", "unsure"
}

// htmlPage is what the walk's page shows, every value as text the
// template escapes; only the charts go in as markup.
type htmlPage struct {
	Title                            string
	Objective, Bottleneck, Diagnosis string
	Size, Rule                       string
	Charts                           []template.HTML
	Steps, Next                      [][]string
	Version                          int
	Hash, Stopped, Shadow            string
	Headline, Tone                   string
}

var pageHTML = svgchart.Page(`{{define "body"}}<p class="verdict {{.Tone}}">{{.Headline}}</p>
<p>objective: {{.Objective}}; bottleneck: {{.Bottleneck}}: {{.Diagnosis}}</p>
{{if .Rule}}<p>size: {{.Size}}</p>
<p>rule: {{.Rule}}</p>
{{end}}{{range .Charts}}{{.}}{{end}}<table>
<tr><th>step</th><th>knob</th><th>change</th><th>goodput/s</th><th>attainment</th><th>decision</th><th>why</th></tr>
{{template "rows" .Steps}}</table>
<p>the gateway ends on configuration version {{.Version}} ({{.Hash}})</p>
{{with .Stopped}}<p>stopped early: {{.}}</p>
{{end}}{{if .Next}}<h2>Next: the backend's knobs, to shadow-test in this order</h2>
<table>
<tr><th>knob</th><th>action</th><th>not if</th></tr>
{{template "rows" .Next}}</table>
<pre>{{.Shadow}}</pre>
{{end}}{{end}}`)

// WriteHTML writes the walk as one self-contained page: a chart of
// goodput and attainment per step, the steps with their verdicts and
// reasons, and the backend's knobs to shadow-test next.
func (r *Result) WriteHTML(w io.Writer) error {
	pg := htmlPage{Title: "infergate tune", Objective: r.Objective, Bottleneck: r.Bottleneck, Diagnosis: r.Diagnosis, Rule: r.Rule,
		Version: r.Final.Version, Hash: r.Final.Hash, Stopped: r.Stopped}
	pg.Headline, pg.Tone = r.Headline()
	if r.Rule != "" {
		pg.Size = r.Size.String()
	}
	d := r.decided()
	var x, good, att []float64
	for i, e := range d {
		x, good, att = append(x, float64(i)), append(good, e.Goodput), append(att, e.Attainment*100)
		pg.Steps = append(pg.Steps, []string{strconv.Itoa(e.Step), e.Knob, strings.Join(e.Diff, "; "), fmt.Sprintf("%.2f", e.Goodput),
			fmt.Sprintf("%.1f%%", e.Attainment*100), e.Event, strings.Join(e.Reasons, "; ")})
	}
	for _, c := range []svgchart.Chart{
		{Title: "Goodput per step (0 = baseline)", XLabel: "step", YLabel: "requests/s meeting every SLO", Series: []svgchart.Series{{Name: "goodput", X: x, Y: good, Steps: true}}},
		{Title: "SLO attainment per step", XLabel: "step", YLabel: "% of requests", Series: []svgchart.Series{{Name: "attainment", X: x, Y: att, Steps: true}}},
	} {
		pg.Charts = append(pg.Charts, c.SVG())
	}
	for _, s := range r.Next {
		pg.Next = append(pg.Next, []string{s.Knob, s.Action, s.Not})
	}
	if len(r.Next) > 0 {
		pg.Shadow = strings.Join(r.Next[0].Shadow, "\n")
	}
	if err := svgchart.WritePage(w, pageHTML, pg); err != nil {
		return fmt.Errorf("tune: html: %w", err)
	}
	return nil
}

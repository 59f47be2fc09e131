package tune

import (
	"bufio"
	"fmt"
	"html"
	"io"
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

// WriteHTML writes the walk as one self-contained page: a chart of
// goodput and attainment per step, the steps with their verdicts and
// reasons, and the backend's knobs to shadow-test next.
func (r *Result) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	svgchart.PageStart(bw, "infergate tune")
	esc := html.EscapeString
	fmt.Fprintf(bw, "<p>objective: %s; bottleneck: %s: %s</p>\n", esc(r.Objective), esc(r.Bottleneck), esc(r.Diagnosis))
	if r.Rule != "" {
		fmt.Fprintf(bw, "<p>size: %s</p>\n<p>rule: %s</p>\n", esc(r.Size.String()), esc(r.Rule))
	}
	d := r.decided()
	var x, good, att []float64
	for i, e := range d {
		x, good, att = append(x, float64(i)), append(good, e.Goodput), append(att, e.Attainment*100)
	}
	for _, c := range []svgchart.Chart{
		{Title: "Goodput per step (0 = baseline)", XLabel: "step", YLabel: "requests/s meeting every SLO", Series: []svgchart.Series{{Name: "goodput", X: x, Y: good}}},
		{Title: "SLO attainment per step", XLabel: "step", YLabel: "% of requests", Series: []svgchart.Series{{Name: "attainment", X: x, Y: att}}},
	} {
		if err := c.Write(bw); err != nil {
			return err
		}
	}
	fmt.Fprintf(bw, "<table>\n<tr><th>step</th><th>knob</th><th>change</th><th>goodput/s</th><th>attainment</th><th>decision</th><th>why</th></tr>\n")
	for _, e := range d {
		fmt.Fprintf(bw, "<tr><td>%d</td><td>%s</td><td>%s</td><td>%.2f</td><td>%.1f%%</td><td>%s</td><td>%s</td></tr>\n", e.Step, esc(e.Knob),
			esc(strings.Join(e.Diff, "; ")), e.Goodput, e.Attainment*100, esc(e.Event), esc(strings.Join(e.Reasons, "; ")))
	}
	fmt.Fprintf(bw, "</table>\n<p>the gateway ends on configuration version %d (%s)</p>\n", r.Final.Version, esc(r.Final.Hash))
	if r.Stopped != "" {
		fmt.Fprintf(bw, "<p>stopped early: %s</p>\n", esc(r.Stopped))
	}
	if len(r.Next) > 0 {
		fmt.Fprintf(bw, "<h2>Next: the backend's knobs, to shadow-test in this order</h2>\n<table>\n<tr><th>knob</th><th>action</th><th>not if</th></tr>\n")
		for _, s := range r.Next {
			fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(s.Knob), esc(s.Action), esc(s.Not))
		}
		fmt.Fprintf(bw, "</table>\n<pre>%s</pre>\n", esc(strings.Join(r.Next[0].Shadow, "\n")))
	}
	svgchart.PageEnd(bw)
	return bw.Flush()
}

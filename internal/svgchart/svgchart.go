// Package svgchart draws line charts as inline SVG: axes with ticks, one
// polyline per series, a legend. A report that embeds them is one file
// that opens on a machine with no network and no script. Page is the
// html/template shell every report page sits in (its security policy,
// title and style), the charts the only markup it takes as it is.
package svgchart

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one line: points (X[i], Y[i]). Steps draws it as a
// staircase with a dot at each point: a value that holds from one
// discrete step to the next (a tuning walk), not one that varies between.
type Series struct {
	Name  string
	X, Y  []float64
	Steps bool
}

// Chart is a line chart.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Width and Height in pixels; default 1240 × 360 (the page's width:
	// the page scales it down on a narrower window).
	Width, Height int
}

// palette: Okabe and Ito's colour-blind-safe eight (less the yellow, too
// pale on white) then five more as distinct from them, enough for a
// sweep of 12 levels before a colour repeats; a repeat is dashed.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
	"#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD"}

const (
	left, right, top, bottom = 64, 16, 36, 56
	legendRow                = 16 // px between the legend's rows
)

// legendEntry is where one series' legend goes, and its colour.
type legendEntry struct {
	x, row int
	colour string
	dash   bool
}

// legend lays the series' names out along the bottom, wrapping to a new
// row rather than past the right edge: every series gets an entry.
func legend(series []Series, width int) []legendEntry {
	out := make([]legendEntry, len(series))
	x, row := left, 0
	for i, s := range series {
		w := 30 + 7*len([]rune(s.Name)) // swatch, gap, about 7 px a character at 11 px
		if x > left && x+w > width-right {
			x, row = left, row+1
		}
		out[i] = legendEntry{x: x, row: row, colour: palette[i%len(palette)], dash: i >= len(palette)}
		x += w + 12
	}
	return out
}

// Write writes the chart as an <svg> element. A chart without points
// writes a note instead.
func (c *Chart) Write(w io.Writer) error {
	width, height := c.Width, c.Height
	if width == 0 {
		width = 1240
	}
	if height == 0 {
		height = 360
	}
	// base is the height without the legend's extra rows, which go below.
	base, keys := height, legend(c.Series, width)
	if len(keys) > 0 {
		height += keys[len(keys)-1].row * legendRow
	}

	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		for i := range min(len(s.X), len(s.Y)) {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			n++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		width, height, width, height, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold" font-family="sans-serif">%s</text>`, left, html.EscapeString(c.Title))
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" font-family="sans-serif" fill="#666">no data</text></svg>`, left, base/2)
		_, err := io.WriteString(w, b.String())
		return err
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	xt, yt := ticks(xmin, xmax, 6), ticks(ymin, ymax, 5)
	if c.steps() {
		xt = whole(xt) // there is no step 1.5
	}
	xmin, xmax = math.Min(xmin, xt[0]), math.Max(xmax, xt[len(xt)-1])
	ymin, ymax = math.Min(ymin, yt[0]), math.Max(ymax, yt[len(yt)-1])
	pw, ph := float64(width-left-right), float64(base-top-bottom)
	px := func(x float64) float64 { return float64(left) + (x-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return float64(top) + ph - (y-ymin)/(ymax-ymin)*ph }
	// Grid and ticks.
	for _, y := range yt {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, left, width-right, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end" font-family="sans-serif" fill="#444">%s</text>`, left-6, py(y)+4, label(y))
	}
	for _, x := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#e5e5e5"/>`, px(x), px(x), top, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" font-family="sans-serif" fill="#444">%s</text>`, px(x), float64(top)+ph+16, label(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle" font-family="sans-serif">%s</text>`, float64(left)+pw/2, base-22, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" font-family="sans-serif" transform="rotate(-90 14 %.1f)">%s</text>`, float64(top)+ph/2, float64(top)+ph/2, html.EscapeString(c.YLabel))
	// Lines.
	for i, s := range c.Series {
		k := keys[i]
		dash := ""
		if k.dash {
			dash = ` stroke-dasharray="6 3"`
		}
		var pts strings.Builder
		var dots []string
		prevY := math.NaN()
		for j := range min(len(s.X), len(s.Y)) {
			x, y := s.X[j], s.Y[j]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
				continue
			}
			if s.Steps && !math.IsNaN(prevY) {
				fmt.Fprintf(&pts, "%.1f,%.1f ", px(x), py(prevY)) // hold the last value to this step
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(x), py(y))
			if s.Steps {
				dots = append(dots, fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, px(x), py(y), k.colour))
			}
			prevY = y
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`,
			k.colour, dash, strings.TrimSpace(pts.String()), html.EscapeString(s.Name))
		b.WriteString(strings.Join(dots, ""))
		// Legend, along the bottom, wrapped into rows.
		ly := base - 6 + k.row*legendRow
		fmt.Fprintf(&b, `<g class="legend"><line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"%s/>`, k.x, k.x+18, ly, ly, k.colour, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" font-family="sans-serif">%s</text></g>`, k.x+22, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}

// steps reports whether every series is drawn as steps.
func (c *Chart) steps() bool {
	for _, s := range c.Series {
		if !s.Steps {
			return false
		}
	}
	return len(c.Series) > 0
}

// whole keeps the whole-number ticks, when at least two are.
func whole(ts []float64) []float64 {
	var out []float64
	for _, t := range ts {
		if t == math.Trunc(t) {
			out = append(out, t)
		}
	}
	if len(out) < 2 {
		return ts
	}
	return out
}

// ticks returns about n round values spanning [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v <= hi+step*0.5 && len(out) < 50; v += step {
		out = append(out, v)
	}
	if len(out) < 2 {
		out = append(out, start+step)
	}
	return out
}

func label(v float64) string {
	if v != 0 && (math.Abs(v) >= 1e6 || math.Abs(v) < 1e-3) {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// CDF returns the points of the empirical distribution of values: x the
// sorted values, y the share at or below each, at most max points.
func CDF(name string, values []float64, max int) Series {
	xs := slices.Clone(values)
	slices.Sort(xs)
	s := Series{Name: name}
	if len(xs) == 0 {
		return s
	}
	step := 1
	if max > 0 && len(xs) > max {
		step = len(xs) / max
	}
	for i := 0; i < len(xs); i += step {
		s.X = append(s.X, xs[i])
		s.Y = append(s.Y, float64(i+1)/float64(len(xs)))
	}
	s.X = append(s.X, xs[len(xs)-1])
	s.Y = append(s.Y, 1)
	return s
}

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

// Series is one line: points (X[i], Y[i]).
type Series struct {
	Name string
	X, Y []float64
}

// Chart is a line chart.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Width and Height in pixels; default 720 × 320.
	Width, Height int
}

// palette is colour-blind safe (Okabe and Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

const (
	left, right, top, bottom = 64, 16, 36, 56
)

// Write writes the chart as an <svg> element. A chart without points
// writes a note instead.
func (c *Chart) Write(w io.Writer) error {
	width, height := c.Width, c.Height
	if width == 0 {
		width = 720
	}
	if height == 0 {
		height = 320
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
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" font-family="sans-serif" fill="#666">no data</text></svg>`, left, height/2)
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
	xmin, xmax = math.Min(xmin, xt[0]), math.Max(xmax, xt[len(xt)-1])
	ymin, ymax = math.Min(ymin, yt[0]), math.Max(ymax, yt[len(yt)-1])
	pw, ph := float64(width-left-right), float64(height-top-bottom)
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
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle" font-family="sans-serif">%s</text>`, float64(left)+pw/2, height-22, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" font-family="sans-serif" transform="rotate(-90 14 %.1f)">%s</text>`, float64(top)+ph/2, float64(top)+ph/2, html.EscapeString(c.YLabel))
	// Lines.
	for i, s := range c.Series {
		colour := palette[i%len(palette)]
		var pts strings.Builder
		for j := range min(len(s.X), len(s.Y)) {
			x, y := s.X[j], s.Y[j]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(x), py(y))
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`,
			colour, strings.TrimSpace(pts.String()), html.EscapeString(s.Name))
		// Legend, along the bottom.
		lx := left + i*150
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`, lx, lx+18, height-6, height-6, colour)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" font-family="sans-serif">%s</text>`, lx+22, height-2, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
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

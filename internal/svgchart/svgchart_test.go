package svgchart

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// legendKeys parses an SVG's legend: each entry's colour and name, and
// the right edge of its text as laid out.
func legendKeys(t *testing.T, svg string) (colours, names []string, rightmost int) {
	t.Helper()
	type line struct {
		Stroke string `xml:"stroke,attr"`
		Dash   string `xml:"stroke-dasharray,attr"`
	}
	type text struct {
		X    string `xml:"x,attr"`
		Body string `xml:",chardata"`
	}
	var doc struct {
		G []struct {
			Class string `xml:"class,attr"`
			Line  line   `xml:"line"`
			Text  text   `xml:"text"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("the chart is not XML: %v", err)
	}
	for _, g := range doc.G {
		if g.Class != "legend" {
			continue
		}
		colours = append(colours, g.Line.Stroke+g.Line.Dash)
		names = append(names, g.Text.Body)
		x, _ := strconv.Atoi(g.Text.X)
		rightmost = max(rightmost, x+7*len(g.Text.Body))
	}
	return colours, names, rightmost
}

// TestLegendEveryLevel: a sweep of 1 to 64 (and one of 14 levels) keeps
// an entry per level in the legend, each its own colour, all inside the
// chart: the old legend ran off the right edge past level 16.
func TestLegendEveryLevel(t *testing.T) {
	for _, levels := range [][]float64{{1, 2, 4, 8, 16, 32, 64}, {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}} {
		c := Chart{Title: "TTFT", XLabel: "ms", YLabel: "share"}
		for _, l := range levels {
			c.Series = append(c.Series, Series{Name: fmt.Sprintf("level %g", l), X: []float64{l, 2 * l}, Y: []float64{0.5, 1}})
		}
		svg := string(c.SVG())
		colours, names, right := legendKeys(t, svg)
		if len(names) != len(levels) {
			t.Fatalf("%d levels, %d legend entries: %q", len(levels), len(names), names)
		}
		seen := map[string]string{}
		for i, col := range colours {
			if other, ok := seen[col]; ok {
				t.Errorf("%s and %s share colour %s", other, names[i], col)
			}
			seen[col] = names[i]
			if want := fmt.Sprintf("level %g", levels[i]); names[i] != want {
				t.Errorf("entry %d is %q, want %q", i, names[i], want)
			}
		}
		if right > 1240 {
			t.Errorf("the legend reaches x=%d, past the chart's 1240 px", right)
		}
	}
}

// TestStepsAreSteps: a series of discrete steps holds each value until
// the next step (a horizontal then a vertical segment), with a dot at
// each step and whole-number ticks.
func TestStepsAreSteps(t *testing.T) {
	c := Chart{Title: "goodput", Series: []Series{{Name: "goodput", X: []float64{0, 1, 2}, Y: []float64{1, 3, 2}, Steps: true}}}
	svg := string(c.SVG())
	i := strings.Index(svg, `points="`)
	pts := strings.Fields(svg[i+len(`points="`) : i+strings.Index(svg[i:], `">`)])
	if len(pts) != 5 {
		t.Fatalf("points %q: want 5 (a step up and a step down)", pts)
	}
	for k := 1; k < len(pts); k++ {
		a, b := strings.Split(pts[k-1], ","), strings.Split(pts[k], ",")
		if a[0] != b[0] && a[1] != b[1] {
			t.Errorf("segment %s → %s is diagonal", pts[k-1], pts[k])
		}
	}
	if n := strings.Count(svg, "<circle"); n != 3 {
		t.Errorf("%d dots, want one per step (3)", n)
	}
	if strings.Contains(svg, ">0.5<") || strings.Contains(svg, ">1.5<") {
		t.Error("a tick at a half step")
	}
}

func TestTone(t *testing.T) {
	for v, want := range map[string]string{"KEEP": "good", "roll back": "bad", "ROLL BACK": "bad", "INCONCLUSIVE": "unsure", "holds": "good",
		"regressed": "bad", "unsure": "unsure", "keep the cap": "", "": ""} {
		if got := Tone(v); got != want {
			t.Errorf("Tone(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestIndex: the index links each page and colours its verdict; a
// hostile title is escaped.
func TestIndex(t *testing.T) {
	var b strings.Builder
	err := WriteIndex(&b, "demo", []IndexEntry{{File: "1-tune.html", Title: "tune", Verdict: "KEEP", Tone: "good"},
		{File: "2-shadow.html", Title: "<script>x</script>", Verdict: "ROLL BACK", Tone: "bad"}})
	page := b.String()
	if err != nil || !strings.Contains(page, `<a href="1-tune.html">tune</a>`) || !strings.Contains(page, `<td class="bad">ROLL BACK</td>`) ||
		strings.Contains(page, "<script>") || !strings.Contains(page, CSP) {
		t.Errorf("err %v, page:\n%s", err, page)
	}
}

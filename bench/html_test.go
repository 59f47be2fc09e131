package bench

import (
	"encoding/xml"
	"regexp"
	"strings"
	"testing"
)

// sweepRecord is a closed-loop sweep of 1 to 64 whose throughput still
// doubles at 64: no knee.
func sweepRecord() *Record {
	levels := []float64{1, 2, 4, 8, 16, 32, 64}
	rec := &Record{Conditions: Conditions{URL: "http://127.0.0.1:1", Workload: WorkloadSpec{Model: "m", Endpoint: "chat", Stream: true},
		Load: LoadSpec{Mode: "closed", Concurrency: 1}, Sweep: levels}}
	for i, l := range levels {
		s := &Summary{Stage: i, Level: l, Requests: 50, OK: 50, OutputTokenThroughput: 30 * l,
			Metrics: map[string]*Percentiles{"ttft": {N: 50, P50: 40 + l}}, Samples: map[string][]float64{}}
		for j := range 50 {
			s.Samples["ttft"] = append(s.Samples["ttft"], 30+float64(j)+l)
		}
		rec.Stages = append(rec.Stages, s)
	}
	rec.Knee = knee(rec.Stages)
	return rec
}

// TestSweepPage: a sweep's page states every level it swept (not the
// first level as "concurrency 1"), has a legend entry per level in the
// TTFT chart, each in its own colour, and says there is no knee within
// the levels when throughput never flattened.
func TestSweepPage(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := sweepRecord().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "closed, concurrency swept over 1, 2, 4, 8, 16, 32, 64 (7 levels)") || strings.Contains(page, "concurrency 1,") {
		t.Errorf("the conditions do not state the sweep:\n%s", page)
	}
	if !strings.Contains(page, "no knee within these levels") || strings.Contains(page, "knee: stage") {
		t.Errorf("a sweep still rising at 64 marks a knee:\n%s", page)
	}
	svg := regexp.MustCompile(`(?s)<svg[^>]*aria-label="TTFT distribution.*?</svg>`).FindString(page)
	var doc struct {
		G []struct {
			Class string `xml:"class,attr"`
			Line  struct {
				Stroke string `xml:"stroke,attr"`
			} `xml:"line"`
			Text string `xml:"text"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("TTFT chart: %v\n%s", err, svg)
	}
	colours := map[string]string{}
	var names []string
	for _, g := range doc.G {
		if g.Class != "legend" {
			continue
		}
		names = append(names, g.Text)
		if other, ok := colours[g.Line.Stroke]; ok {
			t.Errorf("%s and %s share colour %s", other, g.Text, g.Line.Stroke)
		}
		colours[g.Line.Stroke] = g.Text
	}
	if want := "level 1,level 2,level 4,level 8,level 16,level 32,level 64"; strings.Join(names, ",") != want {
		t.Errorf("legend %q, want %s", names, want)
	}
}

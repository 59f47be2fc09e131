package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/infergate/infergate/internal/promtext"
)

// The gateway's per-class series (issue 45), read from its /metrics.
const (
	metricClassQueue     = "infergate_class_queue_seconds"      // histogram, class
	metricClassTTFT      = "infergate_class_ttft_seconds"       // histogram, class
	metricClassRequests  = "infergate_class_requests_total"     // counter, class and outcome
	metricClassShed      = "infergate_class_shed_total"         // counter, class
	metricClassPreempted = "infergate_class_preempted_total"    // counter, class
	metricClassSLO       = "infergate_class_slo_attained_total" // counter, class
	outcomeOK            = "ok"
)

// classOrder is the order of the classes' rows: highest first, then any
// other the gateway reports.
var classOrder = []string{"priority", "default", "flex"}

// classView renders the per-class rows of top: each frame's figures are
// over the time since the frame before (since the gateway started, on the
// first), from the difference of two scrapes.
type classView struct {
	prev *promtext.Scrape
}

// render writes the by-class table of cur, nothing when the gateway has
// no per-class series.
func (v *classView) render(w io.Writer, cur *promtext.Scrape) {
	prev := v.prev
	v.prev = cur
	if !cur.Has(metricClassRequests) {
		return
	}
	classes := cur.LabelValues(metricClassRequests, "class")
	slices.SortStableFunc(classes, func(a, b string) int { return classRank(a) - classRank(b) })
	span := "since the gateway started"
	window := 0.0
	if prev != nil {
		window = cur.At.Sub(prev.At).Seconds()
		span = fmt.Sprintf("last %.1f s", window)
	}
	fmt.Fprintf(w, "\nby class (%s):\n", span)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\trequests\treq/s\tok\tshed\tpreempted\tqueue p50\tp99\tTTFT p50\tp99\tSLO met\t")
	for _, c := range classes {
		where := [2]string{"class", c}
		count := func(name string, extra ...[2]string) float64 {
			now, _ := cur.Sum(name, append(extra, where)...)
			if prev != nil {
				before, _ := prev.Sum(name, append(extra, where)...)
				if now >= before { // else the gateway restarted: all of now
					now -= before
				}
			}
			return now
		}
		hist := func(name string) []promtext.Bucket {
			now := cur.Buckets(name, where)
			if prev != nil {
				now = promtext.Delta(now, prev.Buckets(name, where))
			}
			return now
		}
		reqs := count(metricClassRequests)
		rate := "-"
		if window > 0 {
			rate = fmt.Sprintf("%.1f", reqs/window)
		}
		met := "-"
		if cur.Has(metricClassSLO) && reqs > 0 {
			met = fmt.Sprintf("%.1f%%", 100*count(metricClassSLO)/reqs)
		}
		queue, ttft := hist(metricClassQueue), hist(metricClassTTFT)
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", c, reqs, rate, count(metricClassRequests, [2]string{"outcome", outcomeOK}),
			count(metricClassShed), count(metricClassPreempted), histMs(queue, 0.5), histMs(queue, 0.99), histMs(ttft, 0.5), histMs(ttft, 0.99), met)
	}
	tw.Flush()
}

// classRank orders a class by classOrder, others after.
func classRank(c string) int {
	if i := slices.Index(classOrder, c); i >= 0 {
		return i
	}
	return len(classOrder)
}

// histMs is the q-quantile of a seconds histogram in milliseconds, as top
// writes numbers, or "-".
func histMs(b []promtext.Bucket, q float64) string {
	v, ok := promtext.Quantile(b, q)
	if !ok {
		return "-"
	}
	x := v * 1000
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

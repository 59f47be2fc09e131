package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/infergate/infergate/internal/promtext"
)

// The gateway's per-class series (issue 45; proxy/classmetrics.go), read
// from its /metrics: counters and gauges by class, and two histograms.
const (
	metricClassAdmitted  = "infergate_class_admitted_total"
	metricClassShed      = "infergate_class_shed_total"
	metricClassPreempted = "infergate_class_preempted_total"
	metricClassTimedOut  = "infergate_class_timed_out_total"
	metricClassWaiting   = "infergate_class_waiting"
	metricClassInFlight  = "infergate_class_in_flight"
	metricClassJudged    = "infergate_class_slo_judged_total"
	metricClassMet       = "infergate_class_slo_met_total"
	metricClassQueue     = "infergate_class_queue_time_seconds"
	metricClassTTFT      = "infergate_class_ttft_seconds"
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
	if !cur.Has(metricClassAdmitted) {
		return
	}
	classes := cur.LabelValues(metricClassAdmitted, "class")
	slices.SortStableFunc(classes, func(a, b string) int { return classRank(a) - classRank(b) })
	span := "since the gateway started"
	window := 0.0
	if prev != nil {
		window = cur.At.Sub(prev.At).Seconds()
		span = fmt.Sprintf("last %.1f s", window)
	}
	fmt.Fprintf(w, "\nby class (%s; waiting and in flight now):\n", span)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\tadmitted\t/s\twaiting\tin flight\tshed\tpreempted\ttimed out\tqueue p50\tp99\tTTFT p50\tp99\tSLO met\t")
	for _, c := range classes {
		where := [2]string{"class", c}
		count := func(name string) float64 {
			now, _ := cur.Sum(name, where)
			if prev != nil {
				before, _ := prev.Sum(name, where)
				if now >= before { // else the gateway restarted: all of now
					now -= before
				}
			}
			return now
		}
		gauge := func(name string) float64 {
			v, _ := cur.Sum(name, where)
			return v
		}
		hist := func(name string) []promtext.Bucket {
			now := cur.Buckets(name, where)
			if prev != nil {
				now = promtext.Delta(now, prev.Buckets(name, where))
			}
			return now
		}
		admitted := count(metricClassAdmitted)
		rate := "-"
		if window > 0 {
			rate = fmt.Sprintf("%.1f", admitted/window)
		}
		met := "-"
		if judged := count(metricClassJudged); judged > 0 {
			met = fmt.Sprintf("%.1f%%", 100*count(metricClassMet)/judged)
		}
		queue, ttft := hist(metricClassQueue), hist(metricClassTTFT)
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", c, admitted, rate, gauge(metricClassWaiting), gauge(metricClassInFlight),
			count(metricClassShed), count(metricClassPreempted), count(metricClassTimedOut), histMs(queue, 0.5), histMs(queue, 0.99), histMs(ttft, 0.5), histMs(ttft, 0.99), met)
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

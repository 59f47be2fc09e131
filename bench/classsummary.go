package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/verdict"
)

// ClassSummary is one service class's figures in a stage of a run with a
// class mix: what it sent, how it was answered, and how fast. Latencies
// are in milliseconds. Requests = OK + the sum of Refused + Failed.
type ClassSummary struct {
	// Class is the service_tier the requests sent.
	Class    string `json:"class"`
	Requests int    `json:"requests"`
	OK       int    `json:"ok"`
	// Refused counts the 429 and 503 answers by reason ("503 preempted",
	// "503 capacity_exceeded": Result.ShedReason); Failed every other
	// failure (timeouts, 5xx, broken streams).
	Refused map[string]int `json:"refused,omitempty"`
	Failed  int            `json:"failed,omitempty"`
	// Served counts the answers by the class the gateway said it served
	// (X-Infergate-Class), when it said: a class above a tenant's ceiling
	// shows as served lower.
	Served map[string]int `json:"served,omitempty"`
	// Requeued counts the requests the gateway preempted and queued
	// again before it answered them (classes.preempt requeue).
	Requeued int `json:"requeued,omitempty"`
	// Queue is the gateway's queue wait of the successes (its timeline,
	// --gateway-timing), nil when it reported none.
	QueueP50 *float64 `json:"queue_p50_ms,omitempty"`
	QueueP90 *float64 `json:"queue_p90_ms,omitempty"`
	QueueP99 *float64 `json:"queue_p99_ms,omitempty"`
	// TTFT of the successes; a percentile with too few of them for it is
	// nil.
	TTFTP50 *float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP90 *float64 `json:"ttft_p90_ms,omitempty"`
	TTFTP99 *float64 `json:"ttft_p99_ms,omitempty"`
	// SLOAttainment is the share of the class's requests (refused and
	// failed ones included) that met every SLO of the run, nil without
	// SLOs: the goodput share of the class.
	SLOAttainment *float64 `json:"slo_attainment,omitempty"`
}

// RefusedTotal is the class's refusals of every reason.
func (c ClassSummary) RefusedTotal() int {
	n := 0
	for _, v := range c.Refused {
		n += v
	}
	return n
}

// classSummaries groups a stage's rows by the class they sent; nil when
// none sent one. reasons names the rows' refusal tags.
func classSummaries(rows []row, reasons []string, slos []verdict.SLO) []ClassSummary {
	by := make([][]*row, len(Classes)+2)
	any := false
	for i := range rows {
		if w := &rows[i]; w.class > 0 {
			by[w.class] = append(by[w.class], w)
			any = true
		}
	}
	if !any {
		return nil
	}
	var out []ClassSummary
	for tag, ws := range by {
		if len(ws) > 0 {
			out = append(out, classSummary(tagName(uint8(tag)), ws, reasons, slos))
		}
	}
	return out
}

// tagName is the class a row tag stands for.
func tagName(tag uint8) string {
	if int(tag) > len(Classes) {
		return "other"
	}
	return Classes[tag-1]
}

func classSummary(class string, ws []*row, reasons []string, slos []verdict.SLO) ClassSummary {
	cs := ClassSummary{Class: class, Requests: len(ws)}
	var ttft, queue []float64
	met := 0
	for _, w := range ws {
		if w.served > 0 {
			if cs.Served == nil {
				cs.Served = map[string]int{}
			}
			cs.Served[tagName(w.served)]++
		}
		if w.requeued {
			cs.Requeued++
		}
		if !w.ok {
			if w.shed > 0 && int(w.shed) <= len(reasons) {
				if cs.Refused == nil {
					cs.Refused = map[string]int{}
				}
				cs.Refused[reasons[w.shed-1]]++
			} else {
				cs.Failed++
			}
			continue
		}
		cs.OK++
		if w.ttft > 0 {
			ttft = append(ttft, float64(w.ttft)/1e6)
		}
		if w.gw != nil {
			queue = append(queue, w.gw.Queue)
		}
		if len(slos) > 0 && w.met(slos) {
			met++
		}
	}
	slices.Sort(ttft)
	slices.Sort(queue)
	if len(ttft) > 0 {
		cs.TTFTP50, cs.TTFTP90, cs.TTFTP99 = quantile.Maybe(ttft, 0.5), quantile.Maybe(ttft, 0.9), quantile.Maybe(ttft, 0.99)
	}
	if len(queue) > 0 {
		cs.QueueP50, cs.QueueP90, cs.QueueP99 = quantile.Maybe(queue, 0.5), quantile.Maybe(queue, 0.9), quantile.Maybe(queue, 0.99)
	}
	if len(slos) > 0 {
		a := float64(met) / float64(cs.Requests)
		cs.SLOAttainment = &a
	}
	return cs
}

// cells are the class's row of a table, numbers in format ("%.2f"):
// class, requests, ok, refused (by reason), failed, queue p50/p99, TTFT
// p50/p90/p99, SLO attainment; "-" where there is nothing.
func (c ClassSummary) cells(format string) []string {
	num := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(format, *v)
	}
	refused := "0"
	if n := c.RefusedTotal(); n > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(c.Refused)) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, c.Refused[k]))
		}
		refused = strconv.Itoa(n) + " (" + strings.Join(parts, ", ") + ")"
	}
	att := "-"
	if c.SLOAttainment != nil {
		att = fmt.Sprintf("%.1f%%", *c.SLOAttainment*100)
	}
	return []string{c.Class, strconv.Itoa(c.Requests), strconv.Itoa(c.OK), refused, strconv.Itoa(c.Failed),
		num(c.QueueP50), num(c.QueueP99), num(c.TTFTP50), num(c.TTFTP90), num(c.TTFTP99), att}
}

// classColumns head the by-class table, in cells' order.
var classColumns = []string{"class", "requests", "ok", "refused", "failed", "queue p50 ms", "queue p99 ms", "ttft p50 ms", "ttft p90 ms", "ttft p99 ms", "slo met"}

// writeClasses writes the stage's by-class table as text.
func (s *Summary) writeClasses(w io.Writer) {
	if len(s.Classes) == 0 {
		return
	}
	rows := [][]string{classColumns}
	for _, c := range s.Classes {
		rows = append(rows, c.cells("%.2f"))
	}
	width := make([]int, len(classColumns))
	for _, r := range rows {
		for i, v := range r {
			width[i] = max(width[i], len(v))
		}
	}
	fmt.Fprintln(w, "\nby class (service_tier sent; refused by status and reason; queue: the gateway's, with --gateway-timing):")
	for _, r := range rows {
		var b strings.Builder
		for i, v := range r {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[i], v)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], v)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	var served []string
	for _, c := range s.Classes {
		for k, n := range c.Served {
			if k != c.Class && c.Class != "auto" { // auto is served as whatever the tenant's default is
				served = append(served, fmt.Sprintf("%d %s served as %s", n, c.Class, k))
			}
		}
	}
	if len(served) > 0 {
		slices.Sort(served)
		fmt.Fprintf(w, "(the gateway served another class than asked: %s)\n", strings.Join(served, ", "))
	}
	var requeued []string
	for _, c := range s.Classes {
		if c.Requeued > 0 {
			requeued = append(requeued, fmt.Sprintf("%s %d", c.Class, c.Requeued))
		}
	}
	if len(requeued) > 0 {
		fmt.Fprintf(w, "(preempted and queued again before being answered: %s)\n", strings.Join(requeued, ", "))
	}
}

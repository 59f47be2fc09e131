package overhead

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
)

// classReport writes the classes scenario's tables and its targets.
func (o *Overhead) classReport(cc classCase, fl classFleet, sweep *bench.Record, arms []classArm, runs map[string]classRun, redis bool) {
	w := o.Report
	fmt.Fprintf(w, "### classes\n\nThe memory-bound sim (--preset memory-bound: a KV cache of 8192 tokens; --scheduling-policy priority, as vLLM's), %d-token prompts and %d tokens back, streamed. Its capacity, from a closed-loop sweep straight to it (%v a stage):\n\n", cc.input, cc.output, cc.stage)
	fmt.Fprintln(w, "| concurrency | req/s | output tok/s | TTFT p50 | TTFT p99 |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|")
	for _, s := range sweep.Stages {
		p50 := "-"
		if m := s.Metrics["ttft"]; m != nil {
			p50 = fmt.Sprintf("%.1f ms", m.P50)
		}
		fmt.Fprintf(w, "| %g | %.2f | %.0f | %s | %s |\n", s.Level, s.RequestThroughput, s.OutputTokenThroughput, p50, p99s(s.Metrics["ttft"]))
	}
	reserve, wait := classReserve(fl.knee, cc.reserve), fl.queueWait(cc.slo)
	fmt.Fprintf(w, "\nCapacity %.2f req/s (the peak's rate); the gateways' cap: %d in flight (the knee: the first level within 5%% of the peak), a queue of %d all open to the one tenant, every tenant allowed priority. A request waits at most %v for a slot (the SLO less the knee's TTFT p99, or p90 in a short stage, %v: one admitted later cannot meet it): without classes every request, with them default; priority waits up to 5 s, flex 20 s. With classes %s, the pool passes the class to the sim as vLLM's priority (-1, 0, 1) and flex may be preempted before its first byte. Load: an open loop, Poisson, %v per arm (the idle arm at 0.2×, where nothing queues, for at least 120 requests), bench --class-mix (service_tier in the body), every class judged by TTFT ≤ %v; each arm a fresh fleet.\n\n",
		fl.peakRate, fl.knee, 2*fl.knee, wait.Round(time.Millisecond), fl.kneeTTFT.Round(time.Millisecond), reserveText(fl.knee, reserve, cc.inside), cc.run, cc.slo)
	fmt.Fprintln(w, "| arm | class | sent | ok | refused (reason) | failed | TTFT p50 | TTFT p99 | gateway queue p50 | gateway queue p99 | SLO met |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, a := range arms {
		for _, c := range runs[a.label].stage.Classes {
			fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %d | %s | %s | %s | %s | %s |\n", a.label, c.Class, c.Requests, c.OK, refusedText(c), c.Failed,
				msp(c.TTFTP50), msp(c.TTFTP99), msp(c.QueueP50), msp(c.QueueP99), pct(c.SLOAttainment))
		}
	}
	fmt.Fprintf(w, "\nTotals: sent is what bench sent (measured, plus any cut off at the end); the request-log lines are the gateways' own count, by outcome; the sim's peak is the most requests it held at once (running and waiting, sampled every 50 ms) against the cap.\n\n")
	fmt.Fprintln(w, "| arm | sent | ok | refused with a reason | failed otherwise | cut off | request-log lines | sim peak / cap |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---:|")
	for _, a := range arms {
		r := runs[a.label]
		s := r.stage
		refused := 0
		for _, c := range s.Classes {
			refused += c.RefusedTotal()
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s | %.0f / %d |\n", a.label, s.Requests+s.Cancelled, s.OK, refused, s.Requests-s.OK-refused, s.Cancelled,
			loggedText(r.logged), r.peak, armCap(fl, cc, a))
	}
	idle, without := runs[arms[0].label], runs[arms[1].label]
	idleP99 := classFigure(idle.stage, "priority", func(c bench.ClassSummary) *float64 { return c.TTFTP99 })
	fmt.Fprintf(w, "\nAgainst the issue's targets:\n\n| target | arm | reached |\n|---|---|---|\n")
	for _, a := range arms[2:] {
		r := runs[a.label]
		p99 := classFigure(r.stage, "priority", func(c bench.ClassSummary) *float64 { return c.TTFTP99 })
		fmt.Fprintf(w, "| priority TTFT p99 ≤ 1.5× its p99 on an idle server | %s | %s against %s: %s |\n", a.label, msText(p99), msText(idleP99), ratioText(p99, idleP99, 1.5, false))
		dw, dwo := classFigure(r.stage, "default", attainment), classFigure(without.stage, "default", attainment)
		fmt.Fprintf(w, "| default meets its SLO (TTFT ≤ %v) at least as often as without classes | %s | %s against %s: %s |\n", cc.slo, a.label, pctText(dw), pctText(dwo), met(dw >= dwo))
		fmt.Fprintf(w, "| flex absorbs the shedding | %s | refused: %s |\n", a.label, refusedShares(r.stage))
	}
	for _, a := range arms {
		r := runs[a.label]
		ok, why := accounted(r)
		fmt.Fprintf(w, "| every request answered or refused with a reason, none lost or hung; the request log adds up | %s | %s: %s |\n", a.label, why, met(ok))
	}
	if len(arms) > 3 {
		r := runs[arms[3].label]
		c := armCap(fl, cc, arms[3])
		fmt.Fprintf(w, "| the cap holds across replicas (the sim never holds more than it) | %s | peak %.0f against %d: %s |\n", arms[3].label, r.peak, c, met(r.peak <= float64(c)))
	}
	if !redis {
		fmt.Fprintf(w, "\nNo Redis answered at %q: the replicas arm was left out.\n", o.Redis)
	}
	fmt.Fprintln(w)
}

func attainment(c bench.ClassSummary) *float64 { return c.SLOAttainment }

// reserveText says where priority's reserve is.
func reserveText(knee, reserve int, inside bool) string {
	if inside {
		return fmt.Sprintf("priority reserves %d of the cap (classes.priority.reserved: default and flex together hold at most %d of the knee's %d)", reserve, knee-reserve, knee)
	}
	return fmt.Sprintf("priority has %d more slots above the knee (cap %d, classes.priority.reserved %d: default and flex together hold at most the knee; the sim's KV cache holds about 42 requests of this size)", reserve, knee+reserve, reserve)
}

// armCap is the arm's global cap: the knee, with classes priority's
// reserve above it.
func armCap(fl classFleet, cc classCase, a classArm) int {
	return classGateway{knee: fl.knee, reserve: classReserve(fl.knee, cc.reserve), inside: cc.inside, classes: a.classes}.cap()
}

// classFigure is f of the stage's class, NaN when it has none.
func classFigure(s *bench.Summary, class string, f func(bench.ClassSummary) *float64) float64 {
	for _, c := range s.Classes {
		if c.Class == class {
			if v := f(c); v != nil {
				return *v
			}
		}
	}
	return math.NaN()
}

// accounted checks an arm's totals: nothing failed without a reason or
// was cut off, and the gateways logged one line per request sent.
func accounted(r classRun) (bool, string) {
	s := r.stage
	refused := 0
	for _, c := range s.Classes {
		refused += c.RefusedTotal()
	}
	sent, lines := s.Requests+s.Cancelled, 0
	for _, n := range r.logged {
		lines += n
	}
	other := s.Requests - s.OK - refused
	return other == 0 && s.Cancelled == 0 && lines == sent,
		fmt.Sprintf("%d sent = %d ok + %d refused + %d otherwise + %d cut off; %d log lines", sent, s.OK, refused, other, s.Cancelled, lines)
}

// refusedShares is each class's refused share of what it sent.
func refusedShares(s *bench.Summary) string {
	var parts []string
	for _, c := range s.Classes {
		if c.Requests > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f%% (%d)", c.Class, 100*float64(c.RefusedTotal())/float64(c.Requests), c.RefusedTotal()))
		}
	}
	return strings.Join(parts, ", ")
}

func refusedText(c bench.ClassSummary) string {
	if len(c.Refused) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.Refused)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, c.Refused[k]))
	}
	return fmt.Sprintf("%d (%s)", c.RefusedTotal(), strings.Join(parts, ", "))
}

func loggedText(by map[string]int) string {
	total := 0
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		total += by[k]
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func msp(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", *v)
}

func msText(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", v)
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}

func pctText(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", v*100)
}

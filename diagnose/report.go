package diagnose

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/infergate/infergate/internal/engine"
)

// Write prints the report for a terminal.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "bottleneck: %s (confidence %s, %.0f%% of its signals hold)\n", strings.ToUpper(r.Bottleneck), r.Confidence, r.Score*100)
	fmt.Fprintf(w, "  %s\n", r.Summary)
	fmt.Fprintf(w, "load: %s: %s\n\nevidence:\n", r.Load, r.LoadDetail)
	for _, f := range r.Evidence {
		fmt.Fprintf(w, "  %-3s %-22s %s\n", f.verdict(), f.Signal, f.Detail)
	}
	if len(r.PerBackend) > 0 {
		fmt.Fprintln(w, "\neach backend on its own:")
		for _, b := range r.PerBackend {
			fmt.Fprintf(w, "  %-40s %-10s (%s) %s\n", b.Name, b.Bottleneck, b.Confidence, b.Summary)
		}
	}
	if len(r.Against) > 0 {
		fmt.Fprintln(w, "\nalso seen (signals of other verdicts):")
		for _, f := range r.Against {
			fmt.Fprintf(w, "      %-22s %s\n", f.Signal, f.Detail)
		}
	}
	if len(r.NotSeen) > 0 {
		fmt.Fprintln(w, "\nnot seen (the verdict is made without):")
		for _, n := range r.NotSeen {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	fmt.Fprintln(w, "\nwhat to turn next, cheapest first:")
	for i, k := range r.Knobs {
		fmt.Fprintf(w, "  %d. %s: %s\n", i+1, k.Knob, k.Action)
		if k.Remeasure != "" {
			fmt.Fprintf(w, "     re-measure: %s\n", k.Remeasure)
		}
		if k.Skip != "" {
			fmt.Fprintf(w, "     not if: %s\n", k.Skip)
		}
	}
	fmt.Fprintln(w)
	for _, b := range r.Backends {
		fmt.Fprintf(w, "backend %s (%s, %.0f s, %d samples): %s\n", b.Name, b.Server, b.Seconds, b.Samples, backendLine(b))
	}
	if g := r.Gateway; g != nil && g.Samples > 0 {
		limit := "none"
		if g.Limit > 0 {
			limit = fmt.Sprintf("%.0f", g.Limit)
		}
		fmt.Fprintf(w, "gateway (%.0f s): queued %s, in flight %s (cap %s), queue wait %s s, %s req/s, %s rejected/s\n",
			g.Seconds, f1(g.Queued.Mean), f1(g.InFlight.Mean), limit, f2(g.QueueWait), f1(g.RequestsPerS), f2(g.RejectedPerS))
		if a := g.Attribution; a != nil {
			fmt.Fprintf(w, "  where the time went (mean ms, last minute): queue %.1f, gateway %.2f, network %.2f, model to first token %.1f, decode %.1f, total %.1f\n",
				a.Queue, a.Gateway, a.Network, a.ModelTTFT, a.Decode, a.Total)
		}
	}
	if len(r.Sweep) > 0 {
		fmt.Fprintln(w, "\nsweep:\n  concurrency  req/s  out tok/s  per-request tok/s  TTFT p50 ms  TTFT p90 ms  running  waiting  KV   preempt/s")
		for _, p := range r.Sweep {
			run, wait, kv, pre := unknown, unknown, unknown, unknown
			for _, b := range p.Backends {
				run, wait, kv, pre = Num(add(float64(run), float64(b.Running.Mean))), Num(add(float64(wait), float64(b.Waiting.Mean))),
					Num(maxNaN(float64(kv), float64(b.KVUsage.Max))), Num(add(float64(pre), float64(b.PreemptionsPerS)))
			}
			fmt.Fprintf(w, "  %11.0f  %5s  %9s  %17s  %11s  %11s  %7s  %7s  %4s %9s\n", p.Concurrency, f1(p.RequestsPerS), f1(p.OutputTokPerS),
				f1(p.PerRequestTokPerS), f1(p.TTFTp50), f1(p.TTFTp90), f1(run), f1(wait), pctOf(kv), f2(pre))
		}
	}
}

// verdict is yes, no, or "-" for a signal that was not measured.
func (f Finding) verdict() string {
	switch {
	case strings.HasPrefix(f.Detail, notMeasured):
		return "-"
	case f.Holds:
		return "yes"
	}
	return "no"
}

func f1(n Num) string {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return "?"
	}
	return fmt.Sprintf("%.1f", float64(n))
}

func f2(n Num) string {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return "?"
	}
	return fmt.Sprintf("%.2f", float64(n))
}

func pctOf(n Num) string {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", float64(n)*100)
}

// backendLine lists a backend's figures, those it did not report named
// at the end rather than printed as numbers.
func backendLine(b Backend) string {
	var have, not []string
	fig := func(name string, n Num, text string) {
		if n.Known() && !math.IsInf(float64(n), 0) {
			have = append(have, text)
		} else {
			not = append(not, name)
		}
	}
	fig("running", b.Running.Mean, "running "+f1(b.Running.Mean))
	if b.Slots.Known() {
		have = append(have, fmt.Sprintf("slots %.0f", float64(b.Slots)))
	}
	fig("waiting", b.Waiting.Mean, "waiting "+f1(b.Waiting.Mean))
	fig("KV", b.KVUsage.Max, "KV "+pctOf(b.KVUsage.Max))
	fig("GPU", b.GPUUtil.Mean, "GPU "+f1(b.GPUUtil.Mean)+"%")
	if b.Server != engine.LlamaCpp {
		fig("preemptions", b.PreemptionsPerS, f2(b.PreemptionsPerS)+" preemptions/s")
	}
	fig("out tok/s", b.OutputTokPerS, f1(b.OutputTokPerS)+" out tok/s")
	fig("TTFT", b.TTFT, "TTFT "+f2(b.TTFT)+" s")
	fig("queue time", b.Queue, "queue "+f2(b.Queue)+" s")
	line := strings.Join(have, ", ")
	if len(not) > 0 {
		if line != "" {
			line += "; "
		}
		line += "not reported: " + strings.Join(not, ", ")
	}
	return line
}

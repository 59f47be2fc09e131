package bench

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// knee finds where a sweep stops paying: the first stage whose output
// token throughput reaches 90% of the sweep's peak, when throughput
// flattened there. Flattened means the sweep measured more load beyond
// that stage and it added at most 1/0.9 (about 11%) throughput: every
// later stage lies between 90% and 100% of the peak. When the first
// stage at 90% of the peak is the last one, throughput was still rising
// at the highest level: the knee, if any, lies beyond the levels swept,
// and knee returns -1 (NoKnee says so). It returns -1 for fewer than 3
// stages too.
func knee(stages []*Summary) int {
	if len(stages) < 3 {
		return -1
	}
	peak := 0.0
	for _, s := range stages {
		peak = max(peak, s.OutputTokenThroughput)
	}
	for i, s := range stages {
		if s.OutputTokenThroughput >= 0.9*peak {
			if i == len(stages)-1 {
				return -1 // still rising at the last level
			}
			return i
		}
	}
	return -1
}

// NoKnee says why a sweep of 3 or more stages has no knee: throughput
// never flattened within its levels. "" when it has one or is no sweep.
func (r *Record) NoKnee() string {
	n := len(r.Stages)
	if n < 3 || r.Knee >= 0 {
		return ""
	}
	last, prev := r.Stages[n-1], r.Stages[n-2]
	gain := ""
	if prev.OutputTokenThroughput > 0 {
		gain = fmt.Sprintf(", %+.0f%% over level %g", (last.OutputTokenThroughput/prev.OutputTokenThroughput-1)*100, prev.Level)
	}
	return fmt.Sprintf("no knee within these levels: throughput still rose at the last level (%g: %.1f output tokens/s%s); sweep higher to find it",
		last.Level, last.OutputTokenThroughput, gain)
}

// Over-saturation: when a sweep stops raising the load. Past the knee a
// server's throughput stops growing while its queue, and so the time to
// first token, grows with every step of load: more steps measure only
// the queue. The rule, stated in the record (StopReason):
//
//   - the last stage gained less than 5% output-token throughput over
//     the best stage before it (throughput is flat), and
//   - TTFT p50 rose stage over stage across the last three, the last
//     step by at least 1.5× (it grows with the load, without bound);
//
// or the last stage failed more than half its requests.
const (
	satFlatGain = 1.05
	satTTFTGrow = 1.5
)

// overSaturated reports whether a sweep should stop after its last stage,
// and why.
func overSaturated(stages []*Summary) (bool, string) {
	n := len(stages)
	if n == 0 {
		return false, ""
	}
	c := stages[n-1]
	if c.Requests > 0 && float64(c.Failed) > 0.5*float64(c.Requests) {
		return true, fmt.Sprintf("stage %d (level %g) failed %d of %d requests", c.Stage, c.Level, c.Failed, c.Requests)
	}
	if n < 3 {
		return false, ""
	}
	peakBefore := func(i int) float64 {
		p := 0.0
		for _, s := range stages[:i] {
			p = max(p, s.OutputTokenThroughput)
		}
		return p
	}
	flat := c.OutputTokenThroughput < satFlatGain*peakBefore(n-1)
	ttft := func(s *Summary) float64 {
		if p := s.Metrics["ttft"]; p != nil {
			return p.P50
		}
		return 0
	}
	a, b := stages[n-3], stages[n-2]
	grows := ttft(a) > 0 && ttft(a) < ttft(b) && ttft(c) >= satTTFTGrow*ttft(b)
	if !flat || !grows {
		return false, ""
	}
	return true, fmt.Sprintf("over-saturated at stage %d (level %g): output throughput flat (%.0f tok/s, under %.0f%% above the best before it, %.0f) while TTFT p50 grew %.0f → %.0f → %.0f ms",
		c.Stage, c.Level, c.OutputTokenThroughput, (satFlatGain-1)*100, peakBefore(n-1), ttft(a), ttft(b), ttft(c))
}

// ParseSweep reads "1,2,4,8".
func ParseSweep(s string) ([]float64, error) {
	var out []float64
	for part := range strings.SplitSeq(s, ",") {
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(part), &v); err != nil || v <= 0 {
			return nil, fmt.Errorf("bench: --sweep %q: want positive numbers separated by commas", s)
		}
		out = append(out, v)
	}
	if !sort.Float64sAreSorted(out) {
		return nil, errors.New("bench: --sweep values must increase")
	}
	return out, nil
}

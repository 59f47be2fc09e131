package rank

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/infergate/infergate/verdict"
)

// Place is an endpoint's place in the ranking.
type Place struct {
	Rank int    `json:"rank"`
	Name string `json:"name"`
	// Tied says it shares its rank with another endpoint.
	Tied bool `json:"tied,omitempty"`
	// Why says what set it apart from the endpoint ranked just above it,
	// or what it is tied with.
	Why string `json:"why,omitempty"`
}

// Tolerances below which two endpoints do not differ on a key.
const (
	speedTolerance = 0.05 // relative: TTFT, speed, cost
	speedFloorMs   = 1    // a TTFT difference below this is none
	errorTolerance = 0.02 // points of error rate
)

// Order ranks the endpoints by workload.order's keys, the first
// deciding first. On each key two endpoints differ only when the verdict
// package tells them apart beyond its tolerance; an endpoint that
// answered nothing comes last. Endpoints tied on every key share a rank.
func Order(rs []*Result, w Workload) []Place {
	keys := orderKeys(w.Order)
	sorted := append([]*Result(nil), rs...)
	// An insertion sort: the comparison is not a total order (a tie need
	// not be transitive), so each endpoint goes below the last one that
	// beats it, and the order of the file breaks the rest.
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0; j-- {
			if c, _ := compare(sorted[j-1], sorted[j], keys); c <= 0 {
				break
			}
			sorted[j-1], sorted[j] = sorted[j], sorted[j-1]
		}
	}
	out := make([]Place, len(sorted))
	for i, r := range sorted {
		out[i] = Place{Rank: i + 1, Name: r.Name}
		if i == 0 {
			continue
		}
		c, why := compare(sorted[i-1], r, keys)
		if c == 0 {
			out[i].Rank = out[i-1].Rank
			out[i].Tied, out[i-1].Tied = true, true
			out[i].Why = fmt.Sprintf("tied with %s on %s", sorted[i-1].Name, strings.Join(keys, ", "))
			continue
		}
		out[i].Why = fmt.Sprintf("below %s: %s", sorted[i-1].Name, why)
	}
	return out
}

func orderKeys(s string) []string {
	var keys []string
	for k := range strings.SplitSeq(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// compare is −1 when a ranks above b, +1 when below, 0 when no key
// tells them apart; why names the key that did.
func compare(a, b *Result, keys []string) (int, string) {
	if (a.Figures.OK == 0) != (b.Figures.OK == 0) {
		if a.Figures.OK == 0 {
			return 1, "no answer"
		}
		return -1, "no answer"
	}
	for _, k := range keys {
		if c, why := compareOn(a, b, k); c != 0 {
			return c, why
		}
	}
	return 0, ""
}

// compareOn compares a and b on one key.
func compareOn(a, b *Result, key string) (int, string) {
	fa, fb := &a.Figures, &b.Figures
	switch key {
	case "slo":
		ra, rb := sloRank(fa.SLO), sloRank(fb.SLO)
		if ra < 0 || rb < 0 || ra == rb {
			return 0, ""
		}
		if ra < rb {
			return -1, fmt.Sprintf("SLO %s against %s", fb.SLO, fa.SLO)
		}
		return 1, fmt.Sprintf("SLO %s against %s", fb.SLO, fa.SLO)
	case "cost":
		return judged(costs(a), costs(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Means(0, "cost_per_request", "lower", x, y, speedTolerance)
		}, "cost per request")
	case "ttft":
		return judged(ttfts(a), ttfts(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Samples(0, "ttft", "lower", x, y, speedTolerance, speedFloorMs, rand.New(rand.NewPCG(1, 2)))
		}, "TTFT p50")
	case "ttft_p90":
		pa, pb := fa.TTFTP90, fb.TTFTP90
		switch {
		case pa.Hi < pb.Lo && pb.Value > pa.Value*(1+speedTolerance)+speedFloorMs:
			return -1, fmt.Sprintf("TTFT p90 %.1f ms [%.1f, %.1f] against %.1f ms", pb.Value, pb.Lo, pb.Hi, pa.Value)
		case pb.Hi < pa.Lo && pa.Value > pb.Value*(1+speedTolerance)+speedFloorMs:
			return 1, fmt.Sprintf("TTFT p90 %.1f ms [%.1f, %.1f] against %.1f ms", pb.Value, pb.Lo, pb.Hi, pa.Value)
		}
		return 0, ""
	case "speed":
		return judged(speeds(a), speeds(b), func(x, y []float64) (verdict.Change, bool) {
			return verdict.Samples(0, "speed", "higher", x, y, speedTolerance, 0, rand.New(rand.NewPCG(1, 2)))
		}, "speed p50")
	case "errors":
		if c, ch := tellErrors(fa, fb, errorTolerance); c != 0 {
			return c, "error rate " + verdict.FormatDelta(ch)
		}
	}
	return 0, ""
}

// tell is −1 when judge(a, b) finds b worse (regressed), +1 when
// judge(b, a) finds a worse, 0 when the test tells them apart no further
// than its tolerance; ch is judge(a, b).
func tell(a, b []float64, judge func(x, y []float64) (verdict.Change, bool)) (c int, ch verdict.Change) {
	ch, ok := judge(a, b)
	switch {
	case !ok:
		return 0, ch
	case ch.Judgement == verdict.Regressed:
		return -1, ch
	}
	if r, ok := judge(b, a); ok && r.Judgement == verdict.Regressed {
		return 1, ch
	}
	return 0, ch
}

// tellErrors is tell for the error rates of a and b (two proportions,
// tol points).
func tellErrors(a, b *Figures, tol float64) (int, verdict.Change) {
	ch := verdict.Rates(0, "error_rate", a.Failed, a.Requests, b.Failed, b.Requests, tol)
	switch {
	case ch.Judgement == verdict.Regressed:
		return -1, ch
	case verdict.Rates(0, "error_rate", b.Failed, b.Requests, a.Failed, a.Requests, tol).Judgement == verdict.Regressed:
		return 1, ch
	}
	return 0, ch
}

// judged is tell with the change in words.
func judged(a, b []float64, judge func(x, y []float64) (verdict.Change, bool), what string) (int, string) {
	c, ch := tell(a, b, judge)
	if c == 0 {
		return 0, ""
	}
	_, _, d, ci, _ := ch.Cells()
	return c, fmt.Sprintf("%s %s %s", what, d, ci)
}

func sloRank(s string) int {
	switch s {
	case "", Unsure:
		return -1
	case Meets:
		return 0
	}
	return 1
}

func column(r *Result, v func(Request) float64) []float64 {
	var out []float64
	for _, q := range r.Requests {
		if q.OK && !q.Probe {
			out = append(out, v(q))
		}
	}
	return out
}

func costs(r *Result) []float64 { return column(r, func(q Request) float64 { return q.Cost }) }
func ttfts(r *Result) []float64 { return column(r, func(q Request) float64 { return q.TTFT }) }
func speeds(r *Result) []float64 {
	var out []float64
	for _, x := range column(r, func(q Request) float64 { return q.Speed }) {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

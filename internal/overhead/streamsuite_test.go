package overhead

import (
	"math"
	"testing"
	"time"
)

// The suite's arithmetic: exact nearest-rank percentiles of the values
// themselves, and added = proxy pXX − direct pXX at each percentile,
// which is not the percentile of the differences: a proxy slower on its
// worst streams only moves its p99.
func TestStreamSuiteArithmetic(t *testing.T) {
	t.Parallel()
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
	var direct, proxy Stats
	for i := 1; i <= 200; i++ {
		d := 20 + float64(i)/100 // 20.01 … 22.00 ms
		direct.TTFTs = append(direct.TTFTs, ms(d))
		p := d + 0.05
		if i > 197 { // the three worst: 2 ms later
			p = d + 2
		}
		// Given in another order: the percentiles sort.
		proxy.TTFTs = append([]time.Duration{ms(p)}, proxy.TTFTs...)
		direct.Gaps = append(direct.Gaps, ms(20))
		proxy.Gaps = append(proxy.Gaps, ms(20.01))
	}
	direct.Requests, proxy.Requests = 200, 200
	df, pf := streamFiguresOf(direct), streamFiguresOf(proxy)
	// Nearest rank of 200: p50 is the 100th value, p90 the 180th, p99 the 198th.
	for i, want := range [3]float64{21.00, 21.80, 21.98} {
		if math.Abs(df.TTFT[i]-want) > 1e-6 {
			t.Errorf("direct TTFT p%v = %v ms, want %v", streamQuantiles[i]*100, df.TTFT[i], want)
		}
	}
	a := addedOver(df, pf)
	for i, want := range [3]float64{0.05, 0.05, 2} {
		if math.Abs(a.TTFT[i]-want) > 1e-6 {
			t.Errorf("added TTFT p%v = %v ms, want %v", streamQuantiles[i]*100, a.TTFT[i], want)
		}
		if math.Abs(a.Gap[i]-0.01) > 1e-6 {
			t.Errorf("added per-token p%v = %v ms, want 0.01", streamQuantiles[i]*100, a.Gap[i])
		}
	}
	// Too few values for a p99: left out, not the maximum (p50 of 50 is
	// the 25th, p90 the 45th).
	few := streamFiguresOf(Stats{TTFTs: direct.TTFTs[:50]})
	if !math.IsNaN(few.TTFT[2]) || math.IsNaN(few.TTFT[1]) {
		t.Errorf("50 values: p90 %v, p99 %v; want a p90 and no p99", few.TTFT[1], few.TTFT[2])
	}
	if got := addedOver(few, pf).TTFT[2]; !math.IsNaN(got) {
		t.Errorf("added p99 over a side without one = %v, want none", got)
	}
	if c := few.TTFT.cells("%.2f"); c != "20.25 | 20.45 | -" {
		t.Errorf("cells %q", c)
	}
	for _, tc := range []struct {
		v, limit float64
		want     string
	}{{0.3, 0.3, "+0.300 ms, met"}, {0.301, 0.3, "+0.301 ms, not met"}, {-0.2, 0.05, "-0.200 ms, met"}, {math.NaN(), 0.3, "-"}} {
		if got := judge(tc.v, tc.limit); got != tc.want {
			t.Errorf("judge(%v, %v) = %q, want %q", tc.v, tc.limit, got, tc.want)
		}
	}
}

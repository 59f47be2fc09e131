package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/infergate/infergate/verdict"

	"github.com/infergate/infergate/quality"
)

// Paired is the gateway's added latency measured directly: the same
// request sent through the gateway and straight to its backend, one after
// the other, one pair at a time, the order alternating so neither side
// always finds the connection or cache the other warmed. Each figure is
// the per-pair difference, gateway minus direct, in milliseconds.
type Paired struct {
	DirectURL string `json:"direct_url"`
	Pairs     int    `json:"pairs"`
	// Failed counts pairs left out because either side failed.
	Failed int `json:"failed"`
	// TTFT and E2E are the added time to first token and to the last
	// token; a negative percentile means noise exceeds what the gateway
	// adds.
	TTFT *Spread `json:"ttft_added_ms,omitempty"`
	E2E  *Spread `json:"e2e_added_ms,omitempty"`
	// DirectTTFT and GatewayTTFT are the two sides' medians.
	DirectTTFT  float64 `json:"direct_ttft_p50_ms"`
	GatewayTTFT float64 `json:"gateway_ttft_p50_ms"`
}

// Spread is the median, the 10th and the 90th percentile, and the mean,
// in milliseconds.
type Spread struct {
	P10  float64 `json:"p10"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Mean float64 `json:"mean"`
}

func spreadOf(v []float64) *Spread {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	at := func(p float64) float64 { return v[min(len(v)-1, max(0, int(math.Ceil(p*float64(len(v))))-1))] }
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return &Spread{P10: at(0.1), P50: at(0.5), P90: at(0.9), Mean: sum / float64(len(v))}
}

// runPaired sends n pairs of requests from wl, through gw and to direct.
func runPaired(ctx context.Context, gw, direct *Client, wl Workload, stream bool, count func(string) int, q *quality.Judge, n int, directURL string) *Paired {
	pg, pd := newParser(count, q), newParser(count, q)
	out := &Paired{DirectURL: directURL}
	var ttft, e2e, dTTFT, gTTFT []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for i := 0; i < n && ctx.Err() == nil; i++ {
		body := wl.Request(i).Body
		var g, d Result
		if i%2 == 0 {
			gw.do(ctx, body, stream, pg, &g)
			direct.do(ctx, body, stream, pd, &d)
		} else {
			direct.do(ctx, body, stream, pd, &d)
			gw.do(ctx, body, stream, pg, &g)
		}
		if !g.OK() || !d.OK() || g.Status != 200 || d.Status != 200 {
			out.Failed++
			continue
		}
		out.Pairs++
		if g.TTFT > 0 && d.TTFT > 0 {
			ttft = append(ttft, ms(g.TTFT-d.TTFT))
			gTTFT, dTTFT = append(gTTFT, ms(g.TTFT)), append(dTTFT, ms(d.TTFT))
		}
		e2e = append(e2e, ms(g.E2E()-d.E2E()))
	}
	out.TTFT, out.E2E = spreadOf(ttft), spreadOf(e2e)
	out.DirectTTFT, out.GatewayTTFT = verdict.Median(dTTFT), verdict.Median(gTTFT)
	return out
}

func (p *Paired) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nadded by the gateway, paired against %s (%d pairs, one at a time, order alternating; %d failed):\n", p.DirectURL, p.Pairs, p.Failed)
	fmt.Fprintf(w, "  %-20s %10s %10s %10s %10s\n", "", "p10", "p50", "p90", "mean")
	for _, row := range []struct {
		label string
		s     *Spread
	}{{"TTFT", p.TTFT}, {"end to end", p.E2E}} {
		if row.s != nil {
			fmt.Fprintf(w, "  %-20s %7.3f ms %7.3f ms %7.3f ms %7.3f ms\n", row.label, row.s.P10, row.s.P50, row.s.P90, row.s.Mean)
		}
	}
	if p.TTFT != nil {
		fmt.Fprintf(w, "  TTFT p50: %.3f ms direct, %.3f ms through the gateway\n", p.DirectTTFT, p.GatewayTTFT)
	}
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/infergate/infergate/verdict"
	"github.com/schollz/progressbar/v3"
)

// Paired is the gateway's added latency measured directly: a request
// sent through the gateway and straight to its backend, one after the
// other, one pair at a time, the order alternating. Like is compared
// with like: the two requests of a pair are one prompt, each side's
// tagged at its start so neither finds the other's in a prefix cache
// (only the chat template's own prefix, cached alike on both), and
// each answer held to the same length (max_tokens = min_tokens,
// ignore_eos). Each figure is the per-pair difference, gateway minus
// direct, in milliseconds; end to end only over the pairs whose answers
// came back at the same length.
type Paired struct {
	DirectURL string `json:"direct_url"`
	Pairs     int    `json:"pairs"`
	// Failed counts pairs left out because either side failed.
	Failed int `json:"failed"`
	// OutputTokens is the length both sides' answers were held to;
	// Unequal counts the pairs whose answers still differed in length
	// (a server that ignores ignore_eos), left out of E2E.
	OutputTokens int `json:"output_tokens,omitempty"`
	Unequal      int `json:"unequal_length,omitempty"`
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

// pairedTokens is the answer length both sides of a pair are held to:
// the run's fixed output length, else 64.
func pairedTokens(w *WorkloadSpec) int {
	if n, err := strconv.Atoi(w.OutputTokens); err == nil && n > 0 {
		return n
	}
	return 64
}

// heldTo returns overrides with the answer held to n tokens, in the
// endpoint's own field.
func heldTo(overrides map[string]json.RawMessage, endpoint string, n int) map[string]json.RawMessage {
	out := maps.Clone(overrides)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	v := json.RawMessage(strconv.Itoa(n))
	if endpoint == "responses" {
		out["max_output_tokens"] = v
	} else {
		out["max_tokens"] = v
	}
	out["min_tokens"], out["ignore_eos"] = v, json.RawMessage("true")
	return out
}

// tagBody starts the text of the request's prompt with tag.
func tagBody(body []byte, tag string) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	saltRequest(obj, tag)
	b, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return b
}

// runPaired sends n pairs of requests from the workload's prompts
// numbered from first on, through gw and to direct, saying up front what
// it will send and how long that may take, and showing its progress.
func (b *Bench) runPaired(ctx context.Context, gw, direct *Client, first, n, tokens int, directURL string) *Paired {
	cfg := &b.cfg
	stream := cfg.Workload.Stream
	pg, pd := newParser(b.count, b.rn.Quality), newParser(b.count, b.rn.Quality)
	out := &Paired{DirectURL: directURL, OutputTokens: tokens}
	about := ""
	if k := len(b.rec.Stages); k > 0 {
		if e := b.rec.Stages[k-1].Metrics["e2e"]; e != nil {
			about = fmt.Sprintf("; about %v", (time.Duration(2*float64(n)*e.P50) * time.Millisecond).Round(time.Second))
		}
	}
	say(cfg.Log, "paired timing: %d pairs, one at a time, through the gateway and straight to %s; each side's prompt tagged apart (no cache hit from the other), answers held at %d tokens%s", n, directURL, tokens, about)
	bar := pairedBar(cfg.Progress, n)
	var ttft, e2e, dTTFT, gTTFT []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for i := 0; i < n && ctx.Err() == nil; i++ {
		body := b.wl.Request(first + i).Body
		gb, db := tagBody(body, fmt.Sprintf("[pair %d a] ", i)), tagBody(body, fmt.Sprintf("[pair %d b] ", i))
		var g, d Result
		if i%2 == 0 {
			gw.do(ctx, gb, [2]string{}, stream, pg, &g)
			direct.do(ctx, db, [2]string{}, stream, pd, &d)
		} else {
			direct.do(ctx, db, [2]string{}, stream, pd, &d)
			gw.do(ctx, gb, [2]string{}, stream, pg, &g)
		}
		switch {
		case !g.OK() || !d.OK() || g.Status != 200 || d.Status != 200:
			out.Failed++
		default:
			out.Pairs++
			if g.TTFT > 0 && d.TTFT > 0 {
				ttft = append(ttft, ms(g.TTFT-d.TTFT))
				gTTFT, dTTFT = append(gTTFT, ms(g.TTFT)), append(dTTFT, ms(d.TTFT))
			}
			if g.OutputTokens == d.OutputTokens {
				e2e = append(e2e, ms(g.E2E()-d.E2E()))
			} else {
				out.Unequal++
			}
		}
		if bar != nil {
			_ = bar.Add(1)
		} else if (i+1)%10 == 0 && i+1 < n {
			say(cfg.Log, "paired timing: %d of %d pairs (%d failed)", i+1, n, out.Failed)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	out.TTFT, out.E2E = spreadOf(ttft), spreadOf(e2e)
	out.DirectTTFT, out.GatewayTTFT = verdict.Median(dTTFT), verdict.Median(gTTFT)
	return out
}

// pairedBar is a progress bar of n pairs on w, nil without w.
func pairedBar(w io.Writer, n int) *progressbar.ProgressBar {
	if w == nil {
		return nil
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("paired timing"),
		progressbar.OptionSetWidth(24), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(200*time.Millisecond))
}

func (p *Paired) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nadded by the gateway, paired against %s (%d pairs, one at a time, order alternating; %d failed):\n", p.DirectURL, p.Pairs, p.Failed)
	if p.OutputTokens > 0 {
		fmt.Fprintf(w, "  each pair one prompt, tagged apart on each side; answers held at %d tokens", p.OutputTokens)
		if p.Unequal > 0 {
			fmt.Fprintf(w, " (%d pairs came back at different lengths: left out of end to end)", p.Unequal)
		}
		fmt.Fprintln(w)
	}
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

package overhead

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/quantile"
)

// The stream suite: what a gateway adds to one stream's first token and
// to the gaps between its tokens, by the method of the public gateway
// boards (onthebench's stream suite): one stream at a time; the backend
// sends its role chunk at once, then a fixed number of deltas paced
// evenly, the first one pace after the request; added TTFT is the
// gateway's percentile less the direct connection's, at p50, p90 and
// p99, and so is the added per-token time (the gap between content
// chunks). nginx runs beside as the reference proxy, and the rounds are
// interleaved (the order rotating), so a noisy machine's noise falls on
// every target alike. Percentiles are exact (nearest rank over every
// value, package quantile), pooled over rounds.

// StreamSuite is one stream suite's shape.
type StreamSuite struct {
	Name string
	// Pace is the time to the first delta and between deltas; Deltas
	// is their number.
	Pace   time.Duration
	Deltas int
}

// What describes the suite in a sentence.
func (s StreamSuite) What() string {
	return fmt.Sprintf("one stream at a time: a role chunk at once, then %d deltas %v apart, the first %v after the request (the public boards' stream suite)", s.Deltas, s.Pace, s.Pace)
}

// StreamSuites are the stream suites by name.
func StreamSuites() []StreamSuite {
	return []StreamSuite{{Name: "stream1", Pace: 20 * time.Millisecond, Deltas: 64}}
}

// DefaultStreams is a stream suite's streams per target per round when
// Overhead.Streams is 0: with the default 5 rounds, 1,000 per target,
// whose p99 is the tenth-worst (its 95% interval the 4th to the 16th
// worst). Each stream takes Deltas × Pace (1.28 s for stream1), so one
// round of three targets takes about 13 minutes, and the default run
// about 65: a round of 1,000 streams a target would take an hour.
const DefaultStreams = 200

// streamQuantiles are the suite's percentiles, as fractions.
var streamQuantiles = [3]float64{0.5, 0.9, 0.99}

// percentiles are a distribution's p50, p90 and p99 in milliseconds,
// NaN where there are too few values to carry one (quantile.Enough).
type percentiles [3]float64

// percentilesOf is the nearest-rank p50, p90, p99 of ds, in milliseconds.
func percentilesOf(ds []time.Duration) percentiles {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / 1e6
	}
	slices.Sort(ms)
	var p percentiles
	for i, q := range streamQuantiles {
		p[i] = math.NaN()
		if quantile.Enough(len(ms), q) {
			p[i] = quantile.Rank(ms, q)
		}
	}
	return p
}

// minus is p − d, percentile by percentile: what a proxy adds to the
// direct connection's figure at each.
func (p percentiles) minus(d percentiles) percentiles {
	var out percentiles
	for i := range p {
		out[i] = p[i] - d[i]
	}
	return out
}

// streamFigures are one target's figures, pooled over rounds.
type streamFigures struct {
	Streams   int
	TTFT, Gap percentiles
}

func streamFiguresOf(st Stats) streamFigures {
	return streamFigures{Streams: st.Requests, TTFT: percentilesOf(st.TTFTs), Gap: percentilesOf(st.Gaps)}
}

// added is what a proxy adds to the direct connection: TTFT and
// per-token time, percentile by percentile (gateway pXX − direct pXX).
type added struct{ TTFT, Gap percentiles }

func addedOver(direct, proxy streamFigures) added {
	return added{TTFT: proxy.TTFT.minus(direct.TTFT), Gap: proxy.Gap.minus(direct.Gap)}
}

// streamSuite runs s: the sim in fixed mode at the suite's pace with its
// role chunk first, the gateway and nginx in front, o.Rounds
// interleaved rounds of o.Streams streams one at a time per target.
func (o *Overhead) streamSuite(ctx context.Context, dir string, s StreamSuite) error {
	pace := s.Pace.String()
	targets, stop, err := o.setup(dir, []string{"--mode", "fixed", "--ttft", pace, "--itl", pace, "--role-first"})
	defer stop()
	if err != nil {
		return err
	}
	n := o.Streams
	if n <= 0 {
		n = DefaultStreams
	}
	body := requestBody(s.Deltas, true)
	clients := map[string]*bench.Client{}
	for _, t := range targets {
		c, err := bench.NewClient(t.url+"/v1/chat/completions", bench.ClientOptions{})
		if err != nil {
			return err
		}
		defer c.Close()
		clients[t.name] = c
		// Warm the path (connections, pools, the sim's first request).
		if _, err := Load(ctx, c, Target{Body: body, Stream: true}, Options{Concurrency: 1, MaxRequests: max(2, n/20)}); err != nil {
			return err
		}
	}
	runs := make(map[string][]Stats)
	for r := range o.Rounds {
		for k := range targets {
			t := targets[(r+k)%len(targets)]
			st, err := Load(ctx, clients[t.name], Target{Body: body, Stream: true}, Options{Concurrency: 1, MaxRequests: n, Samples: true})
			if err != nil {
				return err
			}
			if st.Errors > 0 {
				return fmt.Errorf("%s round %d: %d of %d streams failed, first: %v", t.name, r+1, st.Errors, st.Requests, st.FirstErr)
			}
			if want := s.Deltas * st.Requests; st.Events != want {
				return fmt.Errorf("%s round %d: %d deltas in %d streams, want %d", t.name, r+1, st.Events, st.Requests, want)
			}
			runs[t.name] = append(runs[t.name], st)
			fmt.Fprintf(o.Progress, "%s round %d %-9s %5d streams TTFT p50 %.3f ms\n", s.Name, r+1, t.name, st.Requests, percentilesOf(st.TTFTs)[0])
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	o.streamReport(s, targets, runs)
	return nil
}

// streamReport writes the suite's tables: each target's pooled figures,
// then what each proxy adds, with the spread of its per-round added p50
// and p99 (how much of a difference the machine's noise makes).
func (o *Overhead) streamReport(s StreamSuite, targets []target, runs map[string][]Stats) {
	w := o.Report
	fmt.Fprintf(w, "### %s\n\n%s; %d rounds, interleaved; exact percentiles (nearest rank) pooled over rounds.\n\n", s.Name, s.What(), o.Rounds)
	fmt.Fprintln(w, "| target | streams | TTFT p50 | TTFT p90 | TTFT p99 | per-token p50 | per-token p90 | per-token p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	figs := map[string]streamFigures{}
	for _, t := range targets {
		var pooled Stats
		for _, r := range runs[t.name] {
			pooled.Requests += r.Requests
			pooled.TTFTs = append(pooled.TTFTs, r.TTFTs...)
			pooled.Gaps = append(pooled.Gaps, r.Gaps...)
		}
		f := streamFiguresOf(pooled)
		figs[t.name] = f
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", t.name, f.Streams, f.TTFT.cells("%.3f ms"), f.Gap.cells("%.3f ms"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| added to direct | TTFT p50 | TTFT p90 | TTFT p99 | per-token p50 | per-token p90 | per-token p99 | rounds: added TTFT p50 | rounds: added TTFT p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	adds := map[string]added{}
	for _, name := range []string{"infergate", "nginx"} {
		if _, ok := figs[name]; !ok {
			continue
		}
		a := addedOver(figs["direct"], figs[name])
		adds[name] = a
		var p50, p99 []float64
		for i, r := range runs[name] {
			ra := addedOver(streamFiguresOf(runs["direct"][i]), streamFiguresOf(r))
			p50, p99 = append(p50, ra.TTFT[0]), append(p99, ra.TTFT[2])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", name, a.TTFT.cells("%+.3f ms"), a.Gap.cells("%+.3f ms"), spread(p50), spread(p99))
	}
	fmt.Fprintln(w)
	if a, ok := adds["infergate"]; ok {
		fmt.Fprintf(w, "Targets (issue 46): infergate's added TTFT p99 ≤ 0.3 ms: %s; its added per-token p99 ≤ 0.05 ms: %s", judge(a.TTFT[2], 0.3), judge(a.Gap[2], 0.05))
		if n, ok := adds["nginx"]; ok {
			fmt.Fprintf(w, "; its added TTFT p50 ≤ nginx's + 0.05 ms: %s", judge(a.TTFT[0]-n.TTFT[0], 0.05))
		}
		fmt.Fprintf(w, ".\n\n")
	}
}

// judge prints v (ms) and whether it is within limit; "-" when there
// is no figure (too few streams for the percentile).
func judge(v, limit float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v <= limit:
		return fmt.Sprintf("%+.3f ms, met", v)
	}
	return fmt.Sprintf("%+.3f ms, not met", v)
}

// cells prints the three as table cells, "-" for one left out.
func (p percentiles) cells(verb string) string {
	c := make([]string, len(p))
	for i, v := range p {
		c[i] = "-"
		if !math.IsNaN(v) {
			c[i] = fmt.Sprintf(verb, v)
		}
	}
	return strings.Join(c, " | ")
}

// spread prints the per-round values' range, in milliseconds.
func spread(xs []float64) string {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.3f to %+.3f ms", slices.Min(xs), slices.Max(xs))
}

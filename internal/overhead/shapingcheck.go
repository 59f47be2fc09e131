package overhead

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// Admission control's checks, the figures BENCHMARKS.md
// promises (docs/benchmarks-log.md, "2026-12-02: Admission control (issue 6)"): what a
// shared cap in Redis adds to TTFT against one Redis round trip, and what
// a cap at the backend's knee does to TTFT and throughput when offered
// more than the backend can take.

// redisRTT is the median of n PING round trips to addr over one
// connection.
func redisRTT(addr string, n int) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var rtts []float64
	for range n {
		start := time.Now()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return 0, err
		}
		if _, err := r.ReadString('\n'); err != nil {
			return 0, err
		}
		rtts = append(rtts, float64(time.Since(start)))
	}
	return time.Duration(verdict.Median(rtts)), nil
}

// shapingRedis compares TTFT through a gateway without caps and through
// one whose cap (never full) is shared through Redis, interleaved.
func (o *Overhead) shapingRedis(ctx context.Context) error {
	if o.Redis == "" {
		fmt.Fprintf(o.Report, "### shaping-redis\n\nNo Redis (--redis): skipped.\n\n")
		return nil
	}
	sim, err := startInfergate(o.Binary, "sim", "sim", "--ttft", "20ms", "--itl", "1ms")
	if err != nil {
		return err
	}
	defer sim.stop()
	plain, err := startInfergate(o.Binary, "gateway", "serve", "--upstream", "http://"+sim.addr)
	if err != nil {
		return err
	}
	defer plain.stop()
	shared, err := startInfergate(o.Binary, "gateway", "serve", "--upstream", "http://"+sim.addr,
		"--max-concurrency", "100000", "--redis", o.Redis)
	if err != nil {
		return err
	}
	defer shared.stop()
	targets := []gateway{{"no caps", plain.addr}, {"shared cap (Redis)", shared.addr}}
	pooled, _, err := o.interleave(ctx, targets, requestBody(5, true), 8)
	if err != nil {
		return err
	}
	rtt, err := redisRTT(o.Redis, 2000)
	if err != nil {
		return err
	}
	a, b := pooled[targets[0].name], pooled[targets[1].name]
	fmt.Fprintf(o.Report, "### shaping-redis\n\n8 streams, a fixed-mode sim (TTFT 20 ms), %d interleaved rounds of %v: a gateway without caps against one whose cap (never full) is shared through Redis at %s.\n\n", o.Rounds, o.RoundTime, o.Redis)
	fmt.Fprintln(o.Report, "| gateway | requests | TTFT p50 | TTFT p99 |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|")
	for _, t := range targets {
		s := pooled[t.name]
		fmt.Fprintf(o.Report, "| %s | %d | %s | %s |\n", t.name, s.Requests, msf(s.TTFT.Quantile(50)), msf(s.TTFT.Quantile(99)))
	}
	fmt.Fprintf(o.Report, "\nAdded TTFT p50: %s; one Redis round trip (PING, median of 2000): %s.\n\n", msf(b.TTFT.Quantile(50)-a.TTFT.Quantile(50)), msf(rtt))
	return nil
}

// shapingKnee finds the sim's knee with a closed-loop sweep, then offers
// an open loop at 1.5× the knee's rate through a gateway without a cap
// and through one capped at the knee, and compares TTFT and throughput.
func (o *Overhead) shapingKnee(ctx context.Context) error {
	sim, err := startInfergate(o.Binary, "sim", "sim", "--preset", "batch-starved")
	if err != nil {
		return err
	}
	defer sim.stop()
	wl := bench.WorkloadSpec{Endpoint: "chat", Model: "sim-model", Stream: true, InputTokens: "128", OutputTokens: "64", ForceOutputLength: true, Seed: 1}
	levels := []float64{1, 2, 4, 8, 16, 32}
	rec, err := bench.Run(ctx, bench.Config{URL: "http://" + sim.addr, Workload: wl, Sweep: levels,
		Load: bench.LoadSpec{Mode: "closed", Concurrency: 1, Duration: o.RoundTime, WarmupPerUser: true}})
	if err != nil {
		return err
	}
	peak := 0.0
	for _, s := range rec.Stages {
		peak = max(peak, s.OutputTokenThroughput)
	}
	// The cap: the smallest level within 5% of the peak.
	capAt := rec.Stages[len(rec.Stages)-1]
	for _, s := range rec.Stages {
		if s.OutputTokenThroughput >= 0.95*peak {
			capAt = s
			break
		}
	}
	rate := 1.5 * capAt.RequestThroughput
	fmt.Fprintf(o.Report, "### shaping-knee\n\nSim preset batch-starved (at most 4 sequences run; the rest queue in the sim); 128-token prompts, 64 tokens back. Closed-loop sweep straight to the sim, %v per stage:\n\n", o.RoundTime)
	fmt.Fprintln(o.Report, "| concurrency | req/s | output tok/s | TTFT p50 | TTFT p99 |")
	fmt.Fprintln(o.Report, "|---:|---:|---:|---:|---:|")
	for _, s := range rec.Stages {
		fmt.Fprintf(o.Report, "| %g | %.2f | %.0f | %.1f ms | %s |\n", s.Level, s.RequestThroughput, s.OutputTokenThroughput, s.Metrics["ttft"].P50, p99s(s.Metrics["ttft"]))
	}
	fmt.Fprintf(o.Report, "\nPeak %.0f tok/s; the cap: concurrency %g, the first level within 5%% of it. Then an open loop at %.2f req/s (1.5× that level's rate), Poisson, %v, through each gateway:\n\n", peak, capAt.Level, rate, 6*o.RoundTime)
	fmt.Fprintln(o.Report, "| gateway | ok | shed (503) | output tok/s | share of peak | TTFT p50 | TTFT p99 |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|---:|---:|---:|")
	for _, gw := range []struct {
		name string
		args []string
	}{
		{"no cap", nil},
		{fmt.Sprintf("cap %g, queue %g, 500ms wait", capAt.Level, capAt.Level), []string{"--max-concurrency", fmt.Sprint(capAt.Level), "--max-queue", fmt.Sprint(capAt.Level), "--queue-timeout", "500ms"}},
	} {
		p, err := startInfergate(o.Binary, "gateway", append([]string{"serve", "--upstream", "http://" + sim.addr}, gw.args...)...)
		if err != nil {
			return err
		}
		r, err := bench.Run(ctx, bench.Config{URL: "http://" + p.addr, Workload: wl,
			Load: bench.LoadSpec{Mode: "open", Rate: rate, Arrival: "poisson", Duration: 6 * o.RoundTime, WarmupTime: time.Second, Timeout: 2 * time.Minute}})
		p.stop()
		if err != nil {
			return err
		}
		s := r.Stages[0]
		ttft := s.Metrics["ttft"]
		p50 := "-"
		if ttft != nil {
			p50 = fmt.Sprintf("%.1f ms", ttft.P50)
		}
		fmt.Fprintf(o.Report, "| %s | %d | %d | %.0f | %.0f%% | %s | %s |\n", gw.name, s.OK, s.Errors["http_503"], s.OutputTokenThroughput,
			100*s.OutputTokenThroughput/peak, p50, p99s(ttft))
		fmt.Fprintf(o.Progress, "shaping-knee %s: %d ok, TTFT p99 %s\n", gw.name, s.OK, p99s(ttft))
		// Let the sim drain what the uncapped run left queued.
		time.Sleep(5 * time.Second)
	}
	fmt.Fprintln(o.Report)
	return nil
}

func p99s(p *bench.Percentiles) string {
	if p == nil || p.P99 == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", *p.P99)
}

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Admission control's checks (issue 6's gateway-level targets): what a
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
	return time.Duration(Median(rtts)), nil
}

// shapingRedis compares TTFT through a gateway without caps and through
// one whose cap (never full) is shared through Redis, interleaved.
func (o *Overhead) shapingRedis(ctx context.Context) error {
	if o.Redis == "" {
		fmt.Fprintf(o.Report, "### shaping-redis\n\nNo Redis (--redis): skipped.\n\n")
		return nil
	}
	sim, err := startInfergate(o.Binary, "sim", "sim", "--log-level", "warn", "--ttft", "20ms", "--itl", "1ms")
	if err != nil {
		return err
	}
	defer sim.stop()
	plain, err := startInfergate(o.Binary, "gateway", "serve", "--upstream", "http://"+sim.addr, "--log-level", "warn")
	if err != nil {
		return err
	}
	defer plain.stop()
	shared, err := startInfergate(o.Binary, "gateway", "serve", "--upstream", "http://"+sim.addr, "--log-level", "warn",
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
	sim, err := startInfergate(o.Binary, "sim", "sim", "--log-level", "warn", "--preset", "batch-starved")
	if err != nil {
		return err
	}
	defer sim.stop()
	wl := WorkloadSpec{Endpoint: "chat", Model: "sim-model", Stream: true, InputTokens: "128", OutputTokens: "64", ForceOutputLength: true, Seed: 1}
	levels := []float64{1, 2, 4, 8, 16, 32}
	rec, err := Run(ctx, Config{URL: "http://" + sim.addr, Workload: wl, Sweep: levels,
		Load: LoadSpec{Mode: "closed", Concurrency: 1, Duration: o.RoundTime, WarmupPerUser: true}})
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
		p, err := startInfergate(o.Binary, "gateway", append([]string{"serve", "--upstream", "http://" + sim.addr, "--log-level", "warn"}, gw.args...)...)
		if err != nil {
			return err
		}
		r, err := Run(ctx, Config{URL: "http://" + p.addr, Workload: wl,
			Load: LoadSpec{Mode: "open", Rate: rate, Arrival: "poisson", Duration: 6 * o.RoundTime, WarmupTime: time.Second, Timeout: 2 * time.Minute}})
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

func p99s(p *Percentiles) string {
	if p == nil || p.P99 == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", *p.P99)
}

// tracingCost compares a gateway with everything off (no request log, no
// spans, metrics.off) against one with the request log on, the metrics'
// histograms on, and a span per request (100% sampled) exported by OTLP
// over HTTP to a local sink, interleaved: events/s and TTFT.
func (o *Overhead) tracingCost(ctx context.Context, dir string) error {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var spansBytes atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		spansBytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go srv.Serve(sink)
	defer srv.Close()
	sim, err := startInfergate(o.Binary, "sim", "sim", "--log-level", "warn", "--mode", "fixed", "--ttft", "0", "--itl", "0")
	if err != nil {
		return err
	}
	defer sim.stop()
	// gatewayWith starts a gateway in front of the sim with the
	// configuration sections extra, written to dir/name.
	gatewayWith := func(name, extra string) (*proc, error) {
		conf := filepath.Join(dir, name)
		body := fmt.Sprintf("pools:\n  p:\n    backends:\n      - url: http://%s\ndefault_pool: p\n%s", sim.addr, extra)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, err
		}
		return startInfergate(o.Binary, "gateway", "serve", "--config", conf, "--log-level", "warn")
	}
	plain, err := gatewayWith("off.yaml", "metrics:\n  off: true\n")
	if err != nil {
		return err
	}
	defer plain.stop()
	traced, err := gatewayWith("traced.yaml", fmt.Sprintf(`request_log:
  path: %s
tracing:
  exporter: otlp-http
  endpoint: %s
  insecure: true
  sample_ratio: 1
`, filepath.Join(dir, "requests.jsonl"), sink.Addr()))
	if err != nil {
		return err
	}
	defer traced.stop()
	// The same without spans: what the spans cost, apart.
	logged, err := gatewayWith("nospans.yaml", fmt.Sprintf("request_log:\n  path: %s\n", filepath.Join(dir, "requests-nospans.jsonl")))
	if err != nil {
		return err
	}
	defer logged.stop()
	targets := []gateway{{"all off", plain.addr}, {"log + metrics + spans (100%, OTLP)", traced.addr}, {"log + metrics, no spans", logged.addr}}
	pooled, rates, err := o.interleave(ctx, targets, requestBody(50, true), 64)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Report, "### tracing-cost\n\n64 streams of 50 events, a sim that adds no delay (CPU-bound), %d interleaved rounds of %v.\n\n", o.Rounds, o.RoundTime)
	fmt.Fprintln(o.Report, "| gateway | requests | events/s (median) | TTFT p50 | TTFT p99 |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|---:|")
	for _, t := range targets {
		s := pooled[t.name]
		fmt.Fprintf(o.Report, "| %s | %d | %.0f | %s | %s |\n", t.name, s.Requests, Median(rates[t.name]), msf(s.TTFT.Quantile(50)), msf(s.TTFT.Quantile(99)))
	}
	// Each round ran all back to back: the ratio within a round cancels
	// the machine's drift between rounds.
	a := targets[0].name
	fmt.Fprintln(o.Report)
	for _, b := range []string{targets[1].name, targets[2].name} {
		var paired []float64
		for k := range rates[a] {
			paired = append(paired, rates[b][k]/rates[a][k])
		}
		fmt.Fprintf(o.Report, "%s: events/s %.2f× all off (median of the per-round ratios; %.2f× of the medians); requests %.2f×; TTFT p99 %+.3f ms (%.2f×).\n",
			b, Median(paired), Median(rates[b])/Median(rates[a]), float64(pooled[b].Requests)/float64(pooled[a].Requests),
			float64(pooled[b].TTFT.Quantile(99)-pooled[a].TTFT.Quantile(99))/1e6, float64(pooled[b].TTFT.Quantile(99))/float64(pooled[a].TTFT.Quantile(99)))
	}
	fmt.Fprintf(o.Report, "The sink received %d KiB of spans.\n\n", spansBytes.Load()>>10)
	return nil
}

// gateway is a named address the interleaved rounds run against.
type gateway struct{ name, addr string }

// interleave warms every gateway up, then runs o.Rounds rounds of a
// closed loop of conc streams of body against each, the order rotating,
// and returns each gateway's pooled figures and its per-round events/s.
func (o *Overhead) interleave(ctx context.Context, gws []gateway, body []byte, conc int) (map[string]*Stats, map[string][]float64, error) {
	pooled := map[string]*Stats{}
	rates := map[string][]float64{}
	clients := map[string]*Client{}
	for _, g := range gws {
		st := Stats{TTFT: NewDist(), Gap: NewDist()}
		pooled[g.name] = &st
		c, err := NewClient("http://"+g.addr+"/v1/chat/completions", ClientOptions{})
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		clients[g.name] = c
		if _, err := Load(ctx, c, Target{Body: body, Stream: true}, Options{Concurrency: conc, Duration: o.RoundTime / 3}); err != nil {
			return nil, nil, err
		}
	}
	for r := range o.Rounds {
		for k := range gws {
			g := gws[(r+k)%len(gws)]
			st, err := Load(ctx, clients[g.name], Target{Body: body, Stream: true}, Options{Concurrency: conc, Duration: o.RoundTime})
			if err != nil {
				return nil, nil, err
			}
			if st.Errors > 0 {
				return nil, nil, fmt.Errorf("%s: %d errors, first %s", g.name, st.Errors, st.FirstErr)
			}
			pooled[g.name].Merge(st)
			rates[g.name] = append(rates[g.name], st.EventsPerSecond())
		}
	}
	return pooled, rates, nil
}

package overhead

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/infergate/infergate/verdict"
)

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
	sim, err := startInfergate(o.Binary, "sim", "sim", "--mode", "fixed", "--ttft", "0", "--itl", "0")
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
		return startInfergate(o.Binary, "gateway", "serve", "--config", conf)
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
		fmt.Fprintf(o.Report, "| %s | %d | %.0f | %s | %s |\n", t.name, s.Requests, verdict.Median(rates[t.name]), msf(s.TTFT.Quantile(50)), msf(s.TTFT.Quantile(99)))
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
			b, verdict.Median(paired), verdict.Median(rates[b])/verdict.Median(rates[a]), float64(pooled[b].Requests)/float64(pooled[a].Requests),
			float64(pooled[b].TTFT.Quantile(99)-pooled[a].TTFT.Quantile(99))/1e6, float64(pooled[b].TTFT.Quantile(99))/float64(pooled[a].TTFT.Quantile(99)))
	}
	fmt.Fprintf(o.Report, "The sink received %d KiB of spans.\n\n", spansBytes.Load()>>10)
	return nil
}

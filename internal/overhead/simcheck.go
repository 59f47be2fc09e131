package overhead

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// simFidelity checks the simulator's timing at light load: a client on the
// same machine must see the configured TTFT and inter-token latency within
// 1 ms at p99, in fixed mode and in the engine.
func (o *Overhead) simFidelity(ctx context.Context) error {
	fmt.Fprintf(o.Report, "### sim-fidelity\n\nLight load (4 streams of 50 tokens), measured by a client on this machine.\n\n")
	fmt.Fprintln(o.Report, "| mode | configured TTFT | TTFT p50 | TTFT p99 | configured ITL | ITL p50 | ITL p99 | p99 error TTFT / ITL |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|---:|---:|---:|---:|")
	cases := []struct {
		name      string
		args      []string
		ttft, itl time.Duration
	}{
		{"fixed", []string{"--mode", "fixed", "--ttft", "50ms", "--itl", "10ms"}, 50 * time.Millisecond, 10 * time.Millisecond},
		// Engine: a step is 10ms base + 4 × 0.5ms per sequence. A request
		// joins at the next step boundary and gets its first token at the
		// end of that step, so its TTFT is between one and two steps and
		// only the ITL has one configured value.
		{"engine", []string{"--decode-base-ms", "10", "--decode-per-seq-ms", "0.5", "--prefill-tokens-per-s", "1000000"}, 0, 12 * time.Millisecond},
	}
	for _, c := range cases {
		p, err := startInfergate(o.Binary, "sim", append([]string{"sim"}, c.args...)...)
		if err != nil {
			return err
		}
		cl, err := bench.NewClient("http://"+p.addr+"/v1/chat/completions", bench.ClientOptions{})
		if err != nil {
			return err
		}
		st, err := Load(ctx, cl, Target{Body: requestBody(50, true), Stream: true}, Options{Concurrency: 4, Duration: 3 * o.RoundTime})
		cl.Close()
		p.stop()
		if err != nil {
			return err
		}
		if st.Errors > 0 {
			return fmt.Errorf("sim %s: %d errors, first %v", c.name, st.Errors, st.FirstErr)
		}
		errT := math.Max(math.Abs(float64(st.TTFT.Quantile(99)-c.ttft)), math.Abs(float64(st.TTFT.Quantile(1)-c.ttft)))
		if c.ttft == 0 {
			errT = math.NaN() // see above: no single configured value
		}
		errI := math.Max(math.Abs(float64(st.Gap.Quantile(99)-c.itl)), math.Abs(float64(st.Gap.Quantile(1)-c.itl)))
		fmt.Fprintf(o.Report, "| %s | %v | %s | %s | %v | %s | %s | %.3f / %.3f ms |\n", c.name, c.ttft, msf(st.TTFT.Quantile(50)), msf(st.TTFT.Quantile(99)),
			c.itl, msf(st.Gap.Quantile(50)), msf(st.Gap.Quantile(99)), errT/1e6, errI/1e6)
	}
	fmt.Fprintln(o.Report, "\nThe error column is the larger of |p99 − configured| and |p1 − configured|.")
	fmt.Fprintln(o.Report)
	return nil
}

// simCapacity opens streams running at once in one sim process with 20 ms
// decode steps and reports the scheduler's own share of each step and the
// memory per running sequence.
func (o *Overhead) simCapacity(ctx context.Context, streams int) error {
	p, err := startInfergate(o.Binary, "sim", "sim", "--max-num-seqs", fmt.Sprint(streams+48),
		"--kv-cache-tokens", fmt.Sprint(streams*4096), "--decode-base-ms", "20", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "10000000")
	if err != nil {
		return err
	}
	defer p.stop()
	pid := p.cmd.Process.Pid
	time.Sleep(300 * time.Millisecond)
	before, err := rssKiB(pid)
	if err != nil {
		return err
	}
	body := requestBody(3000, true) // 3000 tokens at 20ms: a minute of decoding
	closeAll, err := holdStreams(ctx, p.addr, streams, body)
	if err != nil {
		return err
	}
	defer closeAll()
	url := "http://" + p.addr + "/metrics"
	deadline := time.Now().Add(30 * time.Second)
	var m map[string]float64
	for time.Now().Before(deadline) {
		if m, err = scrapeSim(url); err == nil && m["vllm:num_requests_running"] >= float64(streams) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m["vllm:num_requests_running"] < float64(streams) {
		return fmt.Errorf("only %v of %d streams running", m["vllm:num_requests_running"], streams)
	}
	busy0, steps0 := m["infergate_sim_scheduler_busy_seconds_total"], m["infergate_sim_steps_total"]
	t0 := time.Now()
	time.Sleep(5 * time.Second)
	m2, err := scrapeSim(url)
	if err != nil {
		return err
	}
	wall := time.Since(t0).Seconds()
	steps := m2["infergate_sim_steps_total"] - steps0
	busy := m2["infergate_sim_scheduler_busy_seconds_total"] - busy0
	after, err := rssKiB(pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Report, "### sim-capacity\n\n%d streams decoding at once, 20 ms per step, one sim process.\n\n", streams)
	fmt.Fprintln(o.Report, "| running | steps/s | mean step | scheduler time per step | share of step | RSS before | RSS running | per sequence |")
	fmt.Fprintln(o.Report, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(o.Report, "| %.0f | %.1f | %.2f ms | %.3f ms | %.2f%% | %d KiB | %d KiB | %.1f KiB |\n\n", m2["vllm:num_requests_running"], steps/wall,
		wall/steps*1000, busy/steps*1000, busy/steps/0.020*100, before, after, float64(after-before)/float64(streams))
	return nil
}

// scrapeSim reads the sim's metrics: gauges and counters by name.
func scrapeSim(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse sim metrics: %w", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.Metric {
			switch {
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			}
		}
	}
	return out, nil
}

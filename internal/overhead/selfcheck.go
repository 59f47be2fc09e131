package overhead

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// The load generator's own checks, the figures BENCHMARKS.md
// promises (docs/benchmarks-log.md, "2026-12-02: The load generator (issue 4)"): how
// many streams one bench process drives and at what CPU and memory, how
// its plain request rate compares with hey's, and how much it adds to a
// measured TTFT.

// benchProc runs `infergate bench` with args as a child process and
// returns its record, CPU seconds and peak RSS.
func (o *Overhead) benchProc(ctx context.Context, dir string, args ...string) (*bench.Record, float64, int64, error) {
	out := filepath.Join(dir, fmt.Sprintf("run-%d.json", time.Now().UnixNano()))
	cmd := exec.CommandContext(ctx, o.Binary, append([]string{"bench", "--quiet", "--out", out}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, 0, fmt.Errorf("bench %v: %w\n%s", args, err, stderr.String())
	}
	rec, err := bench.LoadRecord(out)
	if err != nil {
		return nil, 0, 0, err
	}
	st := cmd.ProcessState
	cpu := (st.UserTime() + st.SystemTime()).Seconds()
	return rec, cpu, peakRSSKiB(st), nil
}

// cpuSeconds reads a process's user + system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// benchCapacity drives streams at once from one bench process against a
// sim sized for them: 20 ms decode steps, each answer 400 tokens (8 s).
// It reports the bench's CPU against the sim's over the same run, and its
// memory per open stream against a one-stream run.
func (o *Overhead) benchCapacity(ctx context.Context, dir string, streams int) error {
	sim, err := startInfergate(o.Binary, "sim", "sim", "--max-num-seqs", fmt.Sprint(streams+64),
		"--kv-cache-tokens", fmt.Sprint((streams+64)*512), "--decode-base-ms", "20", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "100000000",
		"--max-batched-tokens", fmt.Sprint(4*streams))
	if err != nil {
		return err
	}
	defer sim.stop()
	args := func(c int) []string {
		return []string{"--url", "http://" + sim.addr, "--model", "sim-model", "--concurrency", fmt.Sprint(c), "--input-tokens", "32",
			"--output-tokens", "400", "--force-output-length", "--duration", (3 * o.RoundTime).String(), "--warmup", "0",
			"--ramp-up", "2s"}
	}
	fmt.Fprintf(o.Report, "### bench-capacity\n\nOne bench process, %d streams at once against one sim (20 ms steps, 400-token answers), %v per run.\n\n", streams, 3*o.RoundTime)
	fmt.Fprintln(o.Report, "| streams | ok | failed | output tok/s | TTFT p50 | ITL p99 | bench CPU | sim CPU | bench / sim CPU | bench peak RSS | per stream |")
	fmt.Fprintln(o.Report, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var baseRSS int64
	for _, c := range []int{1, streams} {
		simCPU0, err := cpuSeconds(sim.cmd.Process.Pid)
		if err != nil {
			return err
		}
		rec, cpu, peak, err := o.benchProc(ctx, dir, args(c)...)
		if err != nil {
			return err
		}
		simCPU1, _ := cpuSeconds(sim.cmd.Process.Pid)
		s := rec.Stages[0]
		per := "-"
		if c == 1 {
			baseRSS = peak
		} else {
			per = fmt.Sprintf("%.1f KiB", float64(peak-baseRSS)/float64(c-1))
		}
		itl := 0.0
		if p := s.Metrics["itl"]; p != nil && p.P99 != nil {
			itl = *p.P99
		}
		ttft := 0.0
		if p := s.Metrics["ttft"]; p != nil {
			ttft = p.P50
		}
		fmt.Fprintf(o.Report, "| %d | %d | %d | %.0f | %.1f ms | %.1f ms | %.2f s | %.2f s | %.2f | %d KiB | %s |\n", c, s.OK, s.Failed,
			s.OutputTokenThroughput, ttft, itl, cpu, simCPU1-simCPU0, cpu/(simCPU1-simCPU0), peak, per)
		fmt.Fprintf(o.Progress, "bench-capacity %d streams: bench CPU %.2fs, sim CPU %.2fs, peak RSS %d KiB\n", c, cpu, simCPU1-simCPU0, peak)
	}
	fmt.Fprintln(o.Report, "\nPer stream: (peak RSS with all streams − peak RSS with one) / (streams − 1).")
	fmt.Fprintln(o.Report)
	return nil
}

var heyRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// benchVsHey runs hey and infergate bench in turns against a sim that adds
// no delay, non-streaming, at the same concurrency, and reports both
// request rates.
func (o *Overhead) benchVsHey(ctx context.Context, dir string, conc int) error {
	hey, err := exec.LookPath("hey")
	if err != nil {
		fmt.Fprintf(o.Report, "### bench-vs-hey\n\nhey not found (Debian package hey): skipped.\n\n")
		return nil
	}
	sim, err := startInfergate(o.Binary, "sim", "sim", "--ttft", "0", "--itl", "0")
	if err != nil {
		return err
	}
	defer sim.stop()
	body := filepath.Join(dir, "body.json")
	// The same request both ways: a 3-token prompt, exactly 16 tokens back.
	if err := os.WriteFile(body, []byte(`{"model":"sim-model","messages":[{"role":"user","content":" the of and"}],"stream":false,"max_tokens":16,"min_tokens":16,"ignore_eos":true}`), 0o644); err != nil {
		return err
	}
	url := "http://" + sim.addr + "/v1/chat/completions"
	var heyRates, benchRates []float64
	for r := range o.Rounds {
		for k := range 2 {
			if (r+k)%2 == 0 {
				out, err := exec.CommandContext(ctx, hey, "-c", fmt.Sprint(conc), "-z", o.RoundTime.String(), "-m", "POST", "-D", body,
					"-T", "application/json", url).Output()
				if err != nil {
					return fmt.Errorf("hey: %w", err)
				}
				m := heyRate.FindSubmatch(out)
				if m == nil {
					return fmt.Errorf("hey printed no Requests/sec:\n%s", out)
				}
				v, _ := strconv.ParseFloat(string(m[1]), 64)
				heyRates = append(heyRates, v)
				fmt.Fprintf(o.Progress, "bench-vs-hey round %d hey %.0f req/s\n", r+1, v)
				continue
			}
			rec, _, _, err := o.benchProc(ctx, dir, "--url", url, "--model", "sim-model", "--no-stream", "--concurrency", fmt.Sprint(conc),
				"--input-tokens", "3", "--output-tokens", "16", "--force-output-length", "--duration", o.RoundTime.String(), "--warmup", "0")
			if err != nil {
				return err
			}
			s := rec.Stages[0]
			if s.Failed > 0 {
				return fmt.Errorf("bench: %d failed: %v", s.Failed, s.ErrorSamples)
			}
			benchRates = append(benchRates, s.RequestThroughput)
			fmt.Fprintf(o.Progress, "bench-vs-hey round %d bench %.0f req/s\n", r+1, s.RequestThroughput)
		}
	}
	fmt.Fprintf(o.Report, "### bench-vs-hey\n\nNon-streaming, concurrency %d, a sim that adds no delay, %d interleaved rounds of %v each.\n\n", conc, o.Rounds, o.RoundTime)
	fmt.Fprintln(o.Report, "| client | req/s per round | median | ratio to hey |")
	fmt.Fprintln(o.Report, "|---|---|---:|---:|")
	fmt.Fprintf(o.Report, "| hey | %s | %.0f | 1.00 |\n", joinF(heyRates), verdict.Median(heyRates))
	fmt.Fprintf(o.Report, "| infergate bench | %s | %.0f | %.2f |\n\n", joinF(benchRates), verdict.Median(benchRates), verdict.Median(benchRates)/verdict.Median(heyRates))
	return nil
}

func joinF(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, strconv.FormatFloat(x, 'f', 0, 64))
	}
	return strings.Join(parts, ", ")
}

// benchTiming measures what the client adds to TTFT at light load: the
// sim reports its own request-read → first-token-written time
// (X-Sim-Timing), and the bench's TTFT less that is the loopback network
// both ways, the sim's own write path after its stamp, and the client.
func (o *Overhead) benchTiming(ctx context.Context, dir string) error {
	sim, err := startInfergate(o.Binary, "sim", "sim", "--ttft", "50ms", "--itl", "10ms")
	if err != nil {
		return err
	}
	defer sim.stop()
	rec, _, _, err := o.benchProc(ctx, dir, "--url", "http://"+sim.addr, "--model", "sim-model", "--concurrency", "4", "--input-tokens", "32",
		"--output-tokens", "20", "--duration", (3 * o.RoundTime).String(), "-H", "X-Sim-Timing: 1")
	if err != nil {
		return err
	}
	s := rec.Stages[0]
	fmt.Fprintf(o.Report, "### bench-timing\n\nLight load: 4 streams against a fixed-mode sim (TTFT 50 ms, ITL 10 ms), %v, %d requests.\n\n", 3*o.RoundTime, s.OK)
	fmt.Fprintln(o.Report, "| figure | p50 | p90 | p99 | max |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|---:|")
	for _, k := range []string{"ttft", "server_ttft", "client_added"} {
		p := s.Metrics[k]
		if p == nil {
			return fmt.Errorf("no %s in the record", k)
		}
		fmt.Fprintf(o.Report, "| %s | %.3f ms | %.3f ms | %.3f ms | %.3f ms |\n", k, p.P50, ptrOr(p.P90), ptrOr(p.P99), p.Max)
	}
	p := s.Metrics["ttft"]
	fmt.Fprintf(o.Report, "\nTTFT against the configured 50 ms: p50 %+.3f ms, p99 %+.3f ms.\n\n", p.P50-50, ptrOr(p.P99)-50)
	return nil
}

func ptrOr(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

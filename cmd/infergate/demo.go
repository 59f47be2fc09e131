package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/verdict"
)

const demoSynopsis = `demo [--preset NAME] [--concurrency N] [--duration D] [--dir DIR] [--no-mirror]

The workflow in one command, with no setup. It starts a simulator (a
continuous-batching server with vLLM's behaviour and metrics; by default
the memory-bound preset, a server whose KV cache is too small for its
load) and the gateway in this process on loopback ports, then:

  1. measures a baseline through the gateway (closed loop, --concurrency
     users for --duration), reading the gateway's and the server's metrics
     meanwhile;
  2. diagnoses it: names the bottleneck with its evidence and the next
     knob (infergate diagnose);
  3. turns that knob on the running gateway (a concurrency cap at the
     knee, through a configuration reload);
  4. measures again under the same load;
  5. compares the two runs (infergate compare): KEEP, or ROLL BACK, in
     which case it rolls the gateway's configuration back (infergate
     config rollback);
  6. mirrors traffic to a candidate build (a second simulator posing as an
     int4 quantization: faster decode, more malformed JSON, refusals and
     truncation) and judges it on the same requests (infergate ab report).

Every record and a self-contained HTML report of each step go to --dir
(default: a new folder under the system's temporary folder, named at the
end). --no-mirror leaves step 6 out.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	preset := fs.String("preset", "memory-bound", "simulator preset: "+fmt.Sprint(sim.Presets()))
	noMirror := fs.Bool("no-mirror", false, "leave out the shadow test of a candidate build")
	dir := fs.String("dir", "", "folder for the records and reports (default: a new one under the temporary folder)")
	f := registerBenchFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	out := *dir
	if out == "" {
		d, err := os.MkdirTemp("", "infergate-demo-")
		if err != nil {
			return err
		}
		out = d
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	scfg, err := sim.Preset(*preset)
	if err != nil {
		return err
	}
	simURL, stopSim, err := startSim(scfg, log)
	if err != nil {
		return err
	}
	defer stopSim()
	gcfg := quickConfig("127.0.0.1:0", simURL, "/health")
	g, err := proxy.New(gcfg, log)
	if err != nil {
		return err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: gateway: %w", err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gln.Close()
		return fmt.Errorf("demo: gateway admin: %w", err)
	}
	go g.Serve(gln)
	go g.ServeAdmin(aln)
	defer shutdownWithin(g.Shutdown, 2*time.Second)
	gwURL, adminURL := "http://"+gln.Addr().String(), "http://"+aln.Addr().String()
	fmt.Fprintf(stdout, "demo: a simulated inference server (%s preset) at %s, the infergate gateway in front of it at %s (admin %s)\n\n",
		*preset, simURL, gwURL, adminURL)

	// The demo's own defaults, where the flags were not given.
	if !set["url"] {
		*f.url = gwURL
	}
	if !set["concurrency"] && !set["rate"] && !set["sweep"] {
		*f.concurrency = 48
	}
	if !set["duration"] && !set["requests"] {
		*f.duration = 10 * time.Second
	}
	if !set["model"] {
		*f.model = scfg.Model
	}
	if !set["gateway-timing"] {
		*f.gwTiming = true
	}
	if !set["gateway-admin"] {
		*f.gwAdmin = adminURL
	}
	*f.quiet = true
	cfg, err := f.config(set, stderr)
	if err != nil {
		return err
	}
	rs, err := bench.Probe(ctx, bench.ProbeConfig{URL: gwURL + "/v1/chat/completions", Stream: true, N: 5,
		Body: fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"stream":true}`, scfg.Model)})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "one request at a time first, to see where a single request's time goes:")
	bench.WriteProbe(stdout, gwURL+"/v1/chat/completions", rs)

	// 1. The baseline, with the metrics read while it runs.
	step(stdout, 1, "baseline: %d users in closed loop for %v through the gateway", cfg.Load.Concurrency, cfg.Load.Duration)
	base, win, err := demoRun(ctx, cfg, collect.Config{Gateway: adminURL, Backends: []string{simURL + "/metrics"}, Interval: 500 * time.Millisecond}, out, "1-baseline")
	if err != nil {
		return err
	}
	summarise(stdout, base)

	// 2. Diagnose.
	step(stdout, 2, "diagnose: the gateway's and the server's metrics over the baseline")
	rep := diagnose.Diagnose(diagnose.Input{Backends: win.Backends, Gateway: win.Gateway})
	if err := saveDiagnosis(out, &rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bottleneck: %s (confidence %s)\n  %s\n", strings.ToUpper(rep.Bottleneck), rep.Confidence, rep.Summary)
	for _, e := range rep.Evidence {
		if e.Holds {
			fmt.Fprintf(stdout, "  evidence: %s\n", e.Detail)
		}
	}
	if len(rep.Knobs) > 0 {
		fmt.Fprintf(stdout, "  next knob: %s: %s\n  re-measure: %s\n", rep.Knobs[0].Knob, rep.Knobs[0].Action, rep.Knobs[0].Remeasure)
	}

	if rep.CapAt > 0 {
		// 3. Turn the knob: a cap at the knee, on the running gateway.
		step(stdout, 3, "turn the knob: cap the gateway at %d requests in flight (a configuration reload)", rep.CapAt)
		next := g.Config()
		next.Shaping.Global.MaxRequests = int64(rep.CapAt)
		if err := g.ReloadFrom(fmt.Sprintf("demo: cap at %d", rep.CapAt), next); err != nil {
			return err
		}
		// 4. Measure again under the same load.
		step(stdout, 4, "measure again under the same load")
		after, _, err := demoRun(ctx, cfg, collect.Config{}, out, "4-after-cap")
		if err != nil {
			return err
		}
		summarise(stdout, after)
		// 5. Compare; roll back what did not pay.
		step(stdout, 5, "compare: keep the change or roll it back")
		writeChanges(stdout, &base.Conditions, &after.Conditions)
		c := bench.Compare(base, after, verdict.Options{})
		for _, ch := range c.Changes {
			if ch.Stage == 0 && (ch.Judgement != verdict.Unsure || ch.Metric == "output_token_throughput") && !ch.Quality {
				fmt.Fprintf(stdout, "  %-24s %s  (%s)\n", ch.Metric, verdict.FormatDelta(ch), ch.Judgement)
			}
		}
		fmt.Fprintf(stdout, "verdict: %s\n", c.Verdict)
		for _, r := range c.Reasons {
			fmt.Fprintf(stdout, "  - %s\n", r)
		}
		if c.Verdict != verdict.Keep {
			v, err := g.Rollback(0, "")
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "rolled back: the gateway runs its earlier configuration again (version %d, %s, %s)\n", v.Version, v.Hash, v.Source)
			fmt.Fprintln(stdout, "  the cap moved the wait from the server's queue to the gateway's: streams ran smoother, first tokens came later; under this load that did not pay")
		} else {
			fmt.Fprintln(stdout, "kept: the cap stays")
		}
	} else {
		step(stdout, 3, "no knob to turn: %s", rep.Summary)
	}

	if !*noMirror {
		if err := shadowTest(ctx, g, scfg, log, f, set, stdout, stderr, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nrecords and reports: %s\n", out)
	return nil
}

func step(w io.Writer, n int, format string, args ...any) {
	fmt.Fprintf(w, "\n== %d. %s\n", n, fmt.Sprintf(format, args...))
}

// startSim serves a simulator on a loopback port.
func startSim(cfg sim.Config, log *slog.Logger) (string, func(), error) {
	s, err := sim.New(cfg, log)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("demo: sim: %w", err)
	}
	go s.Serve(ln)
	return "http://" + ln.Addr().String(), func() { shutdownWithin(s.Shutdown, 2*time.Second) }, nil
}

// demoRun runs one benchmark, saving its record and report as name.json
// and name.html in dir; with sc's targets set it samples them over the
// run (after the first fifth, while the batch fills).
func demoRun(ctx context.Context, cfg bench.Config, sc collect.Config, dir, name string) (*bench.Record, collect.Windows, error) {
	var win collect.Windows
	var werr error
	done := make(chan struct{})
	sampling := len(sc.Backends) > 0 || sc.Gateway != ""
	if sampling {
		sc.Window = cfg.Load.Duration * 3 / 4
		go func() {
			defer close(done)
			select {
			case <-time.After(cfg.Load.Duration / 5):
				win, werr = collect.Sample(ctx, sc)
			case <-ctx.Done():
				werr = ctx.Err()
			}
		}()
	} else {
		close(done)
	}
	rec, err := bench.Run(ctx, cfg)
	<-done
	if err != nil {
		return nil, win, err
	}
	if werr != nil {
		return nil, win, werr
	}
	if err := rec.Save(filepath.Join(dir, name+".json")); err != nil {
		return nil, win, err
	}
	if err := writeFileWith(filepath.Join(dir, name+".html"), rec.WriteHTML); err != nil {
		return nil, win, err
	}
	return rec, win, nil
}

// summarise prints a run's headline figures.
func summarise(w io.Writer, rec *bench.Record) {
	if len(rec.Stages) == 0 {
		return
	}
	s := rec.Stages[0]
	p := func(name string) string {
		m := s.Metrics[name]
		if m == nil {
			return "-"
		}
		if m.P99 != nil {
			return fmt.Sprintf("%.0f / %.0f ms", m.P50, *m.P99)
		}
		if m.P90 != nil {
			return fmt.Sprintf("%.0f / %.0f (p90) ms", m.P50, *m.P90)
		}
		return fmt.Sprintf("%.0f ms", m.P50)
	}
	fmt.Fprintf(w, "%d requests, %d failed; TTFT p50/p99 %s; time per output token p50/p99 %s; %.0f output tokens/s\n",
		s.Requests, s.Failed, p("ttft"), p("tpot"), s.OutputTokenThroughput)
}

func saveDiagnosis(dir string, rep *diagnose.Report) error {
	b, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "2-diagnose.json"), b, 0o644); err != nil {
		return err
	}
	return writeFileWith(filepath.Join(dir, "2-diagnose.html"), func(w io.Writer) error { return rep.WriteHTML(w, "infergate diagnose: "+rep.Bottleneck) })
}

// shadowTest mirrors the gateway's traffic to a candidate simulator (the
// int4 variant of the same preset) and judges the pairs.
func shadowTest(ctx context.Context, g *proxy.Gateway, scfg sim.Config, log *slog.Logger, f *benchFlags, set map[string]bool, stdout, stderr io.Writer, dir string) error {
	ccfg := scfg
	if err := ccfg.ApplyVariant("int4"); err != nil {
		return err
	}
	candURL, stopCand, err := startSim(ccfg, log)
	if err != nil {
		return err
	}
	defer stopCand()
	step(stdout, 6, "shadow test: mirror every request to a candidate build (int4) at %s, judge it on the same requests", candURL)
	next := g.Config()
	next.Pools["candidate"] = proxy.PoolConfig{Backends: []proxy.BackendConfig{{URL: candURL}}}
	next.Mirror.Rules = []mirror.Rule{{Name: "int4-candidate", Pool: "candidate", Sample: 1}}
	if err := g.ReloadFrom("demo: mirror to the int4 candidate", next); err != nil {
		return err
	}
	// JSON answers show what the candidate breaks; a JSON answer cut at
	// max_tokens is broken on both sides, so none is sent.
	if !set["json"] {
		*f.json = true
	}
	if !set["output-tokens"] {
		*f.output = "none"
	}
	if !set["concurrency"] {
		*f.concurrency = 8
	}
	if !set["duration"] {
		*f.duration = 8 * time.Second
	}
	*f.gwAdmin = ""
	cfg, err := f.config(set, stderr)
	if err != nil {
		return err
	}
	if _, err := bench.Run(ctx, cfg); err != nil {
		return err
	}
	for wait := time.Now().Add(10 * time.Second); g.MirrorsInFlight() > 0 && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	pairs := g.Pairs().Pairs
	if len(pairs) == 0 {
		fmt.Fprintln(stdout, "no pairs were recorded")
		return nil
	}
	fmt.Fprintf(stdout, "%d pairs: each request answered by the primary and the candidate\n\n", len(pairs))
	r := mirror.Report(pairs, verdict.Options{})
	r.Write(stdout)
	return writeFileWith(filepath.Join(dir, "6-shadow-test.html"), func(w io.Writer) error {
		return r.WriteHTML(w, "infergate ab report", mirror.Examples(pairs, 5))
	})
}

// shutdownWithin calls shutdown with a deadline d from now.
func shutdownWithin(shutdown func(context.Context) error, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = shutdown(ctx)
}

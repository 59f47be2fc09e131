package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
	"github.com/infergate/infergate/proxy"
)

const diagnoseSynopsis = `diagnose [--admin ADMIN_URL] [--backend-metrics URL ...] [--dcgm URL] [--window 15s] [--sweep 1,4,16,64 --url API_URL] [--json | --html FILE]

Reads the gateway's own figures (queue depth and wait, requests in flight,
the cap, rejections) from its admin listener and each backend's Prometheus
metrics by their real names (vLLM, SGLang, TGI, llama.cpp, whose slot
count, its batch bound, comes from GET /props or /slots beside /metrics;
GPU utilisation from the DCGM exporter), samples them over --window, and
names the bottleneck: memory, batching, scheduling, compute, or none. Each
verdict comes with the evidence that led to it, what could not be seen
(a figure the server does not report), its confidence, whether the load
is prefill- or decode-bound, and the next knobs in order of cost with the
figure to re-measure after turning each.

Without --backend-metrics the backends are the gateway's own (read from
/admin/stats), at /metrics. With --sweep it runs a short closed-loop
benchmark at each concurrency through --url (each step --step long) and
reads how speed, TTFT and the metrics move with load; the diagnosis is made
at the heaviest step, with the sweep as evidence.

--json prints the report as JSON (top-level "bottleneck"); --html writes a
self-contained page. Exit status 0 when the report was made.`

func runDiagnose(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("diagnose", diagnoseSynopsis, stderr)
	gateway := fs.String("admin", "", "the gateway's admin listener (serve --admin-listen), e.g. http://"+proxy.DefaultAdminListen)
	adminKey := fs.String("admin-key", "", "the gateway's server.admin_auth key, when it has one")
	var backends stringList
	fs.Var(&backends, "backend-metrics", "a backend's metrics URL (repeatable; default: the gateway's backends at /metrics)")
	dcgm := fs.String("dcgm", "", "the DCGM exporter's metrics URL (GPU utilisation)")
	window := fs.Duration("window", 15*time.Second, "how long to sample")
	interval := fs.Duration("interval", time.Second, "time between samples")
	sweep := fs.String("sweep", "", "concurrency levels to sweep, e.g. 1,4,16,64 (needs --url)")
	apiURL := fs.String("url", "", "with --sweep: the API to load (the gateway's, http://host:8080)")
	model := fs.String("model", "", "with --sweep: model name (default: the first of GET /v1/models)")
	step := fs.Duration("step", 10*time.Second, "with --sweep: each step's length")
	input := fs.String("input-tokens", "", "with --sweep: prompt length (as bench's; default 256)")
	output := fs.String("output-tokens", "", "with --sweep: max_tokens (as bench's; default 128)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	htmlOut := fs.String("html", "", "write the report as a self-contained HTML page to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *gateway == "" && len(backends) == 0 {
		return errors.New("diagnose: give --admin ADMIN_URL or --backend-metrics URL")
	}
	if *window <= 0 || *interval <= 0 || *step <= 0 {
		return errors.New("diagnose: --window, --interval and --step must be positive")
	}
	scfg := collect.Config{Gateway: withScheme(*gateway), AdminKey: *adminKey, Backends: backends, DCGM: *dcgm, Interval: *interval, Window: *window}
	if len(scfg.Backends) == 0 {
		found, err := collect.Discover(ctx, scfg)
		if err != nil {
			return fmt.Errorf("diagnose: finding the gateway's backends: %w", err)
		}
		scfg.Backends = found
	}
	var in diagnose.Input
	if *sweep != "" {
		levels, err := bench.ParseSweep(*sweep)
		if err != nil {
			return fmt.Errorf("diagnose: --sweep: %w", err)
		}
		if *apiURL == "" {
			return errors.New("diagnose: --sweep needs --url, the API to load")
		}
		bc := bench.Config{URL: *apiURL}
		bc.Workload.Model, bc.Workload.InputTokens, bc.Workload.OutputTokens = *model, *input, *output
		bc.Load.Duration = *step
		if bc.Workload.Model == "" {
			m, err := firstModel(ctx, bc.URL, nil)
			if err != nil {
				return err
			}
			bc.Workload.Model = m
		}
		pts, err := collect.Sweep(ctx, collect.SweepConfig{Bench: bc, Levels: levels, Sample: scfg}, stderr)
		if err != nil {
			return err
		}
		last := pts[len(pts)-1]
		in = diagnose.Input{Backends: last.Backends, Gateway: last.Gateway, Sweep: pts}
	} else {
		fmt.Fprintf(stderr, "diagnose: sampling %d backend(s)%s every %v for %v\n", len(scfg.Backends), map[bool]string{true: " and the gateway"}[scfg.Gateway != ""], *interval, *window)
		w, err := collect.Sample(ctx, scfg)
		if err != nil {
			return err
		}
		for _, e := range w.Errors {
			fmt.Fprintf(stderr, "diagnose: %s\n", e)
		}
		in = diagnose.Input{Backends: w.Backends, Gateway: w.Gateway}
	}
	rep := diagnose.Diagnose(in)
	if *htmlOut != "" {
		if err := writeFileWith(*htmlOut, func(w io.Writer) error { return rep.WriteHTML(w, "infergate diagnose: "+rep.Bottleneck) }); err != nil {
			return err
		}
	}
	if *asJSON {
		return printJSON(stdout, rep)
	}
	rep.Write(stdout)
	return nil
}

// printJSON writes v as indented JSON, as diagnose --json and size
// --json print their reports.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(v)
}

// createPrivate creates (or truncates) path for its owner alone: records,
// reports and pair summaries hold prompts, answers and backend names.
func createPrivate(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
}

// writeFileWith creates path and has write fill it.
func writeFileWith(path string, write func(io.Writer) error) error {
	fh, err := createPrivate(path)
	if err != nil {
		return err
	}
	return errors.Join(write(fh), fh.Close())
}

// withScheme adds http:// to a bare host:port.
func withScheme(u string) string {
	if u != "" && !strings.Contains(u, "://") {
		return "http://" + u
	}
	return u
}

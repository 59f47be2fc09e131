package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/infergate/infergate/tune"
	"github.com/infergate/infergate/verdict"
)

const tuneSynopsis = `tune --admin ADMIN_URL --url API_URL --slo ttft=2s,tpot=50ms [--rate R | --concurrency C]
     [--knobs cap,queue,max-output,max-input] [--budget 10m] [--journal FILE] [--dir DIR] [--dry-run]
     [--result result.json | --result -] [--html tune.html]

Walks the tuning loop by itself against a running infergate gateway:
measures a baseline at the stated load (open loop at --rate is the load
that makes goodput the figure; closed loop at --concurrency judges by SLO
attainment), diagnoses it, then turns the knobs the gateway owns, cheapest
first: the concurrency cap (the knee diagnose finds, then a quarter below
or half above it), the queue's deadline (the TTFT SLO), the output and
input caps (at p90, when the tail is long). Each change goes through the
gateway's admin API as a kept configuration version, is re-measured at the
same load, and is kept only when compare's verdict at the SLOs is KEEP with
goodput or attainment risen beyond doubt, on two measurements; otherwise
it is rolled back. Every measurement is sized before it runs so that
--quality-tolerance can be settled from the answers it gets (refused
requests are not answers): twice the answers at which a quality rate at 0
in both runs is shown within the tolerance, 292 requests at 2 points; the
size, the tolerance and the rule are printed first, and a quality rate at
0 of N in both runs, N at least that size, holds. For the knobs only the backend owns (quantization,
KV-cache share, batch size, parallelism) it stops and prints the shadow
test to run next.

Bounded by --budget and --max-steps. On Ctrl-C or an error the gateway is
put back on the configuration it started with; the journal's last line
names the configuration it ends on (infergate config versions shows it).
--dry-run prints the plan and changes nothing. Exit 0 when the walk ran,
3 on an error.

The workload and load flags are bench's.`

func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tune", tuneSynopsis, stderr)
	f := registerBenchFlags(fs)
	knobs := fs.String("knobs", strings.Join(tune.AllKnobs, ","), "the gateway knobs to try, in order")
	budget := fs.Duration("budget", 10*time.Minute, "the longest the whole walk may take")
	maxSteps := fs.Int("max-steps", 8, "the most knob changes to try")
	journal := fs.String("journal", "", "append one JSON line per step to this file")
	dir := fs.String("dir", "", "save every measurement's record here, and the walk's pages (tune.html, diagnose.html, index.html)")
	dryRun := fs.Bool("dry-run", false, "print the plan; measure nothing, change nothing")
	resultOut := fs.String("result", "", "also write the result (every step, the final configuration) as JSON to this file; - prints it")
	var backends stringList
	fs.Var(&backends, "backend-metrics", "a backend's metrics URL for the diagnosis (repeatable; default: the gateway's backends)")
	speedTol := fs.String("speed-tolerance", "5%", "accepted fall of goodput, and worsening of a latency median")
	qualityTol := fs.String("quality-tolerance", "2%", "accepted rise of a failure or quality rate, and fall of attainment, in points")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return exitError{3, fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *f.url == "" {
		return exitError{3, errors.New("--url (the gateway's API URL) is required")}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["duration"] && !set["requests"] {
		*f.duration = 15 * time.Second
	}
	*f.quiet = true
	cfg, err := f.config(set, stderr)
	if err != nil {
		return exitError{3, err}
	}
	// Each measurement draws its own seed (its record keeps it): a line
	// per measurement would only interrupt the walk's own account.
	cfg.Log = nil
	if len(cfg.Sweep) > 0 {
		return exitError{3, errors.New("tune measures at one load: --sweep is diagnose's")}
	}
	if cfg.Workload.Model == "" && cfg.Workload.Dataset == "" && cfg.Workload.Replay == "" {
		m, err := firstModel(ctx, cfg.URL, cfg.Headers)
		if err != nil {
			return exitError{3, err}
		}
		cfg.Workload.Model = m
	}
	st, err := percent(*speedTol)
	if err != nil {
		return exitError{3, fmt.Errorf("--speed-tolerance: %w", err)}
	}
	qt, err := percent(*qualityTol)
	if err != nil {
		return exitError{3, fmt.Errorf("--quality-tolerance: %w", err)}
	}
	tc := tune.Config{Admin: withScheme(*f.gwAdmin), AdminKey: *f.gwAdminKey, Bench: cfg, Budget: *budget, MaxSteps: *maxSteps,
		Journal: *journal, Dir: *dir, DryRun: *dryRun, Out: stdout, Backends: backends,
		Options: verdict.Options{SpeedTolerance: st, QualityTolerance: qt,
			Objective: verdict.Objective{SLOs: cfg.SLOs, Percentile: cfg.SLOPercentile}}}
	for k := range strings.SplitSeq(*knobs, ",") {
		if k = strings.TrimSpace(k); k != "" {
			tc.Knobs = append(tc.Knobs, k)
		}
	}
	res, err := tune.Run(ctx, tc)
	if res != nil {
		res.WriteSummary(stdout)
		encode := func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(res)
		}
		switch *resultOut {
		case "":
		case "-":
			err = errors.Join(err, encode(stdout))
		default:
			err = errors.Join(err, writeFileWith(*resultOut, encode))
		}
		if *dir != "" && !*dryRun {
			// The folder of records opens on its pages' index.
			pages := &pageSet{dir: *dir, title: "infergate tune: " + cfg.URL}
			if herr := pages.tune(res, "tune.html", "tune: the walk", "diagnose.html"); herr != nil {
				err = errors.Join(err, herr)
			} else {
				fmt.Fprintf(stdout, "pages: %s\n", filepath.Join(*dir, "index.html"))
			}
		}
		if *f.html != "" {
			// bench's --html names the walk's page here.
			if herr := writeFileWith(*f.html, res.WriteHTML); herr != nil {
				err = errors.Join(err, herr)
			} else {
				fmt.Fprintf(stdout, "report: %s\n", *f.html)
			}
		}
	}
	if err != nil {
		return exitError{3, err}
	}
	return nil
}

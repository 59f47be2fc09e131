package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

const compareSynopsis = `compare BASE.json NEW.json [--slo ttft=2s,tpot=50ms | --objective ttft --allow tpot=+50%]
        [--journal journal.jsonl --change "what changed"] [--force]

Judges a new run against a base run of the same conditions. For each
figure it shows both values, the change and a 95% confidence interval
(bootstrap of the median ratio; Agresti-Caffo for rates; Poisson rate
ratio for goodput) with its test's p-value, and whether the figure holds,
regressed, or cannot be settled yet. What decides depends on the objective:

  --slo          speed is goodput (requests a second meeting every SLO) and
                 SLO attainment at --slo-percentile (p90); a latency counts
                 against the change only when it crosses its SLO. Goodput
                 judges in open loop at one --rate; in closed loop the server
                 sets the rate, so attainment judges. Records made with
                 bench --slo carry their SLOs, and are judged by them.
  --objective    a trade: that figure must improve beyond doubt; figures
                 named in --allow may worsen by their allowance.
  (neither)      strict: every figure must hold. A roll-back that a trade
                 caused says so and names the flag that would judge it.

Quality (failures, invalid JSON, off-schema, refusals, truncation) is a
veto in every mode.

  KEEP          the objective holds or is reached, quality holds   exit 0
  ROLL BACK     speed or a quality signal regressed                 exit 1
  INCONCLUSIVE  too few requests to tell; it says how many          exit 2

Runs measured under different conditions (workload, load mode or level,
warm-up, SLOs, and the server's cache: stages whose cached shares of
prompt tokens differ by more than --cache-tolerance) are refused with the
differing fields (exit 3) unless --force; the seed may differ (bench draws
a fresh one per run, so that no run finds its prompts cached);
so is a run with no successful request or more failures than
--max-failure-rate, with the error that dominated. Any other error exits 3.`

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", compareSynopsis, stderr)
	journal := fs.String("journal", "", "append one JSON line per comparison to this file")
	change := fs.String("change", "", "what changed between the runs (for the journal)")
	force := fs.Bool("force", false, "compare runs whose conditions differ")
	maxFailed := fs.String("max-failure-rate", "50%", "refuse to judge a run in which more requests than this failed")
	tol := registerTolerances(fs)
	files, err := parseWithFiles(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 2 {
		fs.Usage()
		return exitError{3, errors.New("want two record files: BASE.json NEW.json")}
	}
	opts, err := tol.options()
	if err != nil {
		return exitError{3, err}
	}
	mf, err := percent(*maxFailed)
	if err != nil {
		return exitError{3, fmt.Errorf("--max-failure-rate: %w", err)}
	}
	base, err := bench.LoadRecord(files[0])
	if err != nil {
		return exitError{3, err}
	}
	next, err := bench.LoadRecord(files[1])
	if err != nil {
		return exitError{3, err}
	}
	for i, r := range []*bench.Record{base, next} {
		if err := bench.Unjudged(r, mf); err != nil {
			return exitError{3, fmt.Errorf("compare: %s cannot be judged: %w", files[i], err)}
		}
	}
	ct, err := tol.cacheTolerance()
	if err != nil {
		return exitError{3, err}
	}
	d := bench.Differences(&base.Conditions, &next.Conditions)
	if len(opts.Objective.SLOs) > 0 {
		// The command's SLOs judge both runs: the records' own may differ.
		d = slices.DeleteFunc(d, func(s string) bool { return strings.HasPrefix(s, "slo") })
	}
	cd, unknown := bench.CacheDifferences(base, next, ct)
	d = append(d, cd...)
	if len(d) > 0 {
		if !*force {
			return exitError{3, errors.New(bench.Mismatch(d))}
		}
		fmt.Fprintf(stdout, "warning: compared under --force although %s\n\n", strings.Join(d, "; "))
	}
	writeCache(stdout, base, next, unknown)
	writeChanges(stdout, &base.Conditions, &next.Conditions)
	c := bench.Compare(base, next, opts)
	c.Base, c.New = files[0], files[1]
	c.Write(stdout)
	if *journal != "" {
		if err := c.AppendJournal(*journal, *change); err != nil {
			return exitError{3, err}
		}
	}
	if code := verdict.ExitCode(c.Verdict); code != 0 {
		return exitError{code, nil}
	}
	return nil
}

// tolerances are the flags of the verdict's rule, shared by compare and
// ab report.
type tolerances struct {
	speed, quality, cache        *string
	floor                        *time.Duration
	slo, pct, objective, allowed *string
}

func registerTolerances(fs *flag.FlagSet) tolerances {
	return tolerances{
		speed:     fs.String("speed-tolerance", "5%", "accepted worsening of a latency median (and of goodput)"),
		quality:   fs.String("quality-tolerance", "2%", "accepted rise of a failure or quality-signal rate, and fall of SLO attainment, in points"),
		cache:     fs.String("cache-tolerance", fmt.Sprintf("%.0f%%", verdict.DefaultCacheTolerance*100), "refuse to judge when the cached shares of prompt tokens (as the servers reported them) differ by more than this, in points: a difference in conditions"),
		floor:     fs.Duration("speed-floor", time.Millisecond, "latency changes smaller than this hold, however significant"),
		slo:       fs.String("slo", "", "judge speed by goodput and attainment at these SLOs, e.g. ttft=2s,tpot=50ms (ttft, ttft_sched, tpot, e2e); default: the SLOs both records carry"),
		pct:       fs.String("slo-percentile", "p90", "with --slo: the share of requests that must meet each SLO"),
		objective: fs.String("objective", "", "without SLOs, judge a trade: the figure the change is for (ttft, ttft_sched, tpot, e2e), which must improve"),
		allowed:   fs.String("allow", "", "with --objective: how much other figures may worsen, e.g. tpot=+50%,e2e=+10%"),
	}
}

// cacheTolerance is --cache-tolerance as a fraction.
func (t tolerances) cacheTolerance() (float64, error) {
	v, err := percent(*t.cache)
	if err != nil {
		return 0, fmt.Errorf("--cache-tolerance: %w", err)
	}
	return v, nil
}

func (t tolerances) options() (verdict.Options, error) {
	st, err := percent(*t.speed)
	if err != nil {
		return verdict.Options{}, fmt.Errorf("--speed-tolerance: %w", err)
	}
	qt, err := percent(*t.quality)
	if err != nil {
		return verdict.Options{}, fmt.Errorf("--quality-tolerance: %w", err)
	}
	o := verdict.Options{SpeedTolerance: st, QualityTolerance: qt, SpeedFloor: float64(*t.floor) / 1e6}
	if o.Objective.SLOs, err = verdict.ParseSLOs(*t.slo); err != nil {
		return o, err
	}
	if o.Objective.Percentile, err = verdict.ParsePercentile(*t.pct); err != nil {
		return o, fmt.Errorf("--slo-percentile: %w", err)
	}
	if err := verdict.CheckTarget(*t.objective); err != nil {
		return o, err
	}
	o.Objective.Target = *t.objective
	if o.Objective.Allow, err = verdict.ParseAllow(*t.allowed); err != nil {
		return o, err
	}
	switch {
	case len(o.Objective.SLOs) > 0 && o.Objective.Target != "":
		return o, errors.New("--slo and --objective are two ways to judge a trade: give one")
	case len(o.Objective.Allow) > 0 && o.Objective.Target == "":
		return o, errors.New("--allow needs --objective, the figure the change is for")
	case o.Objective.Allow[o.Objective.Target] > 0:
		return o, fmt.Errorf("--allow: %s is the objective; it must improve", o.Objective.Target)
	}
	return o, nil
}

// parseWithFiles parses flags that may come before, between or after the
// file arguments, and returns the files.
func parseWithFiles(fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return files, nil
}

// percent reads "5%" or "0.05".
func percent(s string) (float64, error) {
	if v, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f >= 100 {
			return 0, fmt.Errorf("%q: want a percentage between 0 and 100", s)
		}
		return f / 100, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f >= 1 {
		return 0, fmt.Errorf("%q: want e.g. 5%% or 0.05", s)
	}
	return f, nil
}

// writeCache shows each stage's cached share of prompt tokens in both
// runs, a condition of the comparison, and says which stages' could not
// be checked.
func writeCache(w io.Writer, base, next *bench.Record, unknown []int) {
	for i := range min(len(base.Stages), len(next.Stages)) {
		fmt.Fprintf(w, "stage %d cached prompt tokens: base %s, new %s\n", i, shareOf(base, i), shareOf(next, i))
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "warning: stages %v: a server reported no cached tokens, so the runs' cache states could not be matched\n", unknown)
	}
	fmt.Fprintln(w)
}

// shareOf is stage i's cached share with the run's cache mode.
func shareOf(r *bench.Record, i int) string {
	return bench.StageCached(r, i, "").String()
}

// writeChanges says what changed between the runs besides the workload,
// and warns when it was more than one thing: a verdict on several changes
// at once cannot say which of them earned it.
func writeChanges(w io.Writer, a, b *bench.Conditions) {
	changes, known := bench.ConfigChanges(a, b)
	if len(changes) == 0 {
		if a.GatewaySettings != nil && b.GatewaySettings != nil {
			fmt.Fprintln(w, "what changed: nothing in the gateway's configuration (a change elsewhere, or none)")
			fmt.Fprintln(w)
		}
		return
	}
	fmt.Fprintln(w, "what changed:")
	for _, c := range changes {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if !known {
		fmt.Fprintln(w, "  (run bench with --admin to record the gateway's settings and see which changed)")
	}
	if len(changes) > 1 {
		fmt.Fprintf(w, "warning: %d things changed between the runs; change one variable at a time, or the verdict cannot say which change earned it\n", len(changes))
	}
	fmt.Fprintln(w)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

const compareSynopsis = `compare BASE.json NEW.json [--journal journal.jsonl --change "what changed"] [--force]

Judges a new run against a base run of the same conditions. For each
figure it shows both values, the change and a 95% confidence interval
(bootstrap of the median ratio; Agresti-Caffo for rates) with the
Mann-Whitney p-value, and whether the figure holds, regressed, or cannot
be settled yet. The verdict keeps a change only when speed AND quality hold:

  KEEP          every figure holds within its tolerance      exit 0
  ROLL BACK     speed or a quality signal regressed           exit 1
  INCONCLUSIVE  too few requests to tell; it says how many    exit 2

Runs measured under different conditions (workload, load mode or level,
warm-up, SLOs) are refused with the differing fields (exit 3) unless --force.
Any other error exits 3 as well.`

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", compareSynopsis, stderr)
	journal := fs.String("journal", "", "append one JSON line per comparison to this file")
	change := fs.String("change", "", "what changed between the runs (for the journal)")
	force := fs.Bool("force", false, "compare runs whose conditions differ")
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
	base, err := bench.LoadRecord(files[0])
	if err != nil {
		return exitError{3, err}
	}
	next, err := bench.LoadRecord(files[1])
	if err != nil {
		return exitError{3, err}
	}
	if d := bench.Differences(&base.Conditions, &next.Conditions); len(d) > 0 {
		if !*force {
			return exitError{3, errors.New(bench.Mismatch(d))}
		}
		fmt.Fprintf(stdout, "warning: compared under --force although %s\n\n", strings.Join(d, "; "))
	}
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
	speed, quality *string
	floor          *time.Duration
}

func registerTolerances(fs *flag.FlagSet) tolerances {
	return tolerances{
		speed:   fs.String("speed-tolerance", "5%", "accepted worsening of a latency median"),
		quality: fs.String("quality-tolerance", "2%", "accepted rise of a failure or quality-signal rate, in points"),
		floor:   fs.Duration("speed-floor", time.Millisecond, "latency changes smaller than this hold, however significant"),
	}
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
	return verdict.Options{SpeedTolerance: st, QualityTolerance: qt, SpeedFloor: float64(*t.floor) / 1e6}, nil
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
		fmt.Fprintln(w, "  (run bench with --gateway-admin to record the gateway's settings and see which changed)")
	}
	if len(changes) > 1 {
		fmt.Fprintf(w, "warning: %d things changed between the runs; change one variable at a time, or the verdict cannot say which change earned it\n", len(changes))
	}
	fmt.Fprintln(w)
}

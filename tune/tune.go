// Package tune walks the tuning loop by itself: it measures a baseline
// at a stated load, diagnoses it (package diagnose), then turns the knobs
// the gateway owns one at a time, cheapest first (the concurrency cap
// around the knee, the queue deadline, the output and input caps),
// re-measuring at the same offered load after each and keeping a change
// only when the objective's verdict (package verdict, under SLOs) says
// KEEP and goodput or attainment rose, twice. A change that does not pay
// is rolled back through the gateway's configuration history. For the
// knobs only the backend owns it stops and names the shadow test to run
// next. Every step goes into a journal; an interruption or an error
// leaves the gateway on the configuration it started with.
package tune

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/diagnose/collect"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/verdict"
)

// Knobs the gateway owns, in the order they are tried (cheapest and
// most often right first).
const (
	KnobCap       = "cap"
	KnobQueue     = "queue"
	KnobMaxOutput = "max-output"
	KnobMaxInput  = "max-input"
)

// AllKnobs is every gateway knob, in order.
var AllKnobs = []string{KnobCap, KnobQueue, KnobMaxOutput, KnobMaxInput}

// Config is one tuning walk.
type Config struct {
	// Admin is the gateway's admin URL, AdminKey its server.admin_auth.
	Admin, AdminKey string
	// Bench is the load every measurement runs: the gateway's API URL,
	// the workload, and the load (open loop at a rate is the load that
	// makes goodput the figure).
	Bench bench.Config
	// Options are the verdict's; Options.Objective.SLOs must be set.
	Options verdict.Options
	// Knobs are the gateway knobs to try, in order (AllKnobs when nil).
	Knobs []string
	// Budget bounds the whole walk; MaxSteps the knob changes tried.
	Budget   time.Duration
	MaxSteps int
	// Backends are the backends' metrics URLs for the diagnosis (found
	// through the gateway's /admin/stats when empty).
	Backends []string
	// Dir receives each measurement's record; Journal, when set, one JSON
	// line per step.
	Dir, Journal string
	// DryRun measures nothing and changes nothing: it prints the plan.
	DryRun bool
	// Out receives the narrative; nil discards it.
	Out io.Writer
	// HTTP is the admin client (http.DefaultClient when nil).
	HTTP *http.Client
}

// Result is what a walk did.
type Result struct {
	Objective  string `json:"objective"`
	Bottleneck string `json:"bottleneck"`
	Diagnosis  string `json:"diagnosis"`
	// Report is the baseline's whole diagnosis.
	Report *diagnose.Report `json:"report,omitempty"`
	Steps  []Entry          `json:"steps"`
	Start  adminapi.Version `json:"start"`
	Final  adminapi.Version `json:"final"`
	Next   []Suggestion     `json:"next,omitempty"`
	// Stopped says why the walk ended before its plan did (budget, steps,
	// interrupted, an error), empty when it ran its plan.
	Stopped string `json:"stopped,omitempty"`
	// Size is each measurement's size and the quality tolerance it can
	// settle; Rule says when a step is kept, at that size.
	Size Size   `json:"size"`
	Rule string `json:"rule"`
}

// Entry is one step of the walk: one line of the journal.
type Entry struct {
	Time time.Time `json:"time"`
	Step int       `json:"step"`
	// Event is baseline, try, confirm, keep, roll back, skip or end.
	Event    string            `json:"event"`
	Knob     string            `json:"knob,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	// Diff is what the step changed in the gateway's settings.
	Diff []string `json:"diff,omitempty"`
	// Record is the measurement's file; Against the one it was judged
	// against.
	Record  string   `json:"record,omitempty"`
	Against string   `json:"against,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Hint    string   `json:"hint,omitempty"`
	// Goodput (req/s) and Attainment (share) of the measurement.
	Goodput    float64 `json:"goodput"`
	Attainment float64 `json:"attainment"`
	// Version and Hash are the configuration the gateway runs after the
	// step.
	Version int    `json:"version,omitempty"`
	Hash    string `json:"hash,omitempty"`
	Note    string `json:"note,omitempty"`
	// Decided names the figures that decided a judged step, in one line.
	Decided string `json:"decided,omitempty"`
}

// Validate refuses a walk that cannot be judged or bounded.
func (c *Config) Validate() error {
	switch {
	case c.Admin == "":
		return errors.New("tune: --admin (the gateway's admin URL) is required: the walk changes its configuration")
	case len(c.Options.Objective.SLOs) == 0:
		return errors.New("tune: --slo is required: a change is kept when it brings the SLOs closer, e.g. --slo ttft=2s,tpot=50ms")
	case c.Budget <= 0:
		return errors.New("tune: --budget must be positive")
	}
	for _, k := range c.Knobs {
		if !slices.Contains(AllKnobs, k) {
			return fmt.Errorf("tune: --knobs: %q is not one of %v", k, AllKnobs)
		}
	}
	return nil
}

// tuner is one walk in progress.
type tuner struct {
	cfg      Config
	adm      *admin
	out      io.Writer
	deadline time.Time
	res      *Result
	n        int // records written
	// best is the record and configuration every step is judged against.
	best     *bench.Record
	bestFile string
	bestHash string
	// stepN counts the changes tried.
	stepN      int
	journalErr error
	// took is how long the last measurement ran.
	took time.Duration
}

// Run walks the loop. Whatever happens, the gateway ends on a
// configuration the result's Final (and the journal's last line) names:
// the best kept one, or on an interruption or error the one it started
// with.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Options.Defaults()
	if len(cfg.Knobs) == 0 {
		cfg.Knobs = AllKnobs
	}
	cfg.MaxSteps = cmp.Or(cfg.MaxSteps, 8)
	cfg.Bench.SLOs = cfg.Options.Objective.SLOs
	cfg.Bench.SLOPercentile = cfg.Options.Objective.Percentile
	cfg.Bench.Load.Defaults(cfg.Bench.Workload.Replay != "")
	var size Size
	cfg.Bench.Load, size = SizeLoad(cfg.Bench.Load, cfg.Options.QualityTolerance)
	t := &tuner{cfg: cfg, out: cmp.Or[io.Writer](cfg.Out, io.Discard), deadline: time.Now().Add(cfg.Budget),
		adm: &admin{c: &adminapi.Client{URL: cfg.Admin, Key: cfg.AdminKey, HTTP: cfg.HTTP}},
		res: &Result{Objective: cfg.Options.Objective.String(), Size: size, Rule: Rule(size)}}
	start, err := t.adm.current(ctx)
	if err != nil {
		return nil, err
	}
	t.res.Start, t.res.Final, t.bestHash = start, start, start.Hash
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("tune: %w", err)
		}
	}
	if cfg.DryRun {
		t.plan()
		return t.res, nil
	}
	defer func() {
		// Interrupted or failed: back to where it began.
		if err != nil {
			t.res.Stopped = cmp.Or(t.res.Stopped, err.Error())
			if v, rerr := t.adm.restore(context.WithoutCancel(ctx), start.Hash); rerr == nil {
				t.res.Final = v
				fmt.Fprintf(t.out, "\nstopped (%v): the gateway is back on its starting configuration (version %d, %s)\n", err, v.Version, v.Hash)
			} else {
				err = errors.Join(err, fmt.Errorf("tune: restoring the starting configuration: %w", rerr))
			}
		}
		t.journal(Entry{Event: "end", Version: t.res.Final.Version, Hash: t.res.Final.Hash, Note: cmp.Or(t.res.Stopped, "plan done")})
		res = t.res
	}()
	return t.res, t.walk(ctx)
}

func (t *tuner) walk(ctx context.Context) error {
	fmt.Fprintf(t.out, "objective: %s\n", t.res.Objective)
	fmt.Fprintf(t.out, "load: %s\n", loadText(t.cfg.Bench.Load))
	fmt.Fprintf(t.out, "size: %s\n", t.res.Size)
	fmt.Fprintf(t.out, "rule: %s\n", t.res.Rule)
	fmt.Fprintf(t.out, "\n== baseline (configuration version %d, %s)\n", t.res.Start.Version, t.res.Start.Hash)
	base, file, win, err := t.measure(ctx, "baseline", true)
	if err != nil {
		return err
	}
	if l := &t.cfg.Bench.Load; l.Mode == "closed" && l.Duration > 0 && base.Stages[0].Requests < t.res.Size.Requests {
		// A closed loop's pace is the server's: lengthen every
		// measurement so it reaches the size, and measure again.
		got := max(base.Stages[0].Requests, 1)
		l.Duration = time.Duration(math.Ceil(l.Duration.Seconds()*1.2*float64(t.res.Size.Requests)/float64(got))) * time.Second
		t.res.Size.Duration = l.Duration
		fmt.Fprintf(t.out, "  %d requests, fewer than the %d the size needs: each measurement now runs %v; the baseline again\n", base.Stages[0].Requests, t.res.Size.Requests, l.Duration)
		if base, file, win, err = t.measure(ctx, "baseline", true); err != nil {
			return err
		}
	}
	if err := bench.Unjudged(base, maxFailed); err != nil {
		return fmt.Errorf("tune: the baseline cannot be judged: %w", err)
	}
	t.best, t.bestFile = base, file
	g, a := figures(base, t.cfg.Options.Objective)
	be := Entry{Time: nowUTC(), Event: "baseline", Record: file, Goodput: g, Attainment: a, Version: t.res.Start.Version, Hash: t.res.Start.Hash}
	t.res.Steps = append(t.res.Steps, be)
	t.journal(be)
	fmt.Fprintf(t.out, "%s\n%s\n", headline(base, g, a), answersLine(base, t.res.Size))

	rep := diagnose.Diagnose(diagnose.Input{Backends: win.Backends, Gateway: win.Gateway})
	t.res.Bottleneck, t.res.Diagnosis, t.res.Report = rep.Bottleneck, rep.Summary, &rep
	fmt.Fprintf(t.out, "\n== diagnose: %s (confidence %s)\n  %s\n", rep.Bottleneck, rep.Confidence, rep.Summary)
	if rep.Bottleneck == diagnose.None {
		fmt.Fprintln(t.out, "\nnothing to tune: no bottleneck at this load; the configuration stays as it is")
		t.res.Stopped = ""
		return nil
	}
	steps := t.steps(base, &rep)
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		if t.stepN >= t.cfg.MaxSteps {
			t.res.Stopped = fmt.Sprintf("--max-steps %d reached", t.cfg.MaxSteps)
			break
		}
		if s.skip != "" {
			fmt.Fprintf(t.out, "\n== %s: skipped: %s\n", s.knob, s.skip)
			t.journal(Entry{Event: "skip", Knob: s.knob, Note: s.skip})
			continue
		}
		if left := time.Until(t.deadline); left < 2*t.perRun() {
			t.res.Stopped = fmt.Sprintf("budget: %v left, a step needs about %v", left.Round(time.Second), 2*t.perRun())
			break
		}
		kept, err := t.try(ctx, s)
		if err != nil {
			return err
		}
		if s.then != nil {
			steps = append(steps[:i+1], append(s.then(kept), steps[i+1:]...)...)
		}
	}
	t.suggest(&rep)
	return nil
}

// perRun is about how long one measurement takes.
func (t *tuner) perRun() time.Duration {
	return t.expected() + t.cfg.Bench.Load.WarmupTime + 3*time.Second
}

// expected is about how long a measurement's measured part runs: its
// duration, or its count of requests at its rate; in closed loop
// bounded by a count, as long as the last one took.
func (t *tuner) expected() time.Duration {
	l := t.cfg.Bench.Load
	switch {
	case l.Duration > 0:
		return l.Duration
	case l.Mode == "open" && l.Rate > 0:
		return time.Duration(float64(l.Requests) / l.Rate * float64(time.Second))
	case t.took > 0:
		return t.took
	}
	return 30 * time.Second // a count of requests at an unknown pace: a guess
}

// measure runs one measurement and saves its record; with sample, it
// reads the gateway's and backends' metrics meanwhile for a diagnosis.
func (t *tuner) measure(ctx context.Context, name string, sample bool) (*bench.Record, string, collect.Windows, error) {
	var win collect.Windows
	var werr error
	done := make(chan struct{})
	if sample && len(t.cfg.Backends) == 0 {
		// The gateway's own backends, from its live view.
		if bs, err := collect.Discover(ctx, collect.Config{Gateway: t.cfg.Admin, AdminKey: t.cfg.AdminKey}); err == nil {
			t.cfg.Backends = bs
		}
	}
	if sample {
		d := t.expected()
		sc := collect.Config{Gateway: t.cfg.Admin, AdminKey: t.cfg.AdminKey, Backends: t.cfg.Backends, Interval: 500 * time.Millisecond,
			Window: max(d*3/4, time.Second)}
		go func() {
			defer close(done)
			select {
			case <-time.After(d / 5):
				win, werr = collect.Sample(ctx, sc)
			case <-ctx.Done():
				werr = ctx.Err()
			}
		}()
	} else {
		close(done)
	}
	bc := t.cfg.Bench
	bc.GatewayAdmin, bc.GatewayAdminKey = t.cfg.Admin, t.cfg.AdminKey
	if bc.Workload.Seed != 0 {
		// Each measurement on prompts no earlier one sent: the cache an
		// earlier step filled must not speed a later one. (Seed 0 draws
		// a fresh seed per run.)
		bc.Workload.Seed += uint64(t.n) * 0x9e3779b97f4a7c15
	}
	began := time.Now()
	rec, err := bench.Run(ctx, bc)
	t.took = time.Since(began)
	<-done
	if err != nil {
		return nil, "", win, err
	}
	if werr != nil {
		return nil, "", win, fmt.Errorf("tune: reading metrics: %w", werr)
	}
	t.n++
	file := ""
	if t.cfg.Dir != "" {
		file = filepath.Join(t.cfg.Dir, fmt.Sprintf("%02d-%s.json", t.n, name))
		if err := rec.Save(file); err != nil {
			return nil, "", win, err
		}
	}
	return rec, file, win, nil
}

// figures are a record's goodput and attainment at the objective.
func figures(r *bench.Record, obj verdict.Objective) (goodput, attainment float64) {
	return bench.AtObjective(r.Stages[0], obj.SLOs)
}

func nowUTC() time.Time { return time.Now().UTC() }

func fmtMs(ms float64) string { return time.Duration(ms * 1e6).Round(time.Millisecond).String() }

func loadText(l bench.LoadSpec) string {
	switch l.Mode {
	case "closed":
		return fmt.Sprintf("closed loop, %d users: the server sets the rate, so attainment judges (open loop at a fixed --rate makes goodput the figure)", l.Concurrency)
	}
	if l.Duration > 0 {
		return fmt.Sprintf("open loop at %g requests/s for %v: goodput judges", l.Rate, l.Duration)
	}
	return fmt.Sprintf("open loop at %g requests/s, %d requests (about %v): goodput judges", l.Rate, l.Requests,
		time.Duration(float64(l.Requests)/l.Rate*float64(time.Second)).Round(100*time.Millisecond))
}

func headline(r *bench.Record, goodput, attainment float64) string {
	s := r.Stages[0]
	p := func(m string) string {
		if x := s.Metrics[m]; x != nil && x.P90 != nil {
			return fmt.Sprintf("%.0f", *x.P90)
		}
		return "-"
	}
	return fmt.Sprintf("  %d requests, %d failed; TTFT p90 %s ms, TPOT p90 %s ms; goodput %.2f req/s, attainment %.1f%%",
		s.Requests, s.Failed, p("ttft"), p("tpot"), goodput, attainment*100)
}

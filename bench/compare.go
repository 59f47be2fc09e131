package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/verdict"
)

// The comparison of two records: their stages' latencies as independent
// samples and their rates, judged by package verdict's rule.

// Comparison is the outcome of comparing a new run with a base.
type Comparison struct {
	Base, New string // file names
	Changes   []verdict.Change
	// Result is the verdict, what decided it and, for an INCONCLUSIVE
	// one, how many requests per run would likely settle it.
	verdict.Result
	// LoadNote says, under SLOs, whether goodput is comparable in this
	// load mode.
	LoadNote string
	// Dists are each stage's latency percentiles in both runs, by the
	// one rule (package quantile), as the records print them.
	Dists []DistPair
}

// DistPair is one latency's p50 / p90 / p99 in the base and the new run.
type DistPair struct {
	Stage     int
	Metric    string
	Base, New quantile.Three
}

// threeOf is a record's percentiles as Three.
func threeOf(p *Percentiles) quantile.Three {
	if p == nil {
		return quantile.Three{}
	}
	return quantile.Three{N: int(p.N), P50: p.P50, P90: p.P90, P99: p.P99}
}

// Compare compares new against base, stage by stage, judged by o's
// objective; without one on o, by the SLOs both records carry, if they
// carry the same.
func Compare(base, next *Record, o verdict.Options) *Comparison {
	o.Defaults()
	ca, cb := &base.Conditions, &next.Conditions
	if o.Objective.Mode() == verdict.Strict && len(ca.SLOs) > 0 && slices.Equal(ca.SLOs, cb.SLOs) && ca.SLOPercentile == cb.SLOPercentile {
		o.Objective.SLOs, o.Objective.Percentile = base.Conditions.SLOs, base.Conditions.SLOPercentile
	}
	c := &Comparison{}
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	goodputJudged := false
	if o.Objective.Mode() == verdict.BySLO {
		goodputJudged, c.LoadNote = goodputComparable(&base.Conditions, &next.Conditions)
	}
	for i := range min(len(base.Stages), len(next.Stages)) {
		a, b := base.Stages[i], next.Stages[i]
		speed := []string{"ttft", "tpot", "e2e"}
		if base.Conditions.Load.Mode != "closed" {
			speed = append(speed, "ttft_sched")
		}
		for _, m := range speed {
			if a.Metrics[m] != nil || b.Metrics[m] != nil {
				c.Dists = append(c.Dists, DistPair{Stage: i, Metric: m, Base: threeOf(a.Metrics[m]), New: threeOf(b.Metrics[m])})
			}
			if ch, ok := verdict.Samples(i, m, "lower", a.Samples[m], b.Samples[m], o.SpeedTolerance, o.SpeedFloor, rng); ok {
				c.Changes = append(c.Changes, ch)
			}
		}
		if ch, ok := verdict.Samples(i, "speed", "higher", a.Samples["speed"], b.Samples["speed"], o.SpeedTolerance, 0, rng); ok {
			ch.Judgement, ch.Need = verdict.Info, 0 // 1/tpot: judged through tpot
			c.Changes = append(c.Changes, ch)
		}
		c.Changes = append(c.Changes, verdict.InfoChange(i, "output_token_throughput", a.OutputTokenThroughput, b.OutputTokenThroughput, "higher"))
		if a.Metrics["itl"] != nil && b.Metrics["itl"] != nil && a.Metrics["itl"].P99 != nil && b.Metrics["itl"].P99 != nil {
			c.Changes = append(c.Changes, verdict.InfoChange(i, "itl_p99", *a.Metrics["itl"].P99, *b.Metrics["itl"].P99, "lower"))
		}
		rates := []struct {
			name   string
			x, y   int
			na, nb int
		}{
			{"failure_rate", a.Failed, b.Failed, a.Requests, b.Requests},
			{"finish_length_rate", a.Quality.FinishLength, b.Quality.FinishLength, a.OK, b.OK},
			{"empty_rate", a.Quality.Empty, b.Quality.Empty, a.OK, b.OK},
			{"refusal_rate", a.Quality.Refusal, b.Quality.Refusal, a.OK, b.OK},
		}
		if a.Quality.JSONChecked || b.Quality.JSONChecked {
			// Of the answers asked for JSON (records before json_asked:
			// of all successful ones).
			na, nb := cmp.Or(a.Quality.JSONAsked, a.OK), cmp.Or(b.Quality.JSONAsked, b.OK)
			rates = append(rates, struct {
				name   string
				x, y   int
				na, nb int
			}{"invalid_json_rate", a.Quality.InvalidJSON, b.Quality.InvalidJSON, na, nb})
		}
		if a.Quality.SchemaChecked > 0 || b.Quality.SchemaChecked > 0 {
			rates = append(rates, struct {
				name   string
				x, y   int
				na, nb int
			}{"schema_invalid_rate", a.Quality.SchemaInvalid, b.Quality.SchemaInvalid, a.Quality.SchemaChecked, b.Quality.SchemaChecked})
		}
		for _, r := range rates {
			c.Changes = append(c.Changes, verdict.Rates(i, r.name, r.x, r.na, r.y, r.nb, o.QualityTolerance))
		}
		if o.Objective.Mode() == verdict.BySLO && a.PerRequest != nil && b.PerRequest != nil {
			c.Changes = append(c.Changes, sloChanges(i, a, b, o, goodputJudged)...)
		}
	}
	c.Result = verdict.Decide(c.Changes, o)
	return c
}

// goodputComparable says whether goodput can judge the two runs: only in
// open loop at one offered rate; in closed loop the server sets the rate.
func goodputComparable(a, b *Conditions) (bool, string) {
	la, lb := a.Load, b.Load
	switch {
	case la.Mode == "closed" || lb.Mode == "closed":
		return false, "closed loop at a fixed concurrency: the server sets the request rate, so goodput is shown and SLO attainment judges; an open-loop run at a fixed --rate makes goodput the figure to judge"
	case la.Rate != lb.Rate || la.Mode != lb.Mode:
		return false, fmt.Sprintf("offered rates differ (%g and %g req/s): goodput is not comparable, so it is shown and SLO attainment judges", la.Rate, lb.Rate)
	}
	return true, fmt.Sprintf("open loop at %g req/s in both runs: goodput, the requests a second meeting every SLO, judges speed", la.Rate)
}

// sloChanges are a stage's figures at the objective: attainment, goodput
// and each SLO's check at its percentile, from the requests' latencies.
func sloChanges(stage int, a, b *Summary, o verdict.Options, goodputJudged bool) []verdict.Change {
	obj := o.Objective
	metA, metB := attained(a, obj.SLOs), attained(b, obj.SLOs)
	att := verdict.Attainment(stage, metA, a.Requests, metB, b.Requests, o.QualityTolerance)
	g := verdict.Goodput(stage, metA, a.Window, metB, b.Window, min(a.Requests, b.Requests), o.SpeedTolerance)
	switch {
	case !goodputJudged:
		g.Judgement, g.Need = verdict.Info, 0
	case att.Judgement == verdict.Unsure:
		// Open loop at one rate: goodput judges speed and attainment
		// guards it, vetoing only a fall beyond doubt. Both count the
		// same met requests; at a share near one half attainment needs
		// ~900 requests a run to settle within 3 points, which would
		// hold back a goodput gain its own interval has settled.
		att.Judgement, att.Need = verdict.Info, 0
	}
	out := []verdict.Change{att, g}
	for _, slo := range obj.SLOs {
		out = append(out, verdict.Crossing(stage, slo, obj.Pct(), sloValues(a, slo.Metric), sloValues(b, slo.Metric)))
	}
	return out
}

// attained is how many of the stage's measured requests met every SLO,
// from its per-request latencies scaled to its successful requests.
func attained(s *Summary, slos []verdict.SLO) int {
	n := len(s.PerRequest["e2e"])
	if n == 0 {
		return 0
	}
	met := 0
	for i := range n {
		if verdict.Met(slos, func(m string) float64 {
			if col := s.PerRequest[m]; i < len(col) {
				return col[i]
			}
			return 0
		}) {
			met++
		}
	}
	return int(math.Round(float64(met) / float64(n) * float64(s.OK)))
}

// AtObjective is a stage's goodput (requests a second meeting every
// SLO) and attainment (their share of its requests), as Compare judges
// them.
func AtObjective(s *Summary, slos []verdict.SLO) (goodput, attainment float64) {
	if s.Requests == 0 {
		return 0, 0
	}
	met := attained(s, slos)
	if s.Window > 0 {
		goodput = float64(met) / s.Window
	}
	return goodput, float64(met) / float64(s.Requests)
}

// sloValues are a metric's values for the SLO check: a latency not
// measured misses (+Inf), except a TPOT (an answer of one token).
func sloValues(s *Summary, metric string) []float64 {
	col := s.PerRequest[metric]
	out := make([]float64, 0, len(col))
	for _, v := range col {
		switch {
		case v > 0:
			out = append(out, v)
		case metric != "tpot":
			out = append(out, math.Inf(1))
		}
	}
	return out
}

// Write prints the comparison as a table.
func (c *Comparison) Write(w io.Writer) {
	fmt.Fprintf(w, "base %s\nnew  %s\n\n", c.Base, c.New)
	if len(c.Dists) > 0 {
		fmt.Fprintf(w, "%-5s %-24s %26s %26s\n", "stage", "p50 / p90 / p99", "base", "new")
		for _, d := range c.Dists {
			fmt.Fprintf(w, "%-5d %-24s %26s %26s\n", d.Stage, d.Metric+unitOf(d.Metric), d.Base.Text("%.1f"), d.New.Text("%.1f"))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-5s %-24s %12s %12s %9s %20s %8s  %s\n", "stage", "metric", "base", "new", "change", "95% CI", "p", "judgement")
	for _, ch := range c.Changes {
		base, nw, delta, ci, p := ch.Cells()
		fmt.Fprintf(w, "%-5d %-24s %12s %12s %9s %20s %8s  %s\n", ch.Stage, ch.Metric+unitOf(ch.Metric), base, nw, delta, ci, p, ch.JudgementText("needed"))
	}
	c.Result.Write(w, c.LoadNote)
}

func unitOf(metric string) string {
	switch metric {
	case "ttft", "tpot", "e2e", "ttft_sched", "itl_p99":
		return " (ms)"
	case "speed", "output_token_throughput":
		return " (tok/s)"
	case "goodput":
		return " (req/s)"
	}
	return ""
}

// journalEntry is one line of the tuning journal.
type journalEntry struct {
	Time    time.Time        `json:"time"`
	Change  string           `json:"change"`
	Base    string           `json:"base"`
	New     string           `json:"new"`
	Verdict string           `json:"verdict"`
	Reasons []string         `json:"reasons"`
	Figures []verdict.Change `json:"figures"`
}

// AppendJournal appends one line for c to the file at path.
func (c *Comparison) AppendJournal(path, change string) error {
	figs := make([]verdict.Change, 0, len(c.Changes))
	for _, ch := range c.Changes {
		// JSON has no NaN: unset intervals and p-values become zero.
		for _, f := range []*float64{&ch.CILow, &ch.CIHigh, &ch.P, &ch.Delta} {
			if math.IsNaN(*f) || math.IsInf(*f, 0) {
				*f = 0
			}
		}
		figs = append(figs, ch)
	}
	line, err := json.Marshal(journalEntry{Time: time.Now().UTC(), Change: change, Base: c.Base, New: c.New, Verdict: c.Verdict, Reasons: c.Reasons, Figures: figs})
	if err != nil {
		return fmt.Errorf("bench: journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("bench: journal: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("bench: journal: %w", err)
	}
	return f.Close()
}

// Mismatch formats condition differences for an error.
func Mismatch(diffs []string) string {
	return "runs were measured under different conditions:\n  " + strings.Join(diffs, "\n  ") + "\n(--force compares them anyway)"
}

// Unjudged says why a record cannot be judged, nil when it can: a stage
// with no successful request, or with more failures than maxFailed of its
// requests, measured nothing worth a verdict. The reason names the
// failure that dominated and the server's words for it.
func Unjudged(r *Record, maxFailed float64) error {
	for _, s := range r.Stages {
		switch {
		case s.Requests == 0:
			return fmt.Errorf("stage %d measured no request", s.Stage)
		case s.OK == 0:
			return fmt.Errorf("stage %d has no successful request: %s", s.Stage, dominantError(s))
		case float64(s.Failed) > maxFailed*float64(s.Requests):
			return fmt.Errorf("stage %d: %d of %d requests failed (more than %.0f%%): %s", s.Stage, s.Failed, s.Requests, maxFailed*100, dominantError(s))
		}
	}
	return nil
}

// dominantError is the commonest failure class of s, with its count and
// first message.
func dominantError(s *Summary) string {
	best, n := "", 0
	for k, v := range s.Errors {
		if v > n || v == n && k < best {
			best, n = k, v
		}
	}
	if best == "" {
		return "no error recorded"
	}
	msg := s.ErrorSamples[best]
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return fmt.Sprintf("%d × %s: %s", n, best, msg)
}

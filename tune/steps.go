package tune

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/verdict"
)

// step is one knob change to try. Its settings are worked out when it
// is reached (what an earlier step kept changes them); a skip says why it
// is not tried. then, when set, adds the steps its outcome calls for.
type step struct {
	knob  string
	build func(ctx context.Context) (settings map[string]string, label, skip string)
	then  func(kept bool) []step
	skip  string
}

// Settings the knobs change.
const (
	settingCap          = "shaping.global.max_requests"
	settingQueueTimeout = "shaping.queue.timeout"
	settingMaxOutput    = "policy.max_output_tokens"
	settingMaxInput     = "policy.max_input_tokens"
	settingTrim         = "policy.trim"
)

// steps is the plan for the knobs asked for, cheapest first.
func (t *tuner) steps(base *bench.Record, rep *diagnose.Report) []step {
	var out []step
	for _, k := range t.cfg.Knobs {
		switch k {
		case KnobCap:
			out = append(out, t.capSteps(rep)...)
		case KnobQueue:
			out = append(out, step{knob: KnobQueue, build: t.queueStep})
		case KnobMaxOutput:
			out = append(out, tailStep(KnobMaxOutput, base, "output_tokens", "answers", map[string]string{}, settingMaxOutput))
		case KnobMaxInput:
			out = append(out, tailStep(KnobMaxInput, base, "prompt_tokens", "prompts", map[string]string{settingTrim: "truncate_middle"}, settingMaxInput))
		}
	}
	return out
}

// capSteps search around the knee diagnose proposes: the knee first;
// then a quarter below it if the knee paid (a tighter batch may pay
// more), or half above it if it did not (the knee may be too tight).
func (t *tuner) capSteps(rep *diagnose.Report) []step {
	if rep.CapAt <= 0 {
		return []step{{knob: KnobCap, skip: fmt.Sprintf("diagnose proposes no cap for a %s bottleneck (a cap protects a server bound by memory or compute)", rep.Bottleneck)}}
	}
	capAt := func(n int, why string) step {
		return step{knob: KnobCap, build: func(context.Context) (map[string]string, string, string) {
			return map[string]string{settingCap: strconv.Itoa(n)}, fmt.Sprintf("cap the gateway at %d requests in flight (%s)", n, why), ""
		}}
	}
	knee := capAt(rep.CapAt, "the knee diagnose found")
	knee.then = func(kept bool) []step {
		if kept {
			if n := rep.CapAt * 3 / 4; n >= 1 && n != rep.CapAt {
				return []step{capAt(n, "a quarter below the knee, as the knee paid")}
			}
			return nil
		}
		var next []step
		if d := t.queueBound(); d > 0 {
			// Over capacity a cap only moves the queue to the gateway;
			// with a deadline the requests that would miss the SLO are
			// refused at once and the rest get through in time.
			withDeadline := capAt(rep.CapAt, fmt.Sprintf("the knee again, now with the queue's wait bounded at %v, the TTFT SLO", d))
			build := withDeadline.build
			withDeadline.build = func(ctx context.Context) (map[string]string, string, string) {
				s, label, skip := build(ctx)
				s[settingQueueTimeout] = d.String()
				return s, label, skip
			}
			next = append(next, withDeadline)
		}
		return append(next, capAt(rep.CapAt*3/2, "half above the knee, as the knee did not pay"))
	}
	return []step{knee}
}

// queueBound is the queue wait the SLOs allow: the TTFT SLO, else the
// end-to-end one; 0 when neither is set.
func (t *tuner) queueBound() time.Duration {
	var bound float64
	for _, s := range t.cfg.Options.Objective.SLOs {
		switch s.Metric {
		case "ttft", "ttft_sched":
			bound = s.MaxMs
		case "e2e":
			if bound == 0 {
				bound = s.MaxMs
			}
		}
	}
	return time.Duration(bound * 1e6).Round(time.Millisecond)
}

// queueStep bounds the queue's wait by the TTFT (or end-to-end) SLO: a
// request that has waited that long misses it anyway, and answering it
// at once frees the queue for the ones that can still make it. It needs
// a cap: without one nothing waits in the gateway.
func (t *tuner) queueStep(ctx context.Context) (map[string]string, string, string) {
	cur, err := t.adm.current(ctx)
	if err != nil {
		return nil, "", "cannot read the gateway's configuration: " + err.Error()
	}
	if cur.Settings[settingCap] == "" {
		return nil, "", "no concurrency cap is in force, so nothing waits in the gateway's queue"
	}
	d := t.queueBound()
	if d == 0 {
		return nil, "", "no TTFT or end-to-end SLO to bound the wait by"
	}
	if cur.Settings[settingQueueTimeout] == d.String() {
		return nil, "", "the queue's wait is already bounded at the SLO"
	}
	return map[string]string{settingQueueTimeout: d.String()}, fmt.Sprintf("bound the queue's wait at %v (the SLO: a request that waited longer misses it anyway; it is refused at once, which counts as a failure)", d), ""
}

// tailStep caps a token count at its p90 when its tail is long (p99 over
// 1.5 × p90): the long few hold the batch, the rest are not cut.
func tailStep(knob string, base *bench.Record, metric, what string, extra map[string]string, setting string) step {
	m := base.Stages[0].Metrics[metric]
	switch {
	case m == nil || m.P90 == nil || m.P99 == nil:
		return step{knob: knob, skip: fmt.Sprintf("the baseline has too few %s to see their lengths' tail", what)}
	case *m.P99 <= 1.5**m.P90:
		return step{knob: knob, skip: fmt.Sprintf("%s are of even length (p90 %.0f, p99 %.0f tokens): a cap would cut many and spare little", what, *m.P90, *m.P99)}
	}
	n := int(math.Ceil(*m.P90))
	return step{knob: knob, build: func(context.Context) (map[string]string, string, string) {
		s := maps.Clone(extra)
		s[setting] = strconv.Itoa(n)
		return s, fmt.Sprintf("cap %s at %d tokens, their p90 (p99 %.0f)", what, n, *m.P99), ""
	}}
}

// try turns one knob, re-measures, and keeps the change only when the
// verdict says KEEP with goodput (open loop) or attainment (closed)
// risen beyond doubt, and says so again on a second measurement.
func (t *tuner) try(ctx context.Context, s step) (bool, error) {
	settings, label, skip := s.build(ctx)
	if skip != "" {
		fmt.Fprintf(t.out, "\n== %s: skipped: %s\n", s.knob, skip)
		t.journal(Entry{Event: "skip", Knob: s.knob, Note: skip})
		return false, nil
	}
	t.stepN++
	n := t.stepN
	fmt.Fprintf(t.out, "\n== step %d, %s: %s\n", n, s.knob, label)
	before, err := t.adm.current(ctx)
	if err != nil {
		return false, err
	}
	v, err := t.adm.set(ctx, settings, fmt.Sprintf("tune step %d: %s", n, s.knob))
	if err != nil {
		// A setting the gateway refuses changes nothing.
		fmt.Fprintf(t.out, "  the gateway refused it: %v\n", err)
		t.journal(Entry{Event: "skip", Step: n, Knob: s.knob, Settings: settings, Note: "refused: " + err.Error()})
		return false, nil
	}
	diff := bench.SettingsDiff(before.Settings, v.Settings)
	fmt.Fprintf(t.out, "  changed: %v (version %d)\n", diff, v.Version)
	rec, file, _, err := t.measure(ctx, fmt.Sprintf("step%d-%s", n, s.knob), false)
	if err != nil {
		return false, err
	}
	ok, e := t.judge(rec, file, n, s.knob)
	e.Event, e.Settings, e.Diff, e.Version, e.Hash = "try", settings, diff, v.Version, v.Hash
	t.journal(e)
	if ok {
		fmt.Fprintln(t.out, "  re-measuring once more before keeping it")
		again, file2, _, err := t.measure(ctx, fmt.Sprintf("step%d-%s-again", n, s.knob), false)
		if err != nil {
			return false, err
		}
		ok2, e2 := t.judge(again, file2, n, s.knob)
		e2.Event, e2.Version, e2.Hash = "confirm", v.Version, v.Hash
		t.journal(e2)
		if ok2 {
			t.best, t.bestFile, t.bestHash = again, file2, v.Hash
			t.res.Final = v
			fmt.Fprintf(t.out, "  KEEP: it held twice; later steps are judged against it\n")
			t.res.Steps = append(t.res.Steps, Entry{Time: time.Now().UTC(), Step: n, Event: "keep", Knob: s.knob, Settings: settings, Diff: diff,
				Record: file2, Verdict: e2.Verdict, Reasons: e2.Reasons, Decided: e2.Decided, Goodput: e2.Goodput, Attainment: e2.Attainment, Version: v.Version, Hash: v.Hash})
			t.journal(t.res.Steps[len(t.res.Steps)-1])
			return true, nil
		}
		fmt.Fprintln(t.out, "  it did not hold on the second measurement: noise, not a gain")
		e = e2
	}
	back, err := t.adm.restore(ctx, t.bestHash)
	if err != nil {
		return false, err
	}
	t.res.Final = back
	fmt.Fprintf(t.out, "  rolled back to %s (version %d)\n", back.Hash, back.Version)
	t.res.Steps = append(t.res.Steps, Entry{Time: time.Now().UTC(), Step: n, Event: "roll back", Knob: s.knob, Settings: settings, Diff: diff,
		Record: e.Record, Verdict: e.Verdict, Reasons: e.Reasons, Hint: e.Hint, Decided: e.Decided, Goodput: e.Goodput, Attainment: e.Attainment, Version: back.Version, Hash: back.Hash})
	t.journal(t.res.Steps[len(t.res.Steps)-1])
	return false, nil
}

// judge compares a measurement with the best so far at the objective.
func (t *tuner) judge(rec *bench.Record, file string, n int, knob string) (bool, Entry) {
	g, a := figures(rec, t.cfg.Options.Objective)
	e := Entry{Time: time.Now().UTC(), Step: n, Knob: knob, Record: file, Against: t.bestFile, Goodput: g, Attainment: a}
	fmt.Fprintf(t.out, "%s\n%s\n", headline(rec, g, a), answersLine(rec, t.res.Size))
	if err := bench.Unjudged(rec, maxFailed); err != nil {
		e.Verdict, e.Reasons = verdict.RollBack, []string{"not judged: " + err.Error()}
		e.Decided = "not judged: more than half of its requests failed, or none was answered"
		fmt.Fprintf(t.out, "  verdict: ROLL BACK\n    - not judged: %s\n", err)
		return false, e
	}
	c := bench.Compare(t.best, rec, t.cfg.Options)
	e.Verdict, e.Reasons, e.Hint = c.Verdict, c.Reasons, c.Hint
	var gains []string
	for _, ch := range c.Changes {
		if (ch.Metric == "goodput" && ch.Judgement != verdict.Info || ch.Metric == "slo_attainment") && ch.CILow > 0 {
			gains = append(gains, fmt.Sprintf("%s %s", ch.Metric, verdict.FormatDelta(ch)))
			e.Reasons = append(e.Reasons, fmt.Sprintf("%s rose beyond doubt: %s", ch.Metric, verdict.FormatDelta(ch)))
		}
	}
	e.Decided = decidedBy(c.Verdict, c.Changes, gains)
	fmt.Fprintf(t.out, "  verdict: %s\n", c.Verdict)
	for _, r := range c.Reasons {
		fmt.Fprintf(t.out, "    - %s\n", r)
	}
	switch {
	case c.Verdict == verdict.Keep && len(gains) == 0:
		e.Reasons = append(e.Reasons, "no gain: neither goodput nor attainment rose beyond doubt, so the change is not worth keeping")
		fmt.Fprintln(t.out, "  no gain beyond doubt: not worth keeping")
	case c.Verdict == verdict.Keep:
		fmt.Fprintf(t.out, "  rose beyond doubt: %s\n", strings.Join(gains, "; "))
	}
	return c.Verdict == verdict.Keep && len(gains) > 0, e
}

// decidedBy names, in one line, the figures that decided a step: the
// ones that regressed, the ones not settled, or the gain and the
// quality that held.
func decidedBy(v string, changes []verdict.Change, gains []string) string {
	var names []string
	pick := func(j string) string {
		names = names[:0]
		for _, ch := range changes {
			if ch.Judgement == j && !slices.Contains(names, ch.Metric) {
				names = append(names, ch.Metric)
			}
		}
		return strings.Join(names, ", ")
	}
	switch v {
	case verdict.RollBack:
		if r := pick(verdict.Regressed); r != "" {
			return "regressed: " + r
		}
		return "no gain"
	case verdict.Inconclusive:
		return "not settled: " + pick(verdict.Unsure)
	}
	if len(gains) == 0 {
		return "no gain beyond doubt"
	}
	var held []string
	for _, ch := range changes {
		if ch.Quality && ch.Judgement == verdict.Holds && ch.Count != nil {
			held = append(held, strings.TrimSuffix(ch.Metric, "_rate"))
		}
	}
	out := "rose: " + strings.Join(gains, "; ")
	if len(held) > 0 {
		out += "; quality held: " + strings.Join(held, ", ")
	}
	return out
}

// plan prints what a walk would do, measuring and changing nothing.
func (t *tuner) plan() {
	fmt.Fprintf(t.out, "dry run: nothing is measured and the gateway is not changed\n")
	fmt.Fprintf(t.out, "objective: %s\nload: %s\n", t.res.Objective, loadText(t.cfg.Bench.Load))
	fmt.Fprintf(t.out, "the gateway runs configuration version %d (%s)\n\n", t.res.Start.Version, t.res.Start.Hash)
	fmt.Fprintln(t.out, "1. measure a baseline at that load, reading the gateway's and backends' metrics")
	fmt.Fprintln(t.out, "2. diagnose it; stop if there is no bottleneck")
	i := 3
	for _, k := range t.cfg.Knobs {
		var what string
		switch k {
		case KnobCap:
			what = "the concurrency cap (" + settingCap + "): at the knee diagnose finds, then a quarter below it if that paid or half above if not"
		case KnobQueue:
			what = "the queue's deadline (" + settingQueueTimeout + "): the TTFT SLO, when a cap is in force"
		case KnobMaxOutput:
			what = "the output cap (" + settingMaxOutput + "): the answers' p90, when their tail is long"
		case KnobMaxInput:
			what = "the input cap (" + settingMaxInput + ", trim truncate_middle): the prompts' p90, when their tail is long"
		}
		fmt.Fprintf(t.out, "%d. %s; each change re-measured at the same load, kept only when the verdict is KEEP with goodput or attainment up, twice; else rolled back\n", i, what)
		i++
	}
	fmt.Fprintf(t.out, "%d. name the backend's own knobs to shadow-test next\n", i)
	fmt.Fprintf(t.out, "\nsize: %s\nrule: %s\n", t.res.Size, t.res.Rule)
	fmt.Fprintf(t.out, "bounds: --budget %v, at most %d steps; about %v a measurement\n", t.cfg.Budget, t.cfg.MaxSteps, t.perRun())
	t.res.Stopped = "dry run"
}

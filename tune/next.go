package tune

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/infergate/infergate/diagnose"
)

// Suggestion is a knob only the backend owns: what to change, how to
// judge it on live traffic before it ships, and when not to.
type Suggestion struct {
	Knob   string `json:"knob"`
	Action string `json:"action"`
	// Shadow is the commands of the shadow test: mirror live traffic to a
	// candidate server with the change, then judge the pairs at the SLOs.
	Shadow []string `json:"shadow"`
	Not    string   `json:"not_if,omitempty"`
}

// gatewayKnobs are diagnose's knobs the walk turns itself.
var gatewayKnobs = map[string]bool{"concurrency cap": true, "context and output caps": true, "none": true}

// suggest names the backend's knobs, in diagnose's order (the source's
// order of cost), with the shadow test of each.
func (t *tuner) suggest(rep *diagnose.Report) {
	slo := make([]string, 0, len(t.cfg.Options.Objective.SLOs))
	for _, s := range t.cfg.Options.Objective.SLOs {
		slo = append(slo, fmt.Sprintf("%s=%s", s.Metric, fmtMs(s.MaxMs)))
	}
	for _, k := range rep.Knobs {
		if gatewayKnobs[k.Knob] {
			continue
		}
		t.res.Next = append(t.res.Next, Suggestion{Knob: k.Knob, Action: k.Action, Not: k.Skip, Shadow: []string{
			"start a candidate server with the change beside the current one (CANDIDATE_URL)",
			"infergate serve --upstream CURRENT_URL --mirror CANDIDATE_URL --mirror-record pairs.jsonl   # or mirror: rules in the gateway's config",
			fmt.Sprintf("infergate ab report pairs.jsonl --slo %s --slo-percentile p%g   # KEEP or ROLL BACK on speed and quality", strings.Join(slo, ","), t.cfg.Options.Objective.Pct()*100),
		}})
	}
	if len(t.res.Next) == 0 {
		return
	}
	fmt.Fprintf(t.out, "\n== next: knobs only the backend owns, to shadow-test in this order\n")
	for i, s := range t.res.Next {
		fmt.Fprintf(t.out, "%d. %s: %s\n", i+1, s.Knob, s.Action)
		if s.Not != "" {
			fmt.Fprintf(t.out, "   not if: %s\n", s.Not)
		}
	}
	fmt.Fprintf(t.out, "   shadow test each before it ships:\n")
	for _, c := range t.res.Next[0].Shadow {
		fmt.Fprintf(t.out, "     %s\n", c)
	}
}

// journal appends one line to the journal file, when there is one. A
// journal that cannot be written is reported once and the walk goes on:
// the result still carries every step.
func (t *tuner) journal(e Entry) {
	if t.cfg.Journal == "" || t.journalErr != nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = nowUTC()
	}
	b, err := json.Marshal(e)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(t.cfg.Journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
			_, err = f.Write(append(b, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		t.journalErr = err
		fmt.Fprintf(t.out, "warning: the journal %s cannot be written: %v\n", t.cfg.Journal, err)
	}
}

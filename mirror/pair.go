package mirror

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

// Pair is one line of the pairs file and one entry of /admin/pairs
// (declared once, with the admin API's bodies).
type Pair = adminapi.Pair

// Arm is one side of a pair.
type Arm = adminapi.Arm

// Answer is one arm's answer while its pair is made: the record's fields,
// which the gateway fills, and the answer's text, which the recorder
// judges.
type Answer struct {
	Arm
	// Text is the answer's text (a stream's, as openai.Tally collects
	// it); Body, instead, a whole plain response body, whose text the
	// recorder reads.
	Text, Body []byte
	// ToolCalls: the answer called tools.
	ToolCalls bool
	// ByPolicy: a gateway's output cap set the request's output limit
	// (the judge counts a cut at it as the policy's, LengthByPolicy).
	ByPolicy bool
}

// Flight is one mirrored (or split) request whose answers are being
// collected. Each arm calls Done once its Answer is filled; the last one
// hands the flight to the recorder, off both request paths.
type Flight struct {
	meta               Pair // the record's request fields
	Primary, Candidate Answer
	// Noise is the A/A arm's answer, nil without one (AddNoise).
	Noise *Answer
	// Body is the primary's request body, owned by the flight: parsed on
	// the recorder's goroutine for what it asked and its prompt.
	Body []byte
	// Ctx bounds the copies (nil for a canary's record); Stop ends it.
	Ctx  context.Context
	Stop context.CancelFunc
	// Rule is the rule that took the request (nil for a split).
	Rule *LiveRule

	pending atomic.Int32
	rec     *Recorder
}

// Meta names a flight's request.
type Meta struct {
	ID, Model, Path, Tenant string
	Stream                  bool
}

// Start begins a flight of a mirrored request taken by rule: two arms,
// the primary and the candidate.
func (r *Recorder) Start(rule *LiveRule, m Meta) *Flight {
	f := &Flight{meta: Pair{Time: time.Now().UTC(), ID: m.ID, Rule: rule.name, Model: m.Model, Path: m.Path, Tenant: m.Tenant, Stream: m.Stream,
		Overrides: rule.applied}, Rule: rule, rec: r}
	f.pending.Store(2)
	return f
}

// StartSplit begins the record of a canary's request, served by one arm
// (candidate or not), with the model the candidate was sent.
func (r *Recorder) StartSplit(candidate bool, model string, m Meta) *Flight {
	f := &Flight{meta: Pair{Time: time.Now().UTC(), ID: m.ID, Rule: "split", Model: m.Model, Path: m.Path, Tenant: m.Tenant, Stream: m.Stream, Split: "primary"}, rec: r}
	if candidate {
		f.meta.Split = "candidate"
		if model != "" {
			f.meta.Overrides = map[string]any{"model": model}
		}
	}
	f.pending.Store(1)
	return f
}

// IsSplit reports whether the flight is a canary's record (one arm).
func (f *Flight) IsSplit() bool { return f.meta.Split != "" }

// Served is the answer of the arm that served the client: the candidate
// of a canary's candidate record, else the primary.
func (f *Flight) Served() *Answer {
	if f.meta.Split == "candidate" {
		return &f.Candidate
	}
	return &f.Primary
}

// AddNoise adds the A/A arm; call it before the arms can be done.
func (f *Flight) AddNoise() *Answer {
	f.Noise = &Answer{}
	f.pending.Add(1)
	return f.Noise
}

// Done is called by each arm once its answer is filled; the last one
// records the flight.
func (f *Flight) Done() {
	if f.pending.Add(-1) == 0 {
		if f.Stop != nil {
			f.Stop()
		}
		f.rec.offer(f)
	}
}

// Meta returns the flight's request's names.
func (f *Flight) Meta() Meta {
	return Meta{ID: f.meta.ID, Model: f.meta.Model, Path: f.meta.Path, Tenant: f.meta.Tenant, Stream: f.meta.Stream}
}

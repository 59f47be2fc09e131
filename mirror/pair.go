package mirror

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/quality"
)

// Pair is one line of the pairs file and one entry of /admin/pairs: one
// mirrored request's answers, each timed from the moment its request was
// sent to its backend, so the pair compares the backends and not the
// gateway's queue.
type Pair struct {
	Time   time.Time `json:"time"`
	ID     string    `json:"id"`
	Rule   string    `json:"rule"`
	Model  string    `json:"model"`
	Path   string    `json:"path"`
	Tenant string    `json:"tenant,omitempty"`
	Stream bool      `json:"stream"`
	// Split is set on a canary's record ("primary" or "candidate"): one
	// request served by one arm, whose answer is in that arm's field.
	Split string `json:"split,omitempty"`
	// Overrides are what the copy was sent with instead.
	Overrides map[string]any `json:"overrides,omitempty"`
	// Prompt is the request's last user message (mirror.record.output
	// full, up to max_output_bytes), for a judge model to grade the
	// answers against.
	Prompt string `json:"prompt,omitempty"`
	// JSONAsked is set when the request asked for JSON (response_format),
	// SchemaGiven when it gave a JSON schema the answers are checked
	// against.
	JSONAsked   bool `json:"json_asked,omitempty"`
	SchemaGiven bool `json:"schema_given,omitempty"`
	Primary     Arm  `json:"primary"`
	Candidate   Arm  `json:"candidate"`
	// Noise is the A/A arm: the primary's request once more to its own
	// pool (mirror rule aa), nil without one.
	Noise *Arm `json:"aa,omitempty"`
	// LengthRatio is the candidate's output length over the primary's
	// (bytes), Similarity the two outputs' word overlap: the Jaccard index
	// of their sets of words and word pairs, 1 for the same text.
	LengthRatio float64 `json:"length_ratio"`
	Similarity  float64 `json:"similarity"`
}

// Arm is one side of a pair: the one shape of an answer that the
// recorder writes, /admin/pairs serves and the A/B report reads.
type Arm struct {
	Backend string `json:"backend,omitempty"`
	Status  int    `json:"status"`
	Error   string `json:"error,omitempty"`
	// TTFTms is the first content event from the request's send (streams
	// only); E2Ems the last content (or the whole body) from the send;
	// TPOTms the mean gap between output tokens (openai.Tally's rule).
	TTFTms float64 `json:"ttft_ms,omitempty"`
	E2Ems  float64 `json:"e2e_ms,omitempty"`
	TPOTms float64 `json:"tpot_ms,omitempty"`
	// TTFOms is a reasoning model's first output token (not thinking)
	// from the send, streams only; ReasoningTokens its usage's count of
	// thinking tokens, of OutputTokens.
	TTFOms          float64 `json:"ttfo_ms,omitempty"`
	ReasoningTokens int     `json:"reasoning_tokens,omitempty"`
	// OutputTokens is the usage's count, else the content events.
	OutputTokens int `json:"output_tokens,omitempty"`
	PromptTokens int `json:"prompt_tokens,omitempty"`
	// CachedTokens is the prompt tokens the backend reported it found
	// cached (usage's cached_tokens), nil when it did not say: the arms'
	// cached shares are a condition of the comparison (mirror/ab's
	// Report.CacheConditions).
	CachedTokens *int   `json:"cached_tokens,omitempty"`
	Finish       string `json:"finish_reason,omitempty"`
	// Output is the answer's text (mirror.record.output: full, up to
	// max_output_bytes); OutputSHA256 and OutputBytes are of all of it.
	Output       string `json:"output,omitempty"`
	OutputSHA256 string `json:"output_sha256,omitempty"`
	OutputBytes  int    `json:"output_bytes"`
	// The quality signals (package quality), of a successful answer.
	quality.Signals
}

// OK reports whether the arm answered 2xx without error.
func (a *Arm) OK() bool { return a.Error == "" && a.Status >= 200 && a.Status < 300 }

// speed is the arm's output speed after its first token, tokens/s.
func (a *Arm) speed() float64 {
	if a.TPOTms <= 0 {
		return 0
	}
	return 1000 / a.TPOTms
}

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

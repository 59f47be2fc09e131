package adminapi

import (
	"time"

	"github.com/infergate/infergate/quality"
)

// Pairs is what GET /admin/pairs answers: the mirror's recent pairs,
// oldest first, and its counts.
type Pairs struct {
	Recorded int64 `json:"recorded"`
	// Lost counts pairs the recorder was too far behind to take;
	// FileLost lines the pairs file could not take (a write error).
	Lost     int64 `json:"lost,omitempty"`
	FileLost int64 `json:"file_lost,omitempty"`
	// Dropped counts the copies not made, by "RULE REASON".
	Dropped map[string]int64 `json:"dropped,omitempty"`
	Pairs   []Pair           `json:"pairs"`
}

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

package rank

import (
	"time"

	"github.com/infergate/infergate/bench"
)

// schema names the record format; a reader refuses any other.
const schema = "infergate.rank/v1"

// Record is one ranking run: the workload, each endpoint's rounds and
// requests, its figures, and the order.
type Record struct {
	Schema string    `json:"schema"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Tool   string    `json:"tool_version"`
	Host   string    `json:"host"`
	// Workload is what each endpoint was sent, defaults filled in.
	Workload Workload `json:"workload"`
	// Bound is the most requests the run could send, in words, as it
	// was stated before it started.
	Bound string `json:"bound"`
	// Plan is what the run's size could tell apart, key by key, as it
	// was stated before it started.
	Plan        *Plan     `json:"plan,omitempty"`
	Endpoints   []*Result `json:"endpoints"`
	Ranking     []Place   `json:"ranking"`
	Interrupted bool      `json:"interrupted,omitempty"`
	// Warnings are what a reader of the figures should know: answers of
	// unequal length, usage not returned.
	Warnings []string          `json:"warnings,omitempty"`
	Formulas map[string]string `json:"formulas"`
}

// Result is one endpoint's part of a run.
type Result struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	Model string `json:"model"`
	Price Price  `json:"price"`
	// Headers are the names (never the values) of the extra headers
	// sent; Keyed says a key was sent, and in which header.
	Headers   []string       `json:"headers,omitempty"`
	Keyed     string         `json:"keyed,omitempty"`
	Overrides map[string]any `json:"overrides,omitempty"`
	Rounds    []Round        `json:"rounds"`
	// Requests is every measured request and probe, in the order they
	// finished.
	Requests []Request `json:"requests"`
	Figures  Figures   `json:"figures"`
	// Stopped says why the endpoint's later rounds were not run (every
	// first request failed alike: a wrong key, model or URL).
	Stopped string `json:"stopped,omitempty"`
}

// Round is one endpoint's round: its probe, then its bench.
type Round struct {
	Round int       `json:"round"`
	Start time.Time `json:"start"`
	// Position is the endpoint's place in the round's order (the order
	// turns by one each round, so none always goes first).
	Position int   `json:"position"`
	Probe    Probe `json:"probe"`
	Requests int   `json:"requests"`
	OK       int   `json:"ok"`
	// TTFTP50 (ms), SpeedP50 (tokens/s a request), Throughput (output
	// tokens/s at the concurrency) and RequestRate (requests/s) of the
	// round's bench; CostPerRequest its mean.
	TTFTP50        float64 `json:"ttft_p50_ms"`
	SpeedP50       float64 `json:"speed_p50"`
	Throughput     float64 `json:"output_tokens_per_s"`
	RequestRate    float64 `json:"requests_per_s"`
	CostPerRequest float64 `json:"cost_per_request"`
	// HeldS is how long the round held its requests back for Retry-After.
	HeldS float64 `json:"held_s,omitempty"`
}

// Probe is the medians of a round's one-at-a-time requests, each on a
// new connection, in ms.
type Probe struct {
	N          int     `json:"n"`
	OK         int     `json:"ok"`
	DNS        float64 `json:"dns_ms"`
	Connect    float64 `json:"connect_ms"`
	TLS        float64 `json:"tls_ms"`
	Wait       float64 `json:"wait_ms"`
	FirstToken float64 `json:"first_token_ms"`
	TTFT       float64 `json:"ttft_ms"`
}

// Request is one request's outcome.
type Request struct {
	Round int  `json:"round"`
	Probe bool `json:"probe,omitempty"`
	OK    bool `json:"ok"`
	// Class is a failure's kind (Classes), empty for a success.
	Class  string `json:"class,omitempty"`
	Status int    `json:"status,omitempty"`
	// TTFT and E2E in ms, TPOT in ms a token, Speed in tokens/s.
	TTFT  float64 `json:"ttft_ms,omitempty"`
	TPOT  float64 `json:"tpot_ms,omitempty"`
	E2E   float64 `json:"e2e_ms,omitempty"`
	Speed float64 `json:"speed,omitempty"`
	// The tokens the cost is of: the usage the server returned (prompt
	// tokens, cached among them, and output tokens; cached -1 when it did
	// not say); or, when an answer came without usage (Counted set),
	// cl100k_base's count of the prompt asked for and of the answer, no
	// chat template counted. -1 for a probe.
	PromptTokens int  `json:"prompt_tokens"`
	CachedTokens int  `json:"cached_tokens"`
	OutputTokens int  `json:"output_tokens"`
	Counted      bool `json:"counted,omitempty"`
	// Cost is what the endpoint's price makes of those tokens.
	Cost float64 `json:"cost"`
	// Met says the request met every SLO.
	Met         bool    `json:"met,omitempty"`
	RetryAfterS float64 `json:"retry_after_s,omitempty"`
}

// Failure classes.
const (
	ClassAuth      = "auth"          // 401, 403
	ClassRateLimit = "rate_limit"    // 429
	ClassServer    = "server_error"  // 5xx
	ClassTimeout   = "timeout"       // the request ran past workload.timeout
	ClassBroken    = "broken_stream" // reset, truncated, malformed or error event
	ClassConnect   = "connect"       // no connection
	ClassClient    = "client_error"  // another 4xx
	ClassOther     = "other"
)

// Classes lists the failure classes in the order reports show them.
var Classes = []string{ClassAuth, ClassRateLimit, ClassServer, ClassTimeout, ClassBroken, ClassConnect, ClassClient, ClassOther}

// classOf maps bench's error classes to ranking's.
func classOf(errClass string, status int) string {
	switch {
	case status == 401 || status == 403:
		return ClassAuth
	case status == 429:
		return ClassRateLimit
	case status >= 500:
		return ClassServer
	case status >= 400:
		return ClassClient
	}
	switch errClass {
	case bench.ErrTimeout:
		return ClassTimeout
	case bench.ErrReset, bench.ErrTruncated, bench.ErrMalformed, bench.ErrEvent, bench.ErrBadBody:
		return ClassBroken
	case bench.ErrConnect:
		return ClassConnect
	}
	return ClassOther
}

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/quality"
)

// Request is one prepared request of a workload.
type Request struct {
	Body []byte
	// InputTokens is the prompt's length in tokens when the workload knows
	// it (synthetic prompts: exact); MaxTokens the output asked for.
	InputTokens, MaxTokens int
	// At is the request's send time from the run's start (replay), or -1.
	At time.Duration
	// Ask is what the request asks of its answer's form (response_format):
	// the answer is judged against it.
	Ask quality.Ask
	// Header is a header this request alone sends (a session's key),
	// zero for none.
	Header [2]string
	// Class is the service_tier the body carries (a class mix's draw),
	// "" without a mix.
	Class string
}

// Workload makes the requests of a run. Request(i) is deterministic for
// a given workload and seed, and safe for concurrent use.
type Workload interface {
	Request(i int) Request
	// Len is the number of requests a replay holds; 0 for no limit.
	Len() int
}

// WorkloadSpec describes a workload. It is recorded with the run: two
// runs are comparable only when their specs agree.
type WorkloadSpec struct {
	// Endpoint is "chat" (/v1/chat/completions), "completions" or
	// "responses" (the Responses API, /v1/responses).
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	// InputTokens and OutputTokens are length distributions (see
	// parseLengths); defaults 256 and 128 for a synthetic workload.
	// OutputTokens "none" (or, for a dataset or a replay, "") leaves
	// max_tokens as the request has it.
	InputTokens  string `json:"input_tokens,omitempty"`
	OutputTokens string `json:"output_tokens,omitempty"`
	// SharedPrefix is the number of prompt tokens every request shares;
	// 0 makes each prompt unique from its first token.
	SharedPrefix int `json:"shared_prefix,omitempty"`
	// PrefixGroups splits requests among that many tenants, each with its
	// own system prompt of PrefixTokens tokens before the request's own
	// question of InputTokens: the workload prefix-aware routing is for.
	// Request i belongs to group i mod PrefixGroups.
	PrefixGroups int `json:"prefix_groups,omitempty"`
	PrefixTokens int `json:"prefix_tokens,omitempty"`
	// ForceOutputLength sends ignore_eos and min_tokens = max_tokens.
	ForceOutputLength bool `json:"force_output_length,omitempty"`
	// JSON asks for response_format json_object and checks the answers.
	JSON bool `json:"json,omitempty"`
	// Seed draws the prompts' text and lengths, a dataset's order and
	// the arrivals; 0 asks Open for a fresh one (Config.Cache). Two
	// seeds are two samples of one workload: runs with different seeds
	// compare.
	Seed uint64 `json:"seed"`
	// Salt starts the text of each fixed prompt (a dataset's, a request
	// log's bodies) in a run with a fresh seed, so that the server has
	// not seen them either; empty otherwise.
	Salt string `json:"salt,omitempty"`
	// Dataset and Replay are file paths; their SHA-256 is recorded.
	Dataset       string  `json:"dataset,omitempty"`
	DatasetSHA256 string  `json:"dataset_sha256,omitempty"`
	Replay        string  `json:"replay,omitempty"`
	ReplaySHA256  string  `json:"replay_sha256,omitempty"`
	Speedup       float64 `json:"speedup,omitempty"`
	// Sessions makes the workload multi-turn conversations (load mode
	// sessions): Turns user turns each (synthetic: InputTokens and
	// OutputTokens per turn; a ShareGPT dataset: its human turns, all of
	// them when Turns is 0).
	Sessions bool `json:"sessions,omitempty"`
	Turns    int  `json:"turns,omitempty"`
	// SessionKey is how a session names itself to a router, the same key
	// on every turn of a session and fresh keys each run (sessionkey.go):
	// "" (none), "prompt_cache_key" (the body's field) or "header:NAME"
	// (a header, e.g. header:x-session-id).
	SessionKey string `json:"session_key,omitempty"`
	// Tools is the number of function definitions every request carries
	// in its tools array, the same for every request of the seed (an
	// agent's tool list, which a server renders into the prompt's start);
	// 0 sends none. Chat and Responses synthetic workloads and sessions.
	Tools int `json:"tools,omitempty"`
	// Trace is a public trace replayed on its own timestamps (trace.go):
	// TraceFormat mooncake, azure or burstgpt (sniffed when empty),
	// TraceWindow the FROM:TO of it sent; TraceSkipped counts the rows its
	// format's rule left out (BurstGPT's failed requests). Speedup divides
	// its times as a replay's.
	Trace        string `json:"trace,omitempty"`
	TraceFormat  string `json:"trace_format,omitempty"`
	TraceWindow  string `json:"trace_window,omitempty"`
	TraceSHA256  string `json:"trace_sha256,omitempty"`
	TraceSkipped int    `json:"trace_skipped,omitempty"`
	// ClassMix sends each request with OpenAI's service_tier drawn from
	// these shares by the seed (class.go), e.g.
	// "priority=0.2,default=0.5,flex=0.3", recorded in its canonical,
	// normalised form; "" sends none.
	ClassMix string `json:"class_mix,omitempty"`
}

// Replays reports whether the workload sends on its own times (a request
// log or a trace): the runner's replay mode.
func (s *WorkloadSpec) Replays() bool { return s.Replay != "" || s.Trace != "" }

// Path is the URL path of the spec's endpoint.
func (s *WorkloadSpec) Path() string {
	switch s.Endpoint {
	case "completions":
		return "/v1/completions"
	case "responses":
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

// validEndpoint reports whether e names an endpoint bench sends.
func validEndpoint(e string) bool { return e == "chat" || e == "completions" || e == "responses" }

// messagesKey opens the array of a request's messages: chat's messages,
// the Responses API's input (whose message items are written alike).
func (s *WorkloadSpec) messagesKey() string {
	if s.Endpoint == "responses" {
		return `,"input":[`
	}
	return `,"messages":[`
}

// newWorkload builds the workload of s, hashing any file it reads into s,
// with its class mix when it has one.
func newWorkload(s *WorkloadSpec, tok *tokens.Tokenizer) (Workload, error) {
	mix, err := parseClassMix(s.ClassMix)
	if err != nil {
		return nil, fmt.Errorf("bench: class mix: %w", err)
	}
	w, err := newBaseWorkload(s, tok)
	if err != nil || mix.none() {
		return w, err
	}
	s.ClassMix = mix.String()
	return withClassMix(w, mix, s.Seed), nil
}

// newBaseWorkload builds the workload of s without its class mix.
func newBaseWorkload(s *WorkloadSpec, tok *tokens.Tokenizer) (Workload, error) {
	if !validEndpoint(s.Endpoint) {
		return nil, fmt.Errorf("bench: endpoint %q: want chat, completions or responses", s.Endpoint)
	}
	out, err := parseLengths(s.OutputTokens)
	if err != nil {
		return nil, fmt.Errorf("bench: output tokens: %w", err)
	}
	if s.Sessions {
		if s.Replay != "" || s.Trace != "" {
			return nil, errors.New("bench: --sessions takes synthetic turns or a --dataset of conversations, not --replay or --trace")
		}
		in, err := parseLengths(s.InputTokens)
		if err != nil {
			return nil, fmt.Errorf("bench: input tokens: %w", err)
		}
		return newSessions(s, in, out, tok)
	}
	sources := 0
	if s.Tools > 0 && (s.Dataset != "" || s.Replays()) {
		return nil, errors.New("bench: --tools goes with synthetic prompts or --sessions, not --dataset, --replay or --trace (their requests carry their own)")
	}
	for _, f := range []string{s.Dataset, s.Replay, s.Trace} {
		if f != "" {
			sources++
		}
	}
	switch {
	case sources > 1:
		return nil, errors.New("bench: --dataset, --replay and --trace are exclusive")
	case sources == 1:
		load := loadDataset
		switch {
		case s.Replay != "":
			load = loadReplay
		case s.Trace != "":
			load = loadTrace
		}
		w, err := load(s, out, tok)
		if fs, ok := w.(*fixedSet); ok {
			for i := range fs.reqs {
				fs.reqs[i].Ask = quality.AskOf(fs.reqs[i].Body) // once, not per send
			}
		}
		return w, err
	}
	in, err := parseLengths(s.InputTokens)
	if err != nil {
		return nil, fmt.Errorf("bench: input tokens: %w", err)
	}
	if in.zero() {
		return nil, errors.New("bench: a synthetic workload needs --input-tokens")
	}
	if err := s.checkPrefixGroups(); err != nil {
		return nil, err
	}
	model, _ := json.Marshal(s.Model)
	return newSynthetic(s, in, out, tok.Words(), model), nil
}

// checkPrefixGroups checks the system prompts and tools a synthetic or
// session workload adds.
func (s *WorkloadSpec) checkPrefixGroups() error {
	switch {
	case s.PrefixGroups < 0 || s.PrefixTokens < 0:
		return errors.New("bench: --prefix-groups and --prefix-tokens must not be negative")
	case (s.PrefixGroups > 0) != (s.PrefixTokens > 0):
		return errors.New("bench: --prefix-groups and --prefix-tokens go together")
	case s.PrefixGroups > 0 && s.SharedPrefix > 0:
		return errors.New("bench: --shared-prefix and --prefix-groups are exclusive")
	case s.PrefixGroups > 0 && s.Endpoint == "completions":
		return errors.New("bench: --prefix-groups puts each group's prefix in a system message: it needs the chat or responses endpoint")
	case s.Tools < 0 || s.Tools > maxTools:
		return fmt.Errorf("bench: --tools %d: want 0 to %d", s.Tools, maxTools)
	case s.Tools > 0 && s.Endpoint == "completions":
		return errors.New("bench: --tools sends a tools array: it needs the chat or responses endpoint")
	}
	return nil
}

// lengths is a distribution of token counts: fixed "512", uniform
// "uniform:256-1024", or normal "normal:512,64" (clamped to at least 1).
type lengths struct {
	kind string
	a, b float64
}

// parseLengths reads a Lengths; "" is none.
func parseLengths(s string) (lengths, error) {
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		kind, arg = "fixed", s
	}
	if s == "" || s == "none" {
		return lengths{}, nil
	}
	var a, b float64
	var err error
	switch kind {
	case "fixed":
		a, err = strconv.ParseFloat(arg, 64)
		b = a
	case "uniform":
		lo, hi, _ := strings.Cut(arg, "-")
		if a, err = strconv.ParseFloat(lo, 64); err == nil {
			b, err = strconv.ParseFloat(hi, 64)
		}
	case "normal":
		m, sd, _ := strings.Cut(arg, ",")
		if a, err = strconv.ParseFloat(m, 64); err == nil {
			b, err = strconv.ParseFloat(sd, 64)
		}
	default:
		return lengths{}, fmt.Errorf("%q: want N, uniform:MIN-MAX or normal:MEAN,SD", s)
	}
	if err != nil || a < 1 || b < 0 || (kind == "uniform" && b < a) || a > 1e7 || b > 1e7 {
		return lengths{}, fmt.Errorf("%q: want N, uniform:MIN-MAX or normal:MEAN,SD with positive token counts", s)
	}
	return lengths{kind: kind, a: a, b: b}, nil
}

func (l lengths) zero() bool { return l.kind == "" }

// Sample draws a length.
func (l lengths) Sample(rng *rand.Rand) int {
	switch l.kind {
	case "uniform":
		return int(l.a) + rng.IntN(int(l.b-l.a)+1)
	case "normal":
		return max(1, int(math.Round(l.a+rng.NormFloat64()*l.b)))
	case "fixed":
		return int(l.a)
	}
	return 0
}

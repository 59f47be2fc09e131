package bench

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
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
	// ParseLengths); defaults 256 and 128 for a synthetic workload.
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

// NewWorkload builds the workload of s, hashing any file it reads into s.
func NewWorkload(s *WorkloadSpec, tok *tokens.Tokenizer) (Workload, error) {
	if !validEndpoint(s.Endpoint) {
		return nil, fmt.Errorf("bench: endpoint %q: want chat, completions or responses", s.Endpoint)
	}
	out, err := ParseLengths(s.OutputTokens)
	if err != nil {
		return nil, fmt.Errorf("bench: output tokens: %w", err)
	}
	if s.Sessions {
		if s.Replay != "" || s.Trace != "" {
			return nil, errors.New("bench: --sessions takes synthetic turns or a --dataset of conversations, not --replay or --trace")
		}
		in, err := ParseLengths(s.InputTokens)
		if err != nil {
			return nil, fmt.Errorf("bench: input tokens: %w", err)
		}
		return newSessions(s, in, out, tok)
	}
	sources := 0
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
	in, err := ParseLengths(s.InputTokens)
	if err != nil {
		return nil, fmt.Errorf("bench: input tokens: %w", err)
	}
	if in.zero() {
		return nil, errors.New("bench: a synthetic workload needs --input-tokens")
	}
	switch {
	case s.PrefixGroups < 0 || s.PrefixTokens < 0:
		return nil, errors.New("bench: --prefix-groups and --prefix-tokens must not be negative")
	case (s.PrefixGroups > 0) != (s.PrefixTokens > 0):
		return nil, errors.New("bench: --prefix-groups and --prefix-tokens go together")
	case s.PrefixGroups > 0 && s.SharedPrefix > 0:
		return nil, errors.New("bench: --shared-prefix and --prefix-groups are exclusive")
	case s.PrefixGroups > 0 && s.Endpoint == "completions":
		return nil, errors.New("bench: --prefix-groups puts each group's prefix in a system message: it needs the chat or responses endpoint")
	}
	model, _ := json.Marshal(s.Model)
	return &synthetic{spec: s, in: in, out: out, words: tok.Words(), model: model}, nil
}

// Lengths is a distribution of token counts: fixed "512", uniform
// "uniform:256-1024", or normal "normal:512,64" (clamped to at least 1).
type Lengths struct {
	kind string
	a, b float64
}

// ParseLengths reads a Lengths; "" is none.
func ParseLengths(s string) (Lengths, error) {
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		kind, arg = "fixed", s
	}
	if s == "" || s == "none" {
		return Lengths{}, nil
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
		return Lengths{}, fmt.Errorf("%q: want N, uniform:MIN-MAX or normal:MEAN,SD", s)
	}
	if err != nil || a < 1 || b < 0 || (kind == "uniform" && b < a) || a > 1e7 || b > 1e7 {
		return Lengths{}, fmt.Errorf("%q: want N, uniform:MIN-MAX or normal:MEAN,SD with positive token counts", s)
	}
	return Lengths{kind: kind, a: a, b: b}, nil
}

func (l Lengths) zero() bool { return l.kind == "" }

// Sample draws a length.
func (l Lengths) Sample(rng *rand.Rand) int {
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

// synthetic makes prompts of an exact length from one-token words.
type synthetic struct {
	spec    *WorkloadSpec
	in, out Lengths
	words   []string
	model   []byte // spec.Model, quoted
}

func (w *synthetic) Len() int { return 0 }

func (w *synthetic) Request(i int) Request {
	rng := rand.New(rand.NewPCG(w.spec.Seed, uint64(i)))
	r := Request{InputTokens: w.in.Sample(rng), MaxTokens: w.out.Sample(rng), At: -1, Ask: quality.Ask{JSON: w.spec.JSON}}
	if g := w.spec.PrefixGroups; g > 0 {
		question := w.prompt(rng, r.InputTokens)
		r.Body = w.spec.appendGroupBody(nil, w.model, w.groupPrefix(i%g), question, r.MaxTokens)
		r.InputTokens += w.spec.PrefixTokens
		return r
	}
	r.Body = w.spec.appendBody(nil, w.model, w.prompt(rng, r.InputTokens), r.MaxTokens)
	return r
}

// groupPrefix is group g's system prompt: PrefixTokens words of its own
// stream, the same in every request of the group and the seed.
func (w *synthetic) groupPrefix(g int) []byte {
	rng := rand.New(rand.NewPCG(w.spec.Seed^0x9e3779b97f4a7c15, uint64(g)))
	b := make([]byte, 0, w.spec.PrefixTokens*8)
	for range w.spec.PrefixTokens {
		b = append(b, w.words[rng.IntN(len(w.words))]...)
	}
	return b
}

// appendGroupBody appends a chat request of a system message (the
// group's prefix) and a user message (the question).
func (s *WorkloadSpec) appendGroupBody(b, model, system, question []byte, maxTokens int) []byte {
	b = append(b, `{"model":`...)
	b = append(b, model...)
	b = append(b, s.messagesKey()...)
	b = append(b, `{"role":"system","content":"`...)
	b = append(b, system...)
	b = append(b, `"},{"role":"user","content":"`...)
	b = append(b, question...)
	b = append(b, `"}]`...)
	return s.appendOptions(b, maxTokens)
}

// prompt is n words: the shared prefix (the same for every request of
// the seed), then words of this request's own stream.
func (w *synthetic) prompt(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n*8)
	shared := min(w.spec.SharedPrefix, n)
	if shared > 0 {
		pre := rand.New(rand.NewPCG(w.spec.Seed, math.MaxUint64))
		for range shared {
			b = append(b, w.words[pre.IntN(len(w.words))]...)
		}
	}
	for range n - shared {
		b = append(b, w.words[rng.IntN(len(w.words))]...)
	}
	return b
}

// appendBody appends a request body carrying prompt (plain ASCII words).
func (s *WorkloadSpec) appendBody(b, model, prompt []byte, maxTokens int) []byte {
	b = append(b, `{"model":`...)
	b = append(b, model...)
	if s.Endpoint == "completions" {
		b = append(b, `,"prompt":"`...)
		b = append(b, prompt...)
		b = append(b, '"')
	} else {
		b = append(b, s.messagesKey()...)
		b = append(b, `{"role":"user","content":"`...)
		b = append(b, prompt...)
		b = append(b, `"}]`...)
	}
	return s.appendOptions(b, maxTokens)
}

// appendOptions appends the fields every request of the spec carries and
// closes the object.
func (s *WorkloadSpec) appendOptions(b []byte, maxTokens int) []byte {
	responses := s.Endpoint == "responses"
	switch {
	case s.Stream && responses: // a Responses stream always ends with its usage
		b = append(b, `,"stream":true`...)
	case s.Stream:
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	default:
		b = append(b, `,"stream":false`...)
	}
	if maxTokens > 0 {
		if responses {
			b = append(b, `,"max_output_tokens":`...)
		} else {
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, int64(maxTokens), 10)
		if s.ForceOutputLength {
			b = append(b, `,"min_tokens":`...)
			b = strconv.AppendInt(b, int64(maxTokens), 10)
			b = append(b, `,"ignore_eos":true`...)
		}
	}
	if s.JSON && responses {
		b = append(b, `,"text":{"format":{"type":"json_object"}}`...)
	} else if s.JSON {
		b = append(b, `,"response_format":{"type":"json_object"}`...)
	}
	return append(b, '}')
}

// fixedSet is a list of prepared requests, sampled with the seed
// (dataset) or taken in order (replay).
type fixedSet struct {
	reqs   []Request
	perm   []int
	replay bool
}

func (w *fixedSet) Len() int {
	if w.replay {
		return len(w.reqs)
	}
	return 0
}

func (w *fixedSet) Request(i int) Request {
	if w.replay {
		return w.reqs[i%len(w.reqs)]
	}
	return w.reqs[w.perm[i%len(w.perm)]]
}

// hashFile returns the file's bytes and their SHA-256.
func hashFile(path string) ([]byte, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	sum := sha256.Sum256(raw)
	return raw, hex.EncodeToString(sum[:]), nil
}

// lines splits JSONL, or a JSON array of objects, into raw objects.
func lines(raw []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var all []json.RawMessage
		if err := json.Unmarshal(trimmed, &all); err != nil {
			return nil, err
		}
		return all, nil
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		if !json.Valid(l) {
			return nil, fmt.Errorf("line %d is not JSON", n)
		}
		out = append(out, json.RawMessage(bytes.Clone(l)))
	}
	return out, sc.Err()
}

// datasetItems reads s.Dataset's objects (lines), recording its hash.
func (s *WorkloadSpec) datasetItems() ([]json.RawMessage, error) {
	raw, sum, err := hashFile(s.Dataset)
	if err != nil {
		return nil, err
	}
	s.DatasetSHA256 = sum
	items, err := lines(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: dataset %s: %w", s.Dataset, err)
	}
	return items, nil
}

// loadDataset reads one OpenAI request per line (messages or prompt), or
// ShareGPT conversations (the first human turn is the prompt; the first
// reply's length, counted, is max_tokens unless --output-tokens is set).
func loadDataset(s *WorkloadSpec, out Lengths, tok *tokens.Tokenizer) (Workload, error) {
	items, err := s.datasetItems()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 1))
	w := &fixedSet{}
	for n, it := range items {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, fmt.Errorf("bench: dataset %s entry %d: not an object", s.Dataset, n+1)
		}
		var r Request
		var ok bool
		if conv, isShareGPT := obj["conversations"]; isShareGPT {
			r, ok = s.shareGPT(conv, out, rng, tok)
		} else {
			r, ok, err = s.openAIRequest(obj, out, rng)
			if err != nil {
				return nil, fmt.Errorf("bench: dataset %s entry %d: %w", s.Dataset, n+1, err)
			}
		}
		if ok {
			r.At = -1
			w.reqs = append(w.reqs, r)
		}
	}
	if len(w.reqs) == 0 {
		return nil, fmt.Errorf("bench: dataset %s holds no usable request", s.Dataset)
	}
	w.perm = rng.Perm(len(w.reqs))
	return w, nil
}

func (s *WorkloadSpec) shareGPT(conv json.RawMessage, out Lengths, rng *rand.Rand, tok *tokens.Tokenizer) (Request, bool) {
	var turns []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	if json.Unmarshal(conv, &turns) != nil {
		return Request{}, false
	}
	var prompt, reply string
	for _, t := range turns {
		switch {
		case prompt == "" && (t.From == "human" || t.From == "user"):
			prompt = t.Value
		case prompt != "" && reply == "" && (t.From == "gpt" || t.From == "assistant"):
			reply = t.Value
		}
	}
	if prompt == "" {
		return Request{}, false
	}
	maxTokens := out.Sample(rng)
	if out.zero() && reply != "" {
		maxTokens = max(1, tok.Count(reply))
	}
	q, _ := json.Marshal(s.Salt + prompt)
	b, _ := json.Marshal(s.Model)
	body := append([]byte(`{"model":`), b...)
	if s.Endpoint == "completions" {
		body = append(append(body, `,"prompt":`...), q...)
	} else {
		body = append(append(append(append(body, s.messagesKey()...), `{"role":"user","content":`...), q...), "}]"...)
	}
	return Request{Body: s.appendOptions(body, maxTokens), InputTokens: tok.Count(prompt), MaxTokens: maxTokens}, true
}

// openAIRequest takes a request object, setting the run's model, stream
// and output length over its own.
func (s *WorkloadSpec) openAIRequest(obj map[string]json.RawMessage, out Lengths, rng *rand.Rand) (Request, bool, error) {
	_, hasMsgs := obj["messages"]
	_, hasPrompt := obj["prompt"]
	_, hasInput := obj["input"]
	if !hasMsgs && !hasPrompt && !hasInput {
		return Request{}, false, errors.New("neither messages, prompt nor input")
	}
	var r Request
	if s.Model != "" {
		obj["model"], _ = json.Marshal(s.Model)
	}
	obj["stream"], _ = json.Marshal(s.Stream)
	delete(obj, "stream_options")
	if s.Stream {
		obj["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	if n := out.Sample(rng); n > 0 {
		obj["max_tokens"], _ = json.Marshal(n)
		delete(obj, "max_completion_tokens")
		if s.ForceOutputLength {
			obj["min_tokens"], obj["ignore_eos"] = obj["max_tokens"], json.RawMessage("true")
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if v, ok := obj[k]; ok {
			_ = json.Unmarshal(v, &r.MaxTokens)
		}
	}
	if s.JSON {
		obj["response_format"] = json.RawMessage(`{"type":"json_object"}`)
	}
	if s.Salt != "" {
		saltRequest(obj, s.Salt)
	}
	if s.Endpoint == "responses" {
		asResponse(obj)
	}
	var err error
	r.Body, err = json.Marshal(obj)
	return r, true, err
}

// saltRequest starts the text of the request's first message (or its
// prompt, or its input) with salt; a prompt of token ids stays as it is.
func saltRequest(obj map[string]json.RawMessage, salt string) {
	for _, k := range []string{"messages", "input", "prompt"} {
		v, ok := obj[k]
		if !ok {
			continue
		}
		var text string
		if json.Unmarshal(v, &text) == nil {
			obj[k], _ = json.Marshal(salt + text)
			return
		}
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil || len(items) == 0 {
			return
		}
		if json.Unmarshal(items[0], &text) == nil { // a list of prompts
			items[0], _ = json.Marshal(salt + text)
		} else {
			var msg map[string]json.RawMessage
			if json.Unmarshal(items[0], &msg) != nil {
				return
			}
			if json.Unmarshal(msg["content"], &text) == nil {
				msg["content"], _ = json.Marshal(salt + text)
			} else if parts := []json.RawMessage{}; json.Unmarshal(msg["content"], &parts) == nil {
				kind := "text"
				if len(parts) > 0 && bytes.Contains(parts[0], []byte(`"input_text"`)) {
					kind = "input_text" // the Responses API's part
				}
				part, _ := json.Marshal(map[string]string{"type": kind, "text": salt})
				msg["content"], _ = json.Marshal(append([]json.RawMessage{part}, parts...))
			} else {
				return
			}
			items[0], _ = json.Marshal(msg)
		}
		obj[k], _ = json.Marshal(items)
		return
	}
}

// asResponse rewrites a chat or completion request object as the
// Responses API request it amounts to: messages (or a prompt) become the
// input, max_tokens max_output_tokens, response_format text.format; a
// Responses request stays as it is.
func asResponse(obj map[string]json.RawMessage) {
	if m, ok := obj["messages"]; ok {
		obj["input"] = m
		delete(obj, "messages")
	}
	if p, ok := obj["prompt"]; ok {
		if _, has := obj["input"]; !has {
			obj["input"] = p
		}
		delete(obj, "prompt")
	}
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if v, ok := obj[k]; ok {
			obj["max_output_tokens"] = v
			delete(obj, k)
		}
	}
	delete(obj, "stream_options")
	if f, ok := obj["response_format"]; ok {
		obj["text"] = json.RawMessage(`{"format":` + string(f) + `}`)
		delete(obj, "response_format")
	}
}

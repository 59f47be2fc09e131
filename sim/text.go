package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
)

// vocab holds the words of generated text. Each, with its leading space,
// is one token of cl100k_base, so the token count the simulator reports is
// the count a real tokenizer gives for the text it sends (tested).
var vocab = strings.Fields(`the of and to in is that for it as with was on be by at this from
are or an have not which but they you all one their has more will can had there about
would been were when time only some what so new other than its into also these could
first two may any over most after model data system between under long used each make
many such well where work through much state same very number people good part world
three order case point great small large early high place power course still water three
light group before must while again form back line even here since market value speed
token cache batch queue memory answer question result report simple clear level test`)

// refusal is what a refusing build answers, split into its tokens.
var refusal = []string{"I", "'m", " sorry", ",", " but", " I", " can", "'t", " help", " with", " that", " request", "."}

// JSON answers are {"answer": "<words>"}, in tokens.
var (
	jsonOpen  = []string{`{"`, "answer", `":`, ` "`}
	jsonClose = `"}`
	jsonBad   = `",` // a trailing comma and no closing brace: invalid JSON
)

// Kinds of answer.
const (
	kindText = iota
	kindJSON
	kindMalformedJSON
	kindRefusal
)

// promptText returns the prompt's text and its token count: chat messages
// are counted as OpenAI does (content tokens, plus 4 per message and 3 for
// the reply's priming), a chat request's tools array first, as its JSON
// text framed like a message (chat templates render the tools at the
// prompt's start); a completion prompt is a string, a list of strings,
// or token ids.
func promptText(t *tokens.Tokenizer, r *openai.Request) (string, int, error) {
	if len(r.Messages) > 0 {
		var sb strings.Builder
		n := 3
		if len(r.Tools) > 0 {
			sb.WriteString("tools")
			sb.Write(r.Tools)
			n += 4 + t.Count(string(r.Tools))
		}
		for i, m := range r.Messages {
			s, err := contentText(m.Content)
			if err != nil {
				return "", 0, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			sb.WriteString(m.Role)
			sb.WriteString(s)
			n += 4 + t.Count(s)
		}
		return sb.String(), n, nil
	}
	if len(r.Prompt) == 0 {
		return "", 0, fmt.Errorf("either messages or prompt is required")
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err == nil {
		return s, t.Count(s), nil
	}
	var ss []string
	if err := json.Unmarshal(r.Prompt, &ss); err == nil {
		joined := strings.Join(ss, "")
		return joined, t.Count(joined), nil
	}
	var ids []int
	if err := json.Unmarshal(r.Prompt, &ids); err == nil {
		return string(r.Prompt), len(ids), nil
	}
	return "", 0, fmt.Errorf("prompt must be a string, a list of strings or a list of token ids")
}

// contentText flattens a message content: a string, or an array of parts
// whose text parts are joined.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("must be a string or an array of content parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String(), nil
}

// answer is the planned output of one request: its length in tokens, why
// it ends, and how its text is made. Tokens are made on demand from seed,
// so a running sequence holds no text.
type answer struct {
	seed   uint64
	tokens int
	finish string // "stop" or "length"
	kind   int
	// think is how many of the tokens, first, are a reasoning model's
	// thinking; the answer is the rest.
	think int
}

// thinking reports whether output token i is thinking.
func (a *answer) thinking(i int) bool { return i < a.think }

// token appends the text of output token i to dst: thinking, then the
// answer.
func (a *answer) token(dst []byte, i int) []byte {
	if i < a.think {
		if i == 0 {
			return append(dst, "Let"...)
		}
		return append(append(dst, ' '), vocab[mix(a.seed^0x7417, uint64(i))%uint64(len(vocab))]...)
	}
	return a.answerToken(dst, i-a.think)
}

// answerToken appends the text of answer token i (after the thinking).
func (a *answer) answerToken(dst []byte, i int) []byte {
	switch a.kind {
	case kindRefusal:
		return append(dst, refusal[i%len(refusal)]...)
	case kindJSON, kindMalformedJSON:
		if i < len(jsonOpen) {
			return append(dst, jsonOpen[i]...)
		}
		if i == a.tokens-a.think-1 && a.finish == "stop" {
			if a.kind == kindMalformedJSON {
				return append(dst, jsonBad...)
			}
			return append(dst, jsonClose...)
		}
		i -= len(jsonOpen)
		if i == 0 {
			return append(dst, "The"...)
		}
		return append(append(dst, ' '), vocab[mix(a.seed, uint64(i))%uint64(len(vocab))]...)
	}
	if i == 0 {
		return append(dst, "The"...)
	}
	h := mix(a.seed, uint64(i))
	if i%13 == 12 {
		return append(dst, '.')
	}
	return append(append(dst, ' '), vocab[h%uint64(len(vocab))]...)
}

// text returns the whole answer, without the thinking.
func (a *answer) text() string {
	b := make([]byte, 0, a.tokens*6)
	for i := a.think; i < a.tokens; i++ {
		b = a.token(b, i)
	}
	return string(b)
}

// thoughts returns the thinking.
func (a *answer) thoughts() string {
	b := make([]byte, 0, a.think*6)
	for i := range a.think {
		b = a.token(b, i)
	}
	return string(b)
}

// planAnswer decides the answer to a request from the config, the prompt
// and the request's limits. A request whose limits cannot be met gets an
// error worded as vLLM words it.
func planAnswer(cfg *Config, r *openai.Request, prompt string, promptTokens int, nonce uint64) (answer, error) {
	var a answer
	if r.N != nil && *r.N != 1 {
		if *r.N < 1 {
			return a, fmt.Errorf("n must be at least 1, got %d", *r.N)
		}
		return a, fmt.Errorf("n=%d is not supported: this server generates one choice per request", *r.N)
	}
	if r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 2) {
		return a, fmt.Errorf("temperature must be in [0, 2], got %v", *r.Temperature)
	}
	room := cfg.Output.MaxModelLen - promptTokens
	limit := room
	if l := r.OutputLimit(); l != nil {
		if *l < 1 {
			return a, fmt.Errorf("max_tokens must be at least 1, got %d", *l)
		}
		limit = *l
	}
	if promptTokens+limit > cfg.Output.MaxModelLen || room < 1 {
		return a, fmt.Errorf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			cfg.Output.MaxModelLen, promptTokens+limit, promptTokens, limit)
	}
	minTokens := 0
	if r.MinTokens != nil {
		if *r.MinTokens < 0 || *r.MinTokens > limit {
			return a, fmt.Errorf("min_tokens must be in [0, max_tokens=%d], got %d", limit, *r.MinTokens)
		}
		minTokens = *r.MinTokens
	}

	// Temperature 0 (or an explicit seed) answers the same prompt the same
	// way; otherwise the answer varies per request.
	h := fnv.New64a()
	h.Write([]byte(prompt))
	seed := mix(h.Sum64(), uint64(cfg.Seed))
	switch {
	case r.Seed != nil:
		seed = mix(seed, uint64(*r.Seed))
	case r.Temperature == nil || *r.Temperature > 0:
		seed = mix(seed, nonce)
	}
	a.seed = seed
	a.kind = kindText
	if r.ResponseFormat != nil && r.ResponseFormat.Type == "json_object" {
		a.kind = kindJSON
	}

	q := &cfg.Quality
	u := unit(mix(seed, 0xa11ce))
	switch {
	case u < q.RefusalRate:
		a.kind, a.tokens, a.finish = kindRefusal, len(refusal), "stop"
		if !r.IgnoreEOS && a.tokens < limit && a.tokens >= minTokens {
			return a, nil
		}
		a.kind = kindText // a forced length cannot refuse in fewer tokens
	case a.kind == kindJSON && unit(mix(seed, 0x15011)) < q.MalformedJSONRate:
		a.kind = kindMalformedJSON
	}

	natural := int(math.Round(float64(cfg.Output.MeanTokens) * (0.5 + unit(mix(seed, 0x1e11)))))
	if a.kind != kindText {
		natural = max(natural, len(jsonOpen)+2)
	}
	truncated := u >= q.RefusalRate && u < q.RefusalRate+q.TruncationRate
	switch {
	case r.IgnoreEOS:
		a.tokens, a.finish = limit, "length"
	case truncated:
		a.tokens, a.finish = max(1, min(limit, natural/3)), "length"
	default:
		a.tokens = max(natural, minTokens)
		a.finish = "stop"
		if a.tokens >= limit {
			a.tokens, a.finish = limit, "length"
		}
	}
	if stops := stopStrings(r.Stop); len(stops) > 0 && !r.IgnoreEOS {
		a.applyStop(stops, minTokens)
	}
	if n := cfg.Output.ReasoningTokens; n > 0 && limit > 1 {
		// The thinking comes before the answer and counts against the
		// output limit, as reasoning models' does; a forced length
		// (ignore_eos) holds it, at least one answer token after.
		if !r.IgnoreEOS && a.finish == "stop" {
			a.tokens += n
			if a.tokens >= limit {
				a.tokens, a.finish = limit, "length"
			}
		}
		a.think = max(min(n, a.tokens-1), 0)
	}
	return a, nil
}

// applyStop ends the answer before the first token that completes a stop
// string, as vLLM does (the stop string itself is not sent).
func (a *answer) applyStop(stops []string, minTokens int) {
	var text []byte
	for i := range a.tokens {
		text = a.token(text, i)
		if i+1 < minTokens {
			continue
		}
		for _, s := range stops {
			if s != "" && strings.Contains(string(text), s) {
				a.tokens, a.finish = i, "stop"
				return
			}
		}
	}
}

func stopStrings(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var ss []string
	_ = json.Unmarshal(raw, &ss)
	return ss
}

// mix is splitmix64 of a combined with b.
func mix(a, b uint64) uint64 {
	z := a ^ (b * 0x9e3779b97f4a7c15)
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps h to [0,1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

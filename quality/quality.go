// Package quality is the one judge of an answer's form: whether it is a
// refusal, invalid JSON where JSON was asked, off the request's JSON
// schema, empty, or cut short (by the model's length limit, or by a
// gateway's output cap). bench judges every answer of a run by it and the
// mirror both answers of every pair, so a signal means the same in a
// record, in compare and in ab report.
package quality

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Signals are the quality signals of one answer. They are set only for a
// successful answer; a failed one has none.
type Signals struct {
	// InvalidJSON: JSON was asked (response_format) and the text does not
	// parse. A truncated answer that is not JSON counts: the client
	// cannot parse it either.
	InvalidJSON bool `json:"invalid_json,omitempty"`
	// SchemaInvalid: the request gave a JSON schema, and the text is JSON
	// that does not fit it.
	SchemaInvalid bool `json:"schema_invalid,omitempty"`
	// Refusal: the answer's opening declines the request (Judge's
	// patterns).
	Refusal bool `json:"refusal,omitempty"`
	// Empty: no text and no tool calls.
	Empty bool `json:"empty,omitempty"`
	// Truncated: cut at the output limit, whoever set it (the rule:
	// Truncated); LengthByPolicy: the limit was a gateway's output cap,
	// not the client's or the model's.
	Truncated      bool `json:"truncated,omitempty"`
	LengthByPolicy bool `json:"length_by_policy,omitempty"`
}

// Answer is what is judged: a successful answer's text and how it ended.
type Answer struct {
	// Text is the answer's text: the content (and reasoning content) of
	// a stream's events or of a whole body (openai.AppendContent).
	Text []byte
	// ToolCalls is set when the answer called tools: not empty, and not
	// judged as JSON text.
	ToolCalls bool
	// Finish is the finish_reason (a Responses answer's status as
	// openai.Response.Finish reads it: completed is "stop", incomplete
	// "length"); ByPolicy says a gateway's output cap set the request's
	// output limit.
	Finish   string
	ByPolicy bool
	// OutputTokens is the answer's output tokens as the server counted
	// them (usage), or a lower bound of them; 0 when not known.
	OutputTokens int
	// Ask is what the request asked of the answer's form (AskOf).
	Ask Ask
}

// Opening is how much of an answer the refusal patterns read: a refusal
// declines at the start, and an answer that quotes one later is not one.
const Opening = 400

// DefaultRefusals are the refusal patterns used when none are given
// (regular expressions, matched case-insensitively against the answer's
// opening with curly apostrophes read as straight ones). Each needs the
// answer to decline, not only to apologise or to mention being an AI:
// "I'm sorry to hear that. Here is ..." and "Sure! As an AI model, here
// is ..." are answers.
var DefaultRefusals = []string{
	// "I can't help with that", "I'm unable to assist", "I will not comply"
	`\bi(?: am|'m)? (?:can(?:not|'t| not)|won't|will not|unable to|not able to) (?:help|assist|comply|provide|fulfil|do that|answer|support|share|create|generate)`,
	// "I'm sorry, but ...", "I apologize, but ...", "Sorry, but ..." at the start
	`^\W*(?:i(?: am|'m) sorry|i apologi[sz]e|sorry|unfortunately)\b[^.!?\n]{0,24}\bbut\b`,
	// "As an AI, I cannot ...", "As an AI language model, I don't ..."
	`\bas an ai\b[^.!?\n]{0,40}\b(?:can(?:not|'t)|won't|unable|not able|don't|do not)\b`,
}

// apostrophes are read as the straight one before matching.
var apostrophes = strings.NewReplacer("\u2019", "'", "\u2018", "'", "\u02bc", "'")

// Judge judges answers. It is safe for concurrent use.
type Judge struct {
	refusals []*regexp.Regexp
	mu       sync.Mutex
	schemas  schemaCache
}

// NewJudge compiles refusal patterns (regular expressions, RE2 syntax,
// matched case-insensitively); nil uses DefaultRefusals, an empty list
// judges nothing a refusal.
func NewJudge(refusals []string) (*Judge, error) {
	if refusals == nil {
		refusals = DefaultRefusals
	}
	j := &Judge{schemas: schemaCache{}}
	for _, p := range refusals {
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("quality: refusal pattern %q: %w", p, err)
		}
		j.refusals = append(j.refusals, re)
	}
	return j, nil
}

// Judge returns the signals of a successful answer.
func (j *Judge) Judge(a Answer) Signals {
	t := bytes.TrimSpace(a.Text)
	s := Signals{Empty: len(t) == 0 && !a.ToolCalls, Truncated: Truncated(a)}
	s.LengthByPolicy = s.Truncated && a.ByPolicy
	if a.Ask.JSON && !a.ToolCalls {
		s.InvalidJSON = !json.Valid(t)
		if !s.InvalidJSON && a.Ask.Schema != nil {
			if sc, err := j.schema(a.Ask.Schema); err == nil {
				s.SchemaInvalid = !fits(sc, t)
			}
		}
	}
	s.Refusal = j.Refusal(t)
	return s
}

// Truncated reports whether an answer was cut at its output limit:
//
//   - finish_reason "length" (a Responses answer's status incomplete), or
//   - a Responses answer whose output tokens reached the request's
//     max_output_tokens, whatever its status: llama.cpp's server says
//     completed of an answer max_output_tokens cut (its Responses API is
//     converted from chat and drops the finish reason).
//
// A chat or completions answer is judged by its finish_reason alone.
// There, completion_tokens equal to max_tokens with finish_reason "stop"
// is an answer that ended at the cap by itself: the servers say "length"
// when they cut a chat answer (vLLM, SGLang, llama.cpp, OpenAI), and
// llama.cpp counts the end-of-sequence token in completion_tokens, so
// when the cap-th token is the EOS (or completes a stop string) the
// answer is whole, says "stop", and has used the cap exactly. A
// Responses answer that ended by itself at exactly max_output_tokens
// cannot be told from one that was cut (llama.cpp gives no finish
// reason): it counts as truncated, the error on the side of the flag.
func Truncated(a Answer) bool {
	if a.Finish == "length" {
		return true
	}
	return a.Ask.MaxOutputTokens > 0 && a.OutputTokens >= a.Ask.MaxOutputTokens
}

// Refusal reports whether text opens with a refusal.
func (j *Judge) Refusal(text []byte) bool {
	if len(j.refusals) == 0 {
		return false
	}
	open := string(text[:min(len(text), Opening)])
	open = apostrophes.Replace(open)
	for _, re := range j.refusals {
		if re.MatchString(open) {
			return true
		}
	}
	return false
}

// SchemaUsable reports whether a schema compiles (an answer is checked
// against it only then).
func (j *Judge) SchemaUsable(raw []byte) bool {
	_, err := j.schema(raw)
	return err == nil
}

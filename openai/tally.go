package openai

import (
	"bytes"
	"time"
)

// Tally is the one account of an answer's events: what the gateway's
// relay, the mirror's candidate reader and bench all count, by the same
// rule, so a token, a finish or a usage means the same thing to each.
//
// An event's data counts as content when it carries non-empty content,
// text or reasoning_content, or tool calls (HasContent); a role-only or
// empty delta does not, wherever it comes in the stream. The finishing
// chunk (finish_reason set) counts as content when it also carries some
// (vLLM puts the last token there). Usage is read from any chunk at or
// after the finish, where servers put it (a usage chunk of its own, or
// the finishing chunk itself).
//
// The zero value is ready; Reset makes it so again. It does not allocate
// per event except to grow Text.
type Tally struct {
	// ContentEvents counts the events that carried content;
	// FirstContent and LastContent are when the first and the last
	// arrived (the times Add was given).
	ContentEvents             int
	FirstContent, LastContent time.Time
	// Finish is the finish_reason (the common ones without allocating),
	// empty until a chunk sets one.
	Finish string
	// Usage is the usage the server reported; HasUsage whether it did.
	Usage    Usage
	HasUsage bool
	// Done is set by data: [DONE]; ErrorEvent by an in-stream error
	// object; ToolCalls by a chunk carrying tool calls.
	Done, ErrorEvent, ToolCalls bool
	// Responses reads the events as the Responses API's (responses.go)
	// rather than chat or completion chunks; Reset keeps it. (Beside the
	// other flags, in the word they share: a Tally is part of every
	// request the gateway serves.)
	Responses bool
	// Text collects the answer's text (AppendContent) while it is shorter
	// than TextLimit; TextLimit 0 collects none. A reasoning model's
	// thinking is not part of it.
	Text      []byte
	TextLimit int
	// ReasoningEvents counts the content events that carried only a
	// reasoning model's thinking (reasoning_content or reasoning in a
	// chat delta, the Responses API's reasoning deltas); FirstOutput is
	// when the first content event that was not thinking arrived: the
	// first output token, where FirstContent is the first token of any
	// kind.
	ReasoningEvents int
	FirstOutput     time.Time
	// ResponseID is the xxhash (64-bit) of a Responses answer's id
	// (ResponseID), 0 until its response.created event or body: what a
	// later request's previous_response_id names, kept as a hash only.
	ResponseID uint64

	// contentAt is where the content string's text began in the last
	// chunk that carried one: a server writes every chunk of a stream with
	// the same prefix, so the next one is checked there first.
	contentAt int
}

// Kind is what an event was to a Tally.
type Kind uint8

// The kinds of event.
const (
	// KindOther: a comment, a role-only or empty delta, anything that
	// carries no output and comes before the finish (a usage chunk
	// among them is read).
	KindOther Kind = iota
	// KindContent carries output.
	KindContent
	// KindFinish is the chunk that sets finish_reason (it may carry
	// content too, counted).
	KindFinish
	// KindTrailer comes after the finish: the usage chunk, typically.
	KindTrailer
	// KindDone is data: [DONE].
	KindDone
	// KindError is an error object sent in-stream.
	KindError
)

// Reset empties t, keeping Text's memory and TextLimit.
func (t *Tally) Reset() {
	text, limit, resp := t.Text[:0], t.TextLimit, t.Responses
	*t = Tally{Text: text, TextLimit: limit, Responses: resp}
}

// Finished reports whether a finish_reason was seen.
func (t *Tally) Finished() bool { return t.Finish != "" }

// Add accounts one event's data (EventData) that arrived at. It returns
// the event's kind and whether the event carried a usage object (read
// into t.Usage).
func (t *Tally) Add(data []byte, at time.Time) (Kind, bool) {
	if t.Responses {
		return t.addResponse(data, at)
	}
	switch {
	case len(data) == 0:
		return KindOther, false
	case IsDoneData(data):
		t.Done = true
		return KindDone, false
	case t.Finished():
		return KindTrailer, t.usage(data)
	case IsErrorChunk(data):
		t.ErrorEvent = true
		return KindError, false
	case HasFinishReason(data):
		t.Finish = FinishString(FinishReason(data))
		if has, tool, reason := t.contentOf(data); has {
			t.content(data, at, tool, reason)
		}
		return KindFinish, t.usage(data)
	}
	if has, tool, reason := t.contentOf(data); has {
		t.content(data, at, tool, reason)
		return KindContent, false
	}
	// A usage chunk before any finish (servers differ in the order).
	return KindOther, t.usage(data)
}

// AddBody accounts a whole non-streaming response body, arrived at: one
// content event when it carries content.
func (t *Tally) AddBody(body []byte, at time.Time) {
	if t.Responses {
		t.addResponseBody(body, at)
		return
	}
	// A message may carry text and tool calls both, and thinking beside
	// them: the thinking counts first, as it came.
	if valueIsString(body, keyReasoning, true) || valueIsString(body, keyReasoningVLLM, true) {
		t.reasoning(at)
	}
	if tool := hasToolCalls(body); tool || answered(body) {
		t.content(body, at, tool, false)
	}
	if f := FinishReason(body); f != nil {
		t.Finish = FinishString(f)
	}
	t.usage(body)
}

func (t *Tally) content(data []byte, at time.Time, tool, reason bool) {
	if reason {
		t.reasoning(at)
		return
	}
	t.output(at)
	t.ToolCalls = t.ToolCalls || tool
	if len(t.Text) < t.TextLimit {
		t.Text = AppendContent(t.Text, data)
	}
}

// output counts a content event that carried answer (text or a tool
// call).
func (t *Tally) output(at time.Time) {
	if t.ContentEvents == 0 {
		t.FirstContent = at
	}
	if t.FirstOutput.IsZero() {
		t.FirstOutput = at
	}
	t.LastContent = at
	t.ContentEvents++
}

// reasoning counts a content event that carried only thinking.
func (t *Tally) reasoning(at time.Time) {
	if t.ContentEvents == 0 {
		t.FirstContent = at
	}
	t.LastContent = at
	t.ContentEvents++
	t.ReasoningEvents++
}

// ReasoningTime is how long the model thought before its first output
// token: FirstOutput − FirstContent; zero when it did not think first or
// gave no output.
func (t *Tally) ReasoningTime() time.Duration {
	if t.ReasoningEvents == 0 || t.FirstOutput.IsZero() {
		return 0
	}
	return max(t.FirstOutput.Sub(t.FirstContent), 0)
}

func (t *Tally) usage(data []byte) bool {
	u, ok := UsageOf(data)
	if ok {
		t.Usage, t.HasUsage = u, true
	}
	return ok
}

// OutputTokens is the usage's completion tokens when the server reported
// usage, else the content events (one token each, a lower bound).
func (t *Tally) OutputTokens() int {
	if t.HasUsage {
		return t.Usage.CompletionTokens
	}
	return t.ContentEvents
}

// TPOT is the mean time per output token after the first: (last content
// − first content) / (output tokens − 1); zero with fewer than two.
func (t *Tally) TPOT() time.Duration {
	n := t.OutputTokens()
	if n < 2 || t.ContentEvents == 0 {
		return 0
	}
	return t.LastContent.Sub(t.FirstContent) / time.Duration(n-1)
}

// maxFinish bounds a finish_reason kept from a backend: it becomes a
// metric label and a log field.
const maxFinish = 32

// FinishString returns a finish_reason read off the wire as a string: the
// common reasons without allocating, any other cut to 32 bytes.
func FinishString(b []byte) string {
	for _, r := range [...]string{"stop", "length", "tool_calls", "content_filter", "function_call", "abort"} {
		if string(b) == r {
			return r
		}
	}
	return string(b[:min(len(b), maxFinish)])
}

func hasToolCalls(data []byte) bool { return nextValue(data, keyToolCalls) != nil }

// contentKeyQuote is a content key, its colon and its string's opening
// quote, as servers write them.
var contentKeyQuote = []byte(`"content":"`)

// contentOf is HasContent, also telling whether it was tool calls that
// made it content (a streamed chunk carries text or tool calls, not
// both: the check for tool calls costs nothing on a text chunk).
//
// It looks first where the last chunk's content began: when the bytes
// before that offset are "content":" and a character other than a quote
// follows, the chunk has a non-empty content string, exactly as
// HasContent would find (in JSON the middle quote cannot be escaped, so
// those bytes are a key named content, whatever the depth). That costs
// a comparison instead of a search (relay: 222 → 175 ns an event).
func (t *Tally) contentOf(data []byte) (has, tool, reason bool) {
	if a := t.contentAt; a > len(contentKeyQuote) && a < len(data) && data[a] != '"' && bytes.Equal(data[a-len(contentKeyQuote):a], contentKeyQuote) {
		return true, false, false
	}
	if v := nextValue(data, keyContent); v != nil {
		for ; v != nil; v = nextValue(v, keyContent) {
			if len(v) > 1 && v[0] == '"' && v[1] != '"' {
				if at := len(data) - len(v) + 1; at > len(contentKeyQuote) && bytes.Equal(data[at-len(contentKeyQuote):at], contentKeyQuote) {
					t.contentAt = at
				}
				return true, false, false
			}
		}
	}
	return contentOf(data)
}

// contentOf is HasContent telling whether tool calls made it content,
// and whether it was thinking alone (reasoning_content or reasoning, no
// text and no tool calls).
func contentOf(data []byte) (has, tool, reason bool) {
	if answered(data) {
		return true, false, false
	}
	if bytes.Contains(data, keyToolCalls) {
		return true, true, false
	}
	if valueIsString(data, keyReasoning, true) || valueIsString(data, keyReasoningVLLM, true) {
		return true, false, true
	}
	return false, false, false
}

// answered reports whether data carries non-empty content or text.
func answered(data []byte) bool {
	return valueIsString(data, keyContent, true) || valueIsString(data, keyText, true)
}

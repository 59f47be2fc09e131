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
	// Text collects the answer's text (AppendContent) while it is shorter
	// than TextLimit; TextLimit 0 collects none.
	Text      []byte
	TextLimit int

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
	text, limit := t.Text[:0], t.TextLimit
	*t = Tally{Text: text, TextLimit: limit}
}

// Finished reports whether a finish_reason was seen.
func (t *Tally) Finished() bool { return t.Finish != "" }

// Add accounts one event's data (EventData) that arrived at. It returns
// the event's kind and whether the event carried a usage object (read
// into t.Usage).
func (t *Tally) Add(data []byte, at time.Time) (Kind, bool) {
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
		if has, tool := t.contentOf(data); has {
			t.content(data, at, tool)
		}
		return KindFinish, t.usage(data)
	}
	if has, tool := t.contentOf(data); has {
		t.content(data, at, tool)
		return KindContent, false
	}
	// A usage chunk before any finish (servers differ in the order).
	return KindOther, t.usage(data)
}

// AddBody accounts a whole non-streaming response body, arrived at: one
// content event when it carries content.
func (t *Tally) AddBody(body []byte, at time.Time) {
	if has, _ := contentOf(body); has {
		// A message may carry text and tool calls both.
		t.content(body, at, hasToolCalls(body))
	}
	if f := FinishReason(body); f != nil {
		t.Finish = FinishString(f)
	}
	t.usage(body)
}

func (t *Tally) content(data []byte, at time.Time, tool bool) {
	if t.ContentEvents == 0 {
		t.FirstContent = at
	}
	t.LastContent = at
	t.ContentEvents++
	t.ToolCalls = t.ToolCalls || tool
	if len(t.Text) < t.TextLimit {
		t.Text = AppendContent(t.Text, data)
	}
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
func (t *Tally) contentOf(data []byte) (has, tool bool) {
	if a := t.contentAt; a > len(contentKeyQuote) && a < len(data) && data[a] != '"' && bytes.Equal(data[a-len(contentKeyQuote):a], contentKeyQuote) {
		return true, false
	}
	if v := nextValue(data, keyContent); v != nil {
		for ; v != nil; v = nextValue(v, keyContent) {
			if len(v) > 1 && v[0] == '"' && v[1] != '"' {
				if at := len(data) - len(v) + 1; at > len(contentKeyQuote) && bytes.Equal(data[at-len(contentKeyQuote):at], contentKeyQuote) {
					t.contentAt = at
				}
				return true, false
			}
		}
	}
	return contentOf(data)
}

// contentOf is HasContent telling whether tool calls made it content.
func contentOf(data []byte) (has, tool bool) {
	if valueIsString(data, keyContent, true) || valueIsString(data, keyText, true) || valueIsString(data, keyReasoning, true) {
		return true, false
	}
	if bytes.Contains(data, keyToolCalls) {
		return true, true
	}
	return false, false
}

package policy

import (
	"encoding/json"
	"fmt"

	"github.com/infergate/infergate/openai"
)

// input counts the messages and trims them to the limit.
func (p *Policy) input(r Request, m *modelPolicy, lim Limits, d *Decision, ed *edits) error {
	mf := r.Env.Messages
	if !mf.Present() {
		return invalidField("messages", "missing")
	}
	arr := mf.Of(r.Body)
	// No token is shorter than a byte and every message's JSON framing
	// ({"role":"user","content":""}, 28 bytes) outweighs its template's:
	// a messages array of fewer bytes than the limit, with the tools and
	// the reply's priming, is within it uncounted.
	if !r.Count && len(arr)+len(r.Env.Tools.Of(r.Body))+m.count.tpl.reply <= lim.MaxInputTokens {
		return nil
	}
	fixed := m.count.tpl.reply
	if tools := r.Env.Tools.Of(r.Body); tools != nil {
		fixed += m.count.json(tools)
	}
	var exact func() (int, error)
	if m.count.backend && r.Exact != nil {
		exact = func() (int, error) {
			return r.Exact(ExactInput{Messages: arr, Tools: r.Env.Tools.Of(r.Body), Body: r.Body})
		}
	}
	kept, err := countAndTrim(arr, fixed, exact, m, lim, d)
	if err != nil || kept == nil {
		return err
	}
	ed.replace(mf.Value, encodeMessages(arr, kept))
	return nil
}

// countAndTrim counts the messages of arr, with fixed tokens beside them
// (tools, the reply's priming, instructions), into d: estimated, or the
// backend's count when exact gives one (the per-message counts scaled to
// it, so trimming divides it in their proportions). Over the limit, it
// trims them by its strategy and returns the messages kept; nil when they
// fit. A request that cannot be trimmed to fit is refused.
func countAndTrim(arr []byte, fixed int, exact func() (int, error), m *modelPolicy, lim Limits, d *Decision) ([]message, error) {
	msgs, err := parseMessages(arr, &m.count)
	if err != nil {
		return nil, err
	}
	total := fixed
	for _, msg := range msgs {
		total += msg.tokens
	}
	d.Tokenizer, d.Estimated = m.count.name, m.count.estimated
	if exact != nil {
		if n, err := exact(); err == nil && n > 0 {
			scale(msgs, n-fixed)
			total, d.Estimated = n, false
		}
	}
	d.InputTokens = total
	if lim.MaxInputTokens == 0 || total <= lim.MaxInputTokens {
		return nil, nil
	}
	var kept []message
	switch lim.Trim {
	case DropOldest:
		kept = dropOldest(msgs, lim.MaxInputTokens-fixed)
	case TruncateMiddle:
		if kept, err = truncateMiddle(arr, msgs, lim.MaxInputTokens-fixed, &m.count); err != nil {
			return nil, err
		}
	}
	if kept == nil {
		return nil, contextExceeded(total, lim.MaxInputTokens, lim.Trim)
	}
	after := fixed
	for _, msg := range kept {
		after += msg.tokens
	}
	d.TrimmedTokens, d.TrimmedMessages = total-after, len(msgs)-len(kept)
	d.InputTokens = after
	return kept, nil
}

// scale makes the messages' counts sum to total, in their proportions.
func scale(msgs []message, total int) {
	sum := 0
	for _, m := range msgs {
		sum += m.tokens
	}
	if sum <= 0 || total <= 0 {
		return
	}
	for i := range msgs {
		msgs[i].tokens = msgs[i].tokens * total / sum
	}
}

func contextExceeded(sent, allowed int, s Strategy) error {
	msg := fmt.Sprintf("This request's messages are %d tokens; this gateway allows at most %d. Shorten the messages.", sent, allowed)
	switch s {
	case DropOldest:
		msg = fmt.Sprintf("This request's messages are %d tokens and cannot be trimmed to the %d allowed by dropping older turns: the system messages and the newest turn alone are longer. Shorten the messages.", sent, allowed)
	case TruncateMiddle:
		msg = fmt.Sprintf("This request's messages are %d tokens and cannot be trimmed to the %d allowed by shortening the longest message. Shorten the messages.", sent, allowed)
	}
	return &Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "context_length_exceeded", Message: msg}
}

// responsesInput counts a Responses request's instructions and input and
// trims the input to the limit, with the chat strategies: the input items
// are the messages (a function call and its output one turn, as a tool
// call and its result are), the instructions a system message always
// kept, a string input one user message.
func (p *Policy) responsesInput(r Request, m *modelPolicy, lim Limits, d *Decision, ed *edits) error {
	in := r.Env.Input
	raw := in.Of(r.Body)
	if raw == nil || string(raw) == "null" {
		return invalidField("input", "missing")
	}
	fixed := m.count.tpl.reply
	var instructions *string
	if v := r.Env.Instructions.Of(r.Body); v != nil && v[0] == '"' {
		s, err := openai.Unquote(v)
		if err != nil {
			return invalidField("instructions", err.Error())
		}
		instructions = &s
		fixed += m.count.text("system") + m.count.text(s) + m.count.tpl.perMessage
	}
	if tools := r.Env.Tools.Of(r.Body); tools != nil {
		fixed += m.count.json(tools)
	}
	arr, str := raw, raw[0] == '"'
	if str {
		// A string input is the user's one message.
		arr = append(append([]byte(`[{"role":"user","content":`), raw...), "}]"...)
	} else if raw[0] != '[' {
		return invalidField("input", "must be a string or an array of input items")
	}
	var exact func() (int, error)
	if m.count.backend && r.Exact != nil {
		// A backend that counts chat messages gets the instructions and
		// input as the messages they amount to.
		exact = func() (int, error) {
			chat, err := openai.InputMessages(instructions, raw)
			if err != nil {
				return 0, err
			}
			b, err := json.Marshal(chat)
			if err != nil {
				return 0, err
			}
			return r.Exact(ExactInput{Messages: b, Body: r.Body, Responses: true})
		}
	}
	kept, err := countAndTrim(arr, fixed, exact, m, lim, d)
	if err != nil || kept == nil {
		return err
	}
	if str {
		if len(kept) != 1 || kept[0].edit == nil {
			return contextExceeded(d.InputTokens+d.TrimmedTokens, lim.MaxInputTokens, lim.Trim)
		}
		ed.replace(in.Value, kept[0].edit) // the one message, shortened
		return nil
	}
	ed.replace(in.Value, encodeMessages(arr, kept))
	return nil
}

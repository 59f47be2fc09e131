package openai

import (
	"bytes"
	"unicode/utf8"
)

var (
	doneData        = []byte("[DONE]")
	keyFinishReason = []byte(`"finish_reason"`)
	keyContent      = []byte(`"content"`)
	keyText         = []byte(`"text"`)
	keyReasoning    = []byte(`"reasoning_content"`)
	// keyReasoningVLLM is vLLM's newer name for a delta's thinking.
	keyReasoningVLLM = []byte(`"reasoning"`)
	keyToolCalls     = []byte(`"tool_calls"`)
	keyError         = []byte(`"error"`)
	dataPrefix       = []byte("data:")
)

// EventData returns the payload of an event's first data line, without the
// "data:" prefix, one optional space and the line ending; nil when the event
// has no data line (a comment or a bare event name).
func EventData(ev []byte) []byte { return fieldValue(ev, dataPrefix) }

// fieldValue returns the value of an event's first line of the field
// named by prefix (its name and colon): the rest of the line without one
// optional leading space and the line ending; nil when there is none.
func fieldValue(ev, prefix []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.HasPrefix(line, prefix) {
			d := line[len(prefix):]
			if len(d) > 0 && d[0] == ' ' {
				d = d[1:]
			}
			return d
		}
	}
	return nil
}

// IsDone reports whether the event is the stream terminator data: [DONE].
func IsDone(ev []byte) bool { return IsDoneData(EventData(ev)) }

// IsDoneData is IsDone for an event's data (EventData), already found.
func IsDoneData(data []byte) bool { return bytes.Equal(data, doneData) }

// HasFinishReason reports whether a chunk's finish_reason is set (a string,
// not null).
func HasFinishReason(data []byte) bool { return valueIsString(data, keyFinishReason, false) }

// HasContent reports whether a chunk carries output: non-empty content or
// text, a reasoning model's thinking (reasoning_content, or reasoning as
// newer vLLM names it), or tool calls. The role-only first chunk that
// vLLM and OpenAI send does not count.
func HasContent(data []byte) bool {
	has, _, _ := contentOf(data)
	return has
}

// IsErrorChunk reports whether a chunk is an error object a backend sent
// in-stream (vLLM and TGI do so on failures after the first byte).
func IsErrorChunk(data []byte) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	return bytes.HasPrefix(data[i:], keyError)
}

// nextValue finds the next occurrence of key (a quoted name) in data that
// is followed by a colon, and returns data from that key's value on; nil
// when there is none.
//
// It searches for the name without its opening quote, and checks the
// quote before it: bytes.Index finds a pattern by its first byte, and a
// quote, the commonest byte of JSON, would stop it at every string. For
// names whose first letter is common in a chunk too ("c" of content in a
// chunk of "chatcmpl", "chat.completion.chunk", "choices"; "t" and "r")
// it leaves that letter out of the search as well: HasContent on a vLLM
// chunk 93 → 42 ns.
func nextValue(data, key []byte) []byte {
	skip := 1
	if len(key) > 3 && (key[1] == 'c' || key[1] == 't' || key[1] == 'r') {
		skip = 2
	}
	name := key[skip:]
	for off := 0; ; {
		i := bytes.Index(data[off:], name)
		if i < 0 {
			return nil
		}
		i += off
		off = i + len(name)
		if i < skip || data[i-skip] != '"' || skip == 2 && data[i-1] != key[1] {
			continue
		}
		if j := skipSpace(data, off); j < len(data) && data[j] == ':' {
			return data[skipSpace(data, j+1):]
		}
	}
}

// valueIsString reports whether some occurrence of key in data is followed
// by a string value (non-empty when nonEmpty is set).
func valueIsString(data, key []byte, nonEmpty bool) bool {
	for v := nextValue(data, key); v != nil; v = nextValue(v, key) {
		if len(v) > 0 && v[0] == '"' && (!nonEmpty || len(v) > 1 && v[1] != '"') {
			return true
		}
	}
	return false
}

// AppendContent appends to dst the answer's text an event's data carries:
// the decoded string values of "content" and "text" (chat and legacy
// completion; a reasoning model's thinking is not the answer). It reads
// one choice per
// chunk, as streams with n=1 have. Data that is not a chunk appends
// nothing. Bytes that are not UTF-8 read as U+FFFD, one per byte, as a
// client's JSON decoder reads them. It does not allocate when the values
// have no escapes.
func AppendContent(dst, data []byte) []byte {
	for _, key := range [...][]byte{keyContent, keyText} {
		dst = appendStringValues(dst, data, key)
	}
	return dst
}

// FinishReason returns the string value of "finish_reason" in data, raw
// (finish reasons carry no escapes), or nil when it is absent or null.
func FinishReason(data []byte) []byte {
	var last []byte
	for v := nextValue(data, keyFinishReason); v != nil; v = nextValue(v, keyFinishReason) {
		if len(v) > 0 && v[0] == '"' {
			if end := skipString(v, 0); end <= len(v) && end >= 2 {
				last = v[1 : end-1]
			}
		}
	}
	return last
}

func appendStringValues(dst, data, key []byte) []byte {
	for v := nextValue(data, key); v != nil; v = nextValue(v, key) {
		if len(v) == 0 || v[0] != '"' {
			continue
		}
		end := skipString(v, 0)
		if end > len(v) || end < 2 {
			return dst
		}
		q := v[:end]
		if bytes.IndexByte(q, '\\') < 0 {
			dst = appendUTF8(dst, q[1:len(q)-1])
		} else if s, err := unquote(q); err == nil {
			dst = append(dst, s...)
		}
	}
	return dst
}

// appendUTF8 appends s to dst with each byte that is not part of a valid
// UTF-8 sequence replaced by U+FFFD, as encoding/json decodes a string.
func appendUTF8(dst, s []byte) []byte {
	if utf8.Valid(s) {
		return append(dst, s...)
	}
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

var keyUsage = []byte(`"usage"`)

// UsageOf returns the usage object of a chunk or response body, and
// whether there was one (null is none). It decodes only that object.
func UsageOf(data []byte) (Usage, bool) {
	for v := nextValue(data, keyUsage); v != nil; v = nextValue(v, keyUsage) {
		if len(v) == 0 || v[0] != '{' {
			continue
		}
		end := skipValue(v, 0)
		if end > len(v) {
			return Usage{}, false
		}
		return decodeUsage(v[:end])
	}
	return Usage{}, false
}

// decodeUsage reads the token counts of a usage object: its three
// integer fields, found by key without reflection (a stream's usage chunk
// is read at the rate of requests, a plain body's at the rate of bodies).
func decodeUsage(b []byte) (Usage, bool) {
	if !validJSON(b) {
		return Usage{}, false
	}
	var u Usage
	var ok bool
	if u.PromptTokens, ok = leadingInt(nextValue(b, keyPromptTokens)); !ok {
		u.PromptTokens = intField(b, keyInputTokens) // the Responses API's names
	}
	if u.CompletionTokens, ok = leadingInt(nextValue(b, keyCompletionTokens)); !ok {
		u.CompletionTokens = intField(b, keyOutputTokens)
	}
	u.TotalTokens = intField(b, keyTotalTokens)
	u.CompletionTokensDetails.ReasoningTokens = intField(b, keyReasoningTokens)
	if v, ok := leadingInt(nextValue(b, keyCachedTokens)); ok {
		u.PromptTokensDetails.CachedTokens, u.HasDetails = v, true
	}
	return u, true
}

var (
	keyPromptTokens     = []byte(`"prompt_tokens"`)
	keyCompletionTokens = []byte(`"completion_tokens"`)
	keyTotalTokens      = []byte(`"total_tokens"`)
	keyCachedTokens     = []byte(`"cached_tokens"`)
	keyInputTokens      = []byte(`"input_tokens"`)
	keyOutputTokens     = []byte(`"output_tokens"`)
	keyReasoningTokens  = []byte(`"reasoning_tokens"`)
)

// intField returns the non-negative integer value of key at the object's
// top level or below (usage objects nest details, whose keys differ), or 0.
func intField(b, key []byte) int {
	n, _ := leadingInt(nextValue(b, key))
	return n
}

// MaxOutput returns the top-level max_completion_tokens of the body e was
// scanned from, else its max_tokens, else its max_output_tokens (the
// Responses API's), or 0 when none is a number. It
// reads the members' spans: no other pass over the body.
func (e Envelope) MaxOutput(body []byte) int {
	for _, f := range [...]Field{e.MaxCompletionTokens, e.MaxTokens, e.MaxOutputTokens} {
		if n, ok := leadingInt(f.Of(body)); ok {
			return n
		}
	}
	return 0
}

// leadingInt reads the digits v starts with, if it starts with one.
func leadingInt(v []byte) (int, bool) {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' || n > 1<<40 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

var keyChoices = []byte(`"choices"`)

// IsUsageOnly reports whether a chunk is the usage chunk that
// stream_options.include_usage adds: an empty choices array and a usage.
func IsUsageOnly(data []byte) bool {
	v := nextValue(data, keyChoices)
	if len(v) == 0 || v[0] != '[' {
		return false
	}
	if i := skipSpace(v, 1); i >= len(v) || v[i] != ']' {
		return false
	}
	_, ok := UsageOf(data)
	return ok
}

package openai

import "bytes"

var (
	doneData        = []byte("[DONE]")
	keyFinishReason = []byte(`"finish_reason"`)
	keyContent      = []byte(`"content"`)
	keyText         = []byte(`"text"`)
	keyReasoning    = []byte(`"reasoning_content"`)
	keyToolCalls    = []byte(`"tool_calls"`)
	keyError        = []byte(`"error"`)
	dataPrefix      = []byte("data:")
)

// EventData returns the payload of an event's first data line, without the
// "data:" prefix, one optional space and the line ending; nil when the event
// has no data line (a comment or a bare event name).
func EventData(ev []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.HasPrefix(line, dataPrefix) {
			d := line[len(dataPrefix):]
			if len(d) > 0 && d[0] == ' ' {
				d = d[1:]
			}
			return d
		}
	}
	return nil
}

// IsDone reports whether the event is the stream terminator data: [DONE].
func IsDone(ev []byte) bool { return bytes.Equal(EventData(ev), doneData) }

// HasFinishReason reports whether a chunk's finish_reason is set (a string,
// not null).
func HasFinishReason(data []byte) bool { return valueIsString(data, keyFinishReason, false) }

// HasContent reports whether a chunk carries output: non-empty content or
// text, reasoning content, or tool calls. The role-only first chunk that
// vLLM and OpenAI send does not count.
func HasContent(data []byte) bool {
	return valueIsString(data, keyContent, true) || valueIsString(data, keyText, true) ||
		valueIsString(data, keyReasoning, true) || bytes.Contains(data, keyToolCalls)
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

// valueIsString reports whether some occurrence of key in data is followed
// by a string value (non-empty when nonEmpty is set).
func valueIsString(data, key []byte, nonEmpty bool) bool {
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return false
		}
		data = data[i+len(key):]
		j := skipSpace(data, 0)
		if j < len(data) && data[j] == ':' {
			j = skipSpace(data, j+1)
			if j < len(data) && data[j] == '"' && (!nonEmpty || (j+1 < len(data) && data[j+1] != '"')) {
				return true
			}
		}
	}
}

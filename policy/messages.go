package policy

import (
	"fmt"

	"github.com/infergate/infergate/openai"
)

// message is one element of a chat request's messages, read without
// decoding the rest of the body: its bytes, its role, what it costs, and
// the tool-call ids that tie it to other messages.
type message struct {
	raw    openai.Span // the element, within the messages array
	role   string
	tokens int
	// calls are the ids of an assistant message's tool_calls; callID is a
	// tool message's tool_call_id.
	calls  []string
	callID string
	// text is the content's JSON string, within the messages array, when
	// the content is a string (truncate_middle shortens it); textLen its
	// decoded length in bytes.
	text    openai.Span
	textLen int
	// contentTokens is what the text counted.
	contentTokens int
	// edit is the shortened content, JSON-quoted, that replaces text.
	edit []byte
	// item is a Responses input item that is not a message (a function
	// call or its output, thinking); itemCallID its call_id.
	item       bool
	itemCallID string
}

// maxMessages bounds the messages of a request the policy reads.
const maxMessages = 100000

// invalid is a malformed message: 400, naming the field.
func invalid(format string, a ...any) error {
	return &Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "invalid_value", Message: fmt.Sprintf(format, a...)}
}

// parseMessages reads the messages array arr (valid JSON) and counts each
// message with c.
func parseMessages(arr []byte, c *counter) ([]message, error) {
	var msgs []message
	var err error
	ok := openai.EachElement(arr, func(s openai.Span) bool {
		i := len(msgs)
		if i >= maxMessages {
			err = invalid("messages: more than %d messages", maxMessages)
			return false
		}
		m, e := parseMessage(arr, s, i, c)
		if e != nil {
			err = e
			return false
		}
		msgs = append(msgs, m)
		return true
	})
	if !ok {
		return nil, invalid("messages: must be an array of message objects")
	}
	if err != nil {
		return nil, err
	}
	return msgs, nil
}

// parseMessage reads messages[i], at span s of arr.
func parseMessage(arr []byte, s openai.Span, i int, c *counter) (message, error) {
	m := message{raw: s}
	b := arr[s.Start:s.End]
	// A message counted before is read for its structure only.
	var h1, h2 uint64
	if c.cache != nil {
		h1, h2 = c.cache.key(b)
		if tokens, content, ok := c.cache.get(h1, h2); ok {
			m, err := parseMessage(arr, s, i, c.structureOnly())
			m.tokens, m.contentTokens = tokens, content
			return m, err
		}
	}
	var err error
	haveRole := false
	isObject := openai.EachMember(b, func(key []byte, f openai.Field) bool {
		v := b[f.Value.Start:f.Value.End]
		switch {
		case openai.KeyIs(key, "role"):
			if v[0] != '"' {
				err = invalid("messages[%d].role: must be a string", i)
				return false
			}
			m.role, err = openai.Unquote(v)
			if err != nil || m.role == "" || len(m.role) > 64 {
				err = invalid("messages[%d].role: must be a role name such as system, user, assistant or tool", i)
				return false
			}
			haveRole = true
			m.tokens += c.text(m.role)
		case openai.KeyIs(key, "content"):
			n, text, e := contentTokens(v, i, c)
			if e != nil {
				err = e
				return false
			}
			m.tokens += n
			if v[0] == '"' {
				m.contentTokens = n
				m.text = openai.Span{Start: s.Start + f.Value.Start, End: s.Start + f.Value.End}
				m.textLen = len(text)
			}
		case openai.KeyIs(key, "name"):
			name, e := stringValue(v)
			if e != nil {
				err = invalid("messages[%d].name: must be a string", i)
				return false
			}
			m.tokens += c.text(name) + c.tpl.perName
		case openai.KeyIs(key, "tool_call_id"):
			id, e := stringValue(v)
			if e != nil {
				err = invalid("messages[%d].tool_call_id: must be a string", i)
				return false
			}
			m.callID = id
			m.tokens += c.text(id)
		case openai.KeyIs(key, "tool_calls"):
			calls, n, e := toolCalls(v, i, c)
			if e != nil {
				err = e
				return false
			}
			m.calls = calls
			m.tokens += n
		case openai.KeyIs(key, "function_call"):
			// The legacy single call: its name and arguments.
			m.tokens += c.json(v)
		case openai.KeyIs(key, "type"):
			// A Responses input item other than a message: a function
			// call (the assistant's, tied to its output by call_id), its
			// output (the tool's), or earlier thinking.
			switch string(v) {
			case `"function_call"`, `"reasoning"`:
				m.role, haveRole = "assistant", true
				m.item = true
			case `"function_call_output"`:
				m.role, haveRole = "tool", true
				m.item = true
			}
		case openai.KeyIs(key, "call_id"):
			id, e := stringValue(v)
			if e != nil {
				err = invalid("input[%d].call_id: must be a string", i)
				return false
			}
			m.itemCallID = id
		case openai.KeyIs(key, "arguments"), openai.KeyIs(key, "output"), openai.KeyIs(key, "summary"):
			if v[0] == '"' {
				t, _ := stringValue(v)
				m.tokens += c.text(t)
			} else {
				m.tokens += c.json(v)
			}
		}
		return true
	})
	if m.item {
		// call_id ties a call to its output the way tool_calls' ids and
		// tool_call_id do.
		if m.role == "tool" {
			m.callID = m.itemCallID
		} else if m.itemCallID != "" {
			m.calls = append(m.calls, m.itemCallID)
		}
	}
	if !isObject {
		return m, invalid("messages[%d]: must be an object with a role", i)
	}
	if err != nil {
		return m, err
	}
	if !haveRole {
		return m, invalid("messages[%d].role: missing", i)
	}
	m.tokens += c.tpl.perMessage
	if c.cache != nil {
		c.cache.put(h1, h2, m.tokens, m.contentTokens)
	}
	return m, nil
}

func stringValue(v []byte) (string, error) {
	if v[0] != '"' {
		return "", openai.ErrInvalidJSON
	}
	return openai.Unquote(v)
}

// contentTokens counts a message's content: a string, an array of content
// parts, or null. Text parts count their text; every other part (images,
// audio, files) counts a fixed estimate, since the model's processor
// decides its real size (OpenAI's low-detail image is 85 tokens).
func contentTokens(v []byte, i int, c *counter) (int, string, error) {
	switch v[0] {
	case '"':
		s, err := openai.Unquote(v)
		if err != nil {
			return 0, "", invalid("messages[%d].content: %v", i, err)
		}
		return c.text(s), s, nil
	case 'n':
		return 0, "", nil
	case '[':
		n := 0
		var err error
		j := 0
		openai.EachElement(v, func(s openai.Span) bool {
			part := v[s.Start:s.End]
			var typ, text string
			isObj := openai.EachMember(part, func(key []byte, f openai.Field) bool {
				pv := part[f.Value.Start:f.Value.End]
				switch {
				case openai.KeyIs(key, "type"):
					typ, _ = stringValue(pv)
				case openai.KeyIs(key, "text"):
					t, e := stringValue(pv)
					if e != nil {
						err = invalid("messages[%d].content[%d].text: must be a string", i, j)
						return false
					}
					text = t
				}
				return true
			})
			if !isObj {
				err = invalid("messages[%d].content[%d]: must be a content part object", i, j)
			}
			if err != nil {
				return false
			}
			// text (chat), input_text and output_text (the Responses API).
			if typ == "text" || typ == "input_text" || typ == "output_text" || typ == "" && text != "" {
				n += c.text(text)
			} else {
				n += nonTextPartTokens
			}
			j++
			return true
		})
		return n, "", err
	}
	return 0, "", invalid("messages[%d].content: must be a string, an array of content parts or null", i)
}

// nonTextPartTokens is the estimate of an image, audio or file part.
const nonTextPartTokens = 85

// toolCalls reads an assistant message's tool_calls: their ids, and the
// tokens of their function names and arguments.
func toolCalls(v []byte, i int, c *counter) ([]string, int, error) {
	if v[0] == 'n' {
		return nil, 0, nil
	}
	var ids []string
	n := 0
	var err error
	j := 0
	isArr := openai.EachElement(v, func(s openai.Span) bool {
		call := v[s.Start:s.End]
		isObj := openai.EachMember(call, func(key []byte, f openai.Field) bool {
			cv := call[f.Value.Start:f.Value.End]
			switch {
			case openai.KeyIs(key, "id"):
				id, e := stringValue(cv)
				if e != nil {
					err = invalid("messages[%d].tool_calls[%d].id: must be a string", i, j)
					return false
				}
				ids = append(ids, id)
			case openai.KeyIs(key, "function"):
				n += c.json(cv)
			}
			return true
		})
		if !isObj && err == nil {
			err = invalid("messages[%d].tool_calls[%d]: must be an object", i, j)
		}
		j++
		return err == nil
	})
	if !isArr {
		return nil, 0, invalid("messages[%d].tool_calls: must be an array", i)
	}
	return ids, n, err
}

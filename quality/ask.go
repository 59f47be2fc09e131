package quality

import (
	"bytes"
	"strconv"

	"github.com/infergate/infergate/openai"
)

// Ask is what a request asked of its answer's form.
type Ask struct {
	// JSON is set when response_format asks for JSON (json_object or
	// json_schema).
	JSON bool
	// Schema is response_format.json_schema.schema, when given (a copy).
	Schema []byte
	// MaxOutputTokens is the Responses API's max_output_tokens, 0 when
	// not set: an answer whose output tokens reach it is truncated
	// (Truncated). Chat's max_tokens is not read: a chat answer is
	// judged by its finish_reason.
	MaxOutputTokens int
}

// AskOf reads a request body's response_format (chat and completions)
// or text.format and max_output_tokens (the Responses API), in one pass
// over the body.
func AskOf(body []byte) Ask {
	var a Ask
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		v := f.Of(body)
		switch {
		case openai.KeyIs(key, "response_format"):
			a.format(v, true)
		case openai.KeyIs(key, "max_output_tokens"):
			// A bound that is not a positive integer bounds nothing.
			if n, err := strconv.Atoi(string(v)); err == nil && n > 0 {
				a.MaxOutputTokens = n
			}
		case openai.KeyIs(key, "text"):
			openai.EachMember(v, func(k []byte, mf openai.Field) bool {
				if !openai.KeyIs(k, "format") {
					return true
				}
				a.format(mf.Of(v), false)
				return false
			})
		}
		return true
	})
	if !a.JSON {
		a.Schema = nil
	}
	return a
}

// format reads a format object: its type, and its schema, which
// response_format nests in json_schema ({"type":"json_schema",
// "json_schema":{"name":...,"schema":{...}}}) and text.format holds beside
// the type ({"type":"json_schema","name":...,"schema":{...}}).
func (a *Ask) format(obj []byte, nested bool) {
	openai.EachMember(obj, func(k []byte, f openai.Field) bool {
		v := f.Of(obj)
		switch {
		case openai.KeyIs(k, "type"):
			t, _ := openai.Unquote(v)
			a.JSON = t == "json_object" || t == "json_schema"
		case nested && openai.KeyIs(k, "json_schema"):
			openai.EachMember(v, func(sk []byte, sf openai.Field) bool {
				if openai.KeyIs(sk, "schema") {
					a.Schema = bytes.Clone(sf.Of(v))
				}
				return true
			})
		case !nested && openai.KeyIs(k, "schema"):
			a.Schema = bytes.Clone(v)
		}
		return true
	})
}

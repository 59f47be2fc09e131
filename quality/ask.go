package quality

import (
	"bytes"

	"github.com/infergate/infergate/openai"
)

// Ask is what a request asked of its answer's form.
type Ask struct {
	// JSON is set when response_format asks for JSON (json_object or
	// json_schema).
	JSON bool
	// Schema is response_format.json_schema.schema, when given (a copy).
	Schema []byte
}

// AskOf reads a chat or completion request body's response_format, in
// one pass over the body.
func AskOf(body []byte) Ask {
	var a Ask
	openai.EachMember(body, func(key []byte, f openai.Field) bool {
		if !openai.KeyIs(key, "response_format") {
			return true
		}
		rf := f.Of(body)
		openai.EachMember(rf, func(k []byte, mf openai.Field) bool {
			switch {
			case openai.KeyIs(k, "type"):
				t, _ := openai.Unquote(mf.Of(rf))
				a.JSON = t == "json_object" || t == "json_schema"
			case openai.KeyIs(k, "json_schema"):
				js := mf.Of(rf)
				openai.EachMember(js, func(sk []byte, sf openai.Field) bool {
					if openai.KeyIs(sk, "schema") {
						a.Schema = bytes.Clone(sf.Of(js))
					}
					return true
				})
			}
			return true
		})
		return false
	})
	if !a.JSON {
		a.Schema = nil
	}
	return a
}

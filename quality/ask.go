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
		rf := f.Of(body)
		if openai.KeyIs(key, "text") {
			// The Responses API's text.format: {"type":"json_schema",
			// "name":...,"schema":{...}}, the schema beside the type.
			openai.EachMember(rf, func(k []byte, mf openai.Field) bool {
				if !openai.KeyIs(k, "format") {
					return true
				}
				format := mf.Of(rf)
				openai.EachMember(format, func(fk []byte, ff openai.Field) bool {
					switch {
					case openai.KeyIs(fk, "type"):
						t, _ := openai.Unquote(ff.Of(format))
						a.JSON = t == "json_object" || t == "json_schema"
					case openai.KeyIs(fk, "schema"):
						a.Schema = bytes.Clone(ff.Of(format))
					}
					return true
				})
				return false
			})
			return true
		}
		if !openai.KeyIs(key, "response_format") {
			return true
		}
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

package quality

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON schemas of requests (response_format json_schema): an answer that
// is JSON but does not fit the schema the client gave is a quality
// failure of its own. Schemas come from clients, so they are compiled
// without any loader: a $ref to a file or URL fails the schema instead
// of reading it.

// noLoader refuses every $ref outside the schema itself.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("quality: schema %s: references outside the schema are not followed", url)
}

// Bounds of a schema a client sends: larger or deeper ones are treated
// as not compiling (the answer is judged as JSON, not against them).
const (
	maxSchemaBytes = 64 << 10
	maxSchemaDepth = 64 // objects and arrays within each other
	maxSchemaRefs  = 24 // $ref, $dynamicRef and $recursiveRef keys
)

var refKeys = [][]byte{[]byte(`"$ref"`), []byte(`"$dynamicRef"`), []byte(`"$recursiveRef"`)}

// refCount counts raw's reference keys (and any string spelled as one).
func refCount(raw []byte) int {
	n := 0
	for _, k := range refKeys {
		n += bytes.Count(raw, k)
	}
	return n
}

// jsonDepth is how deep raw's objects and arrays nest (strings skipped);
// it stops counting past maxSchemaDepth.
func jsonDepth(raw []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > maxSchemaDepth {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// schemaCache holds compiled schemas by the SHA-256 of their bytes, at
// most 64 (a nil entry: the schema does not compile).
type schemaCache map[[32]byte]*jsonschema.Schema

var errBadSchema = errors.New("quality: the schema does not compile")

// schema returns raw compiled, from the cache when it is there.
func (j *Judge) schema(raw []byte) (*jsonschema.Schema, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.schemas.get(raw)
}

func (c schemaCache) get(raw []byte) (*jsonschema.Schema, error) {
	key := sha256.Sum256(raw)
	if s, ok := c[key]; ok {
		if s == nil {
			return nil, errBadSchema
		}
		return s, nil
	}
	if len(c) >= 64 {
		clear(c)
	}
	if len(raw) > maxSchemaBytes || jsonDepth(raw) > maxSchemaDepth || refCount(raw) > maxSchemaRefs {
		// Compiling grows faster than the nesting (a 20 KB schema 1,000
		// deep took seconds), and references unfold: 30 definitions each
		// an anyOf of the next two took 10 s to validate {}, 40 would
		// take hours, holding the judge.
		c[key] = nil
		return nil, errBadSchema
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		c[key] = nil
		return nil, errBadSchema
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(noLoader{})
	if err := comp.AddResource("request.json", doc); err != nil {
		c[key] = nil
		return nil, errBadSchema
	}
	s, err := comp.Compile("request.json")
	if err != nil {
		c[key] = nil
		return nil, errBadSchema
	}
	c[key] = s
	return s, nil
}

// fits reports whether text is JSON valid against the schema.
func fits(s *jsonschema.Schema, text []byte) bool {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	return err == nil && s.Validate(v) == nil
}

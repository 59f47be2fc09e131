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

package openai

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Sentinel errors of request scanning, tested with errors.Is.
var (
	ErrInvalidJSON    = errors.New("openai: invalid JSON")
	ErrNotObject      = errors.New("openai: request body is not a JSON object")
	ErrMissingModel   = errors.New("openai: missing required field model")
	ErrModelNotString = errors.New("openai: field model must be a string")
	ErrModelNotUTF8   = errors.New("openai: field model must be valid UTF-8")
	ErrStreamNotBool  = errors.New("openai: field stream must be a boolean")
)

// Envelope is what the gateway needs from a request body to route it,
// without decoding the rest: the model, whether the response streams, and
// where the model's value sits in the body so it can be rewritten in place.
type Envelope struct {
	Model  string
	Stream bool
	// ModelStart and ModelEnd delimit the model's JSON value, quotes
	// included: body[ModelStart:ModelEnd] is `"name"`.
	ModelStart, ModelEnd int
	// The fields the policy reads or rewrites, each the span of its whole
	// member (key, colon and value, from the key's opening quote to the
	// value's end) and of its value; a zero Span is an absent field.
	Messages, Tools, MaxTokens, MaxCompletionTokens, StreamOptions Field
	// Prompt is a completion's prompt, read for prefix routing (the
	// policy does not act on it, so a duplicate is not flagged).
	Prompt Field
	// Input, Instructions, MaxOutputTokens and PreviousResponseID are the
	// Responses API's (responses.go): its input (a string or an array of
	// items), its system text, its output cap, and the stored response it
	// continues.
	Input, Instructions, MaxOutputTokens, PreviousResponseID Field
	// PromptCacheKey (chat completions and Responses), Conversation
	// (Responses: a string id or an object with an id) and User name the
	// conversation a request belongs to, read for session affinity
	// (SessionKeys); the last copy of a duplicate wins.
	PromptCacheKey, Conversation, User Field
	// Duplicate names the first of those members that the body has more
	// than once, "" when none: parsers disagree on which copy counts, so
	// a policy acting on it must not guess.
	Duplicate string
}

// ContinuesResponse reports whether the Responses request body e was
// scanned from continues a stored response (previous_response_id set, not
// null): the server prepends a history the body does not hold.
func (e Envelope) ContinuesResponse(body []byte) bool {
	v := e.PreviousResponseID.Of(body)
	return v != nil && string(v) != "null"
}

// Span is a range of a body: b[Start:End].
type Span struct{ Start, End int }

// Field is a top-level member of a request body: Member spans `"key": value`,
// Value the value alone. A zero Field is a member the body does not have.
type Field struct{ Member, Value Span }

// Present reports whether the body has the member.
func (f Field) Present() bool { return f.Member.End > 0 }

// Of returns the member's value in body, nil when absent.
func (f Field) Of(body []byte) []byte {
	if !f.Present() {
		return nil
	}
	return body[f.Value.Start:f.Value.End]
}

// ScanRequest validates body as JSON and reads the top-level model and
// stream fields. A malformed body gives an error wrapping ErrInvalidJSON
// that says at which byte it broke. Later duplicates of a key win, as in
// encoding/json and Python's json module.
func ScanRequest(body []byte) (Envelope, error) {
	// (validJSON: FuzzScanRequest holds its verdict to json.Valid's.)
	var env Envelope
	if !validJSON(body) {
		var v any
		err := json.Unmarshal(body, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// Offset counts the bytes read, the bad one included.
			return env, fmt.Errorf("%w at byte %d: %s", ErrInvalidJSON, max(se.Offset-1, 0), se.Error())
		}
		return env, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	haveModel := false
	var err error
	isObject := EachMember(body, func(key []byte, f Field) bool {
		val := f.Of(body)
		switch {
		case keyIs(key, "model"):
			if val[0] != '"' {
				err = ErrModelNotString
				return false
			}
			m, e := unquote(val)
			if e != nil {
				err = fmt.Errorf("%w: %v", ErrInvalidJSON, e)
				return false
			}
			// A name that is not UTF-8 would be a broken log field and
			// metric label; encoding/json would silently alter it.
			if !utf8.ValidString(m) {
				err = ErrModelNotUTF8
				return false
			}
			env.Model, env.ModelStart, env.ModelEnd, haveModel = m, f.Value.Start, f.Value.End, true
		case keyIs(key, "messages"):
			env.set(&env.Messages, f, "messages")
		case keyIs(key, "tools"):
			env.set(&env.Tools, f, "tools")
		case keyIs(key, "prompt"):
			env.Prompt = f
		case keyIs(key, "max_tokens"):
			env.set(&env.MaxTokens, f, "max_tokens")
		case keyIs(key, "max_completion_tokens"):
			env.set(&env.MaxCompletionTokens, f, "max_completion_tokens")
		case keyIs(key, "stream_options"):
			env.set(&env.StreamOptions, f, "stream_options")
		case keyIs(key, "input"):
			env.set(&env.Input, f, "input")
		case keyIs(key, "instructions"):
			env.set(&env.Instructions, f, "instructions")
		case keyIs(key, "max_output_tokens"):
			env.set(&env.MaxOutputTokens, f, "max_output_tokens")
		case keyIs(key, "previous_response_id"):
			env.set(&env.PreviousResponseID, f, "previous_response_id")
		case keyIs(key, "prompt_cache_key"):
			env.PromptCacheKey = f
		case keyIs(key, "conversation"):
			env.Conversation = f
		case keyIs(key, "user"):
			env.User = f
		case keyIs(key, "stream"):
			switch string(val) {
			case "true":
				env.Stream = true
			case "false", "null":
				env.Stream = false
			default:
				err = ErrStreamNotBool
				return false
			}
		}
		return true
	})
	if !isObject {
		return env, ErrNotObject
	}
	if err != nil {
		return env, err
	}
	if !haveModel || env.Model == "" {
		return env, ErrMissingModel
	}
	return env, nil
}

// set records a member, noting a duplicate.
func (env *Envelope) set(dst *Field, f Field, name string) {
	if dst.Present() && env.Duplicate == "" {
		env.Duplicate = name
	}
	*dst = f
}

// RewriteModel returns a copy of body with the model value replaced by
// model. env must come from ScanRequest of the same body.
func RewriteModel(body []byte, env Envelope, model string) []byte {
	q, _ := json.Marshal(model) // a string always marshals
	out := make([]byte, 0, len(body)-(env.ModelEnd-env.ModelStart)+len(q))
	out = append(out, body[:env.ModelStart]...)
	out = append(out, q...)
	return append(out, body[env.ModelEnd:]...)
}

// keyIs reports whether the quoted JSON string key equals name; keys with
// escapes are compared after unquoting.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	for _, c := range key {
		if c == '\\' {
			s, err := unquote(key)
			return err == nil && s == name
		}
	}
	return false
}

func unquote(q []byte) (string, error) {
	plain := true
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// The skip functions walk JSON that json.Valid accepted, so they do not
// re-check syntax; each returns the index just past what it skipped.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) int {
	i++ // opening quote
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		// The quote closes the string unless an odd run of backslashes
		// escapes it (a run cannot reach back past an earlier quote).
		n := 0
		for p := q - 1; p >= i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return i
}

func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b) // a member with no value: not valid JSON, not a panic
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// EachMember calls fn for every member of the JSON object obj, in order,
// with its key (quoted, as written) and its spans within obj, until fn
// returns false. obj must be valid JSON (a value ScanRequest's body
// holds); it reports false when obj is not an object.
func EachMember(obj []byte, fn func(key []byte, f Field) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			return true
		}
		if obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
		keyStart := i
		i = skipString(obj, i)
		key := obj[keyStart:i]
		i = skipSpace(obj, i)
		i = skipSpace(obj, i+1) // the colon
		valStart := i
		i = skipValue(obj, i)
		if !fn(key, Field{Member: Span{keyStart, i}, Value: Span{valStart, i}}) {
			return true
		}
	}
}

// EachElement calls fn with the span of every element of the JSON array
// arr, in order, until fn returns false. arr must be valid JSON; it
// reports false when arr is not an array.
func EachElement(arr []byte, fn func(s Span) bool) bool {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i++
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return true
		}
		if arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
		start := i
		i = skipValue(arr, i)
		if !fn(Span{start, i}) {
			return true
		}
	}
}

// KeyIs reports whether a quoted JSON key equals name.
func KeyIs(key []byte, name string) bool { return keyIs(key, name) }

// Unquote decodes a JSON string value, quotes included.
func Unquote(q []byte) (string, error) {
	if len(q) < 2 || q[0] != '"' {
		return "", ErrInvalidJSON
	}
	return unquote(q)
}

// SetMember returns a copy of the JSON object body with the top-level
// member name set to value (raw JSON): replaced where the body has it
// (its last copy), else added at the end. Every other byte is kept.
func SetMember(body []byte, name string, value []byte) []byte {
	var at Field
	EachMember(body, func(key []byte, f Field) bool {
		if keyIs(key, name) {
			at = f
		}
		return true
	})
	if at.Present() {
		out := make([]byte, 0, len(body)-(at.Value.End-at.Value.Start)+len(value))
		out = append(out, body[:at.Value.Start]...)
		out = append(out, value...)
		return append(out, body[at.Value.End:]...)
	}
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return body
	}
	empty := true
	EachMember(body, func([]byte, Field) bool { empty = false; return false })
	out := make([]byte, 0, len(body)+len(name)+len(value)+4)
	out = append(out, body[:end]...)
	if !empty {
		out = append(out, ',')
	}
	out = AppendJSONString(out, name)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, body[end:]...)
}

// validJSON is json.Valid, three times faster on a valid body: fastjson's
// validator answers first, and only a body it refuses goes on to
// encoding/json, whose verdict then stands (fastjson refuses nesting
// deeper than 300, which encoding/json accepts). fastjson lets a control
// character through inside a string, which JSON forbids, so a body with
// any byte below 0x20 goes to encoding/json alone (outside strings only
// whitespace may be one: pretty-printed bodies take that path).
// FuzzScanRequest holds the verdict to json.Valid's.
//
// encoding/json also refuses nesting deeper than maxJSONDepth, where
// fastjson's validator has no bound: a body with more opening brackets
// than that (counted in strings too, which only errs towards asking
// encoding/json) goes to encoding/json as well.
func validJSON(b []byte) bool {
	if hasControl(b) || fastjson.ValidateBytes(b) != nil {
		return json.Valid(b)
	}
	if bytes.Count(b, openArray)+bytes.Count(b, openObject) > maxJSONDepth {
		return json.Valid(b)
	}
	return true
}

// maxJSONDepth is encoding/json's bound on nesting.
const maxJSONDepth = 10000

var openArray, openObject = []byte{'['}, []byte{'{'}

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time: (x - 0x20 in each byte) & ^x has a byte's top bit set where that
// byte is below 0x20 (a lower byte's borrow can only add false positives
// above a true one, never a false one alone).
func hasControl(b []byte) bool {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x-lo)&^x&hi != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

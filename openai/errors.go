package openai

import (
	"encoding/json"
)

// Error types as OpenAI reports them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeTimeout        = "timeout_error"
	TypeUnavailable    = "service_unavailable_error"
)

// Error is the body of an OpenAI-style error: {"error":{...}}.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// UnmarshalJSON reads an error as OpenAI and the servers write it: code a
// string (OpenAI's), an integer (llama.cpp's and vLLM's, the HTTP status)
// or null, read as a string either way (400 as "400"); a code or param of
// another kind is left unset rather than failing the whole body.
func (e *Error) UnmarshalJSON(b []byte) error {
	var raw struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*e = Error{Message: raw.Message, Type: raw.Type, Param: scalarString(raw.Param), Code: scalarString(raw.Code)}
	return nil
}

// scalarString is a JSON string's value or a number's text; nil for null,
// absence or any other kind.
func scalarString(v json.RawMessage) *string {
	var s string
	if len(v) == 0 || v[0] != '"' && (v[0] < '0' || v[0] > '9') && v[0] != '-' {
		return nil // null, absent, or not a scalar of either kind
	}
	if json.Unmarshal(v, &s) == nil {
		return &s
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		s = n.String()
		return &s
	}
	return nil
}

type errorEnvelope struct {
	Error Error `json:"error"`
}

// AppendError appends {"error":{"message":msg,"type":typ,"param":null,"code":code}}
// to dst. An empty code is written as null.
func AppendError(dst []byte, typ, code, msg string) []byte {
	e := errorEnvelope{Error: Error{Message: msg, Type: typ}}
	if code != "" {
		e.Error.Code = &code
	}
	b, err := json.Marshal(e)
	if err != nil { // cannot happen: only strings are marshalled
		return append(dst, `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`...)
	}
	return append(dst, b...)
}

// AppendSSEError appends an SSE event carrying an error body, the way a
// stream that fails after its first byte is ended: data: {"error":{...}}.
func AppendSSEError(dst []byte, typ, code, msg string) []byte {
	dst = append(dst, "data: "...)
	dst = AppendError(dst, typ, code, msg)
	return append(dst, "\n\n"...)
}

// TypeForStatus gives the error type OpenAI uses for an HTTP status.
func TypeForStatus(status int) string {
	switch {
	// The numbers, not net/http's names: the wire format's package (and
	// policy, quality, which use it) carries no HTTP library.
	case status == 404:
		return TypeNotFound
	case status == 429:
		return TypeRateLimit
	case status == 504:
		return TypeTimeout
	case status == 503:
		return TypeUnavailable
	case status >= 500:
		return TypeServer
	default:
		return TypeInvalidRequest
	}
}

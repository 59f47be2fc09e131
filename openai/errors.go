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

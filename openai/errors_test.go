package openai

import (
	"encoding/json"
	"testing"
	"time"
)

// TestErrorCodeKinds: an error body is read whatever kind its code is:
// OpenAI's string, llama.cpp's and vLLM's integer status, null; a code of
// another kind is left unset, not a failure of the body.
func TestErrorCodeKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		code       *string
	}{
		{"OpenAI: a string", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`, ptrTo("context_length_exceeded")},
		// llama.cpp's tools/server/server-common.cpp format_error_response.
		{"llama.cpp: the status as an integer", `{"error":{"code":400,"message":"m","type":"invalid_request_error"}}`, ptrTo("400")},
		{"vLLM: the status, param null", `{"error":{"message":"m","type":"BadRequestError","param":null,"code":400}}`, ptrTo("400")},
		{"null", `{"error":{"message":"m","type":"server_error","code":null}}`, nil},
		{"an object", `{"error":{"message":"m","type":"server_error","code":{"x":1},"param":7}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e struct{ Error Error }
			if err := json.Unmarshal([]byte(tc.body), &e); err != nil {
				t.Fatalf("%s: %v", tc.body, err)
			}
			if e.Error.Message != "m" || (e.Error.Code == nil) != (tc.code == nil) || tc.code != nil && *e.Error.Code != *tc.code {
				t.Errorf("%s: read %+v (code %v), want code %v", tc.body, e.Error, e.Error.Code, tc.code)
			}
		})
	}
	// What AppendError writes reads back.
	var e struct{ Error Error }
	if err := json.Unmarshal(AppendError(nil, TypeServer, "no_backend", "m"), &e); err != nil || e.Error.Code == nil || *e.Error.Code != "no_backend" || e.Error.Type != TypeServer {
		t.Errorf("round trip: %+v %v", e.Error, err)
	}
}

// TestFailedResponseWithAnIntegerCode: a whole Responses body that failed
// with an integer error code is still read as failed.
func TestFailedResponseWithAnIntegerCode(t *testing.T) {
	t.Parallel()
	var tl Tally
	tl.Responses = true
	tl.AddBody([]byte(`{"id":"resp_1","object":"response","status":"failed","output":[],"error":{"code":500,"message":"boom"}}`), time.Now())
	if !tl.ErrorEvent {
		t.Error("a failed response with code 500 was not read as failed")
	}
}

func ptrTo(s string) *string { return &s }

func FuzzErrorUnmarshal(f *testing.F) {
	f.Add([]byte(`{"code":400,"message":"m","type":"t"}`))
	f.Add([]byte(`{"code":"x","param":null}`))
	f.Add([]byte(`{"code":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Error
		if json.Unmarshal(b, &e) != nil {
			return
		}
		// What was read writes and reads back the same.
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("%q read as %+v, which does not marshal: %v", b, e, err)
		}
		var back Error
		if err := json.Unmarshal(out, &back); err != nil || back.Message != e.Message || (back.Code == nil) != (e.Code == nil) || back.Code != nil && *back.Code != *e.Code {
			t.Fatalf("%q: %+v then %+v (%v)", b, e, back, err)
		}
	})
}

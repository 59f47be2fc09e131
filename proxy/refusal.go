package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// A backend's admission refusal: vLLM (0.29 and later) with
// --max-num-queued-reqs or --max-num-queued-tokens refuses a request
// before its engine sees it, with 503 and its ErrorResponse,
//
//	{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}
//
// (QueueOverflowError; MaxQueuedTokensError says "The engine has reached
// its prefill token backlog limit. …"), with no Retry-After, and counts it
// in vllm:admission_rejections_total (vllm/exceptions.py; the type is
// HTTPStatus(503).phrase, as create_error_response writes a
// GracefulHTTPError). The backend is healthy, only full: the gateway tries
// another backend before the first byte (within retries.max and the retry
// budget), does not count it against the backend's breaker or ejection,
// and holds the backend back from the next picks of selection load and
// prefix for refusalHold. Only that exact shape is such a refusal: any
// other 503 is a failure, as before.

// refusal is why a backend refused a request at admission.
type refusal uint8

const (
	refusedRequests refusal = iota // its queue holds --max-num-queued-reqs requests
	refusedTokens                  // its prompts to prefill hold --max-num-queued-tokens
	numRefusals
)

var refusalNames = [numRefusals]string{"queued_requests", "queued_tokens"}

func (r refusal) String() string { return refusalNames[r] }

const (
	// maxRefusalBody bounds the body read to recognise a refusal (vLLM's
	// are under 200 bytes); a longer one is not one.
	maxRefusalBody = 1024
	// refusalHold is how long a refusing backend is held back from the
	// picks of selection load and prefix, and the Retry-After of the
	// gateway's own 503 when every backend refused: vLLM says no time,
	// and its queue drains in about a prefill's time.
	refusalHold = time.Second
	// refusedPenalty is the requests a held-back backend counts as
	// carrying beyond its own: picked only when every candidate is held.
	refusedPenalty = 1 << 20
)

// admissionRefusal reports whether up is a backend's admission refusal,
// and why, reading its body without consuming it.
func admissionRefusal(up *upstream) (refusal, bool) {
	if up.Resp.StatusCode() != http.StatusServiceUnavailable || !bytes.HasPrefix(up.Resp.Header.ContentType(), []byte("application/json")) {
		return 0, false
	}
	body, ok := up.Body.Peek(maxRefusalBody)
	if !ok {
		return 0, false
	}
	return parseRefusal(body)
}

// The messages of vLLM's refusals, by reason: the released ones (0.29),
// then those of the PR's first form ("Request queue full.").
var refusalMessages = [...]struct {
	prefix string
	why    refusal
}{
	{"The engine is currently busy and cannot accept new requests.", refusedRequests},
	{"The engine has reached its prefill token backlog limit.", refusedTokens},
	{"Request queue full.", refusedRequests},
	{"Request queue reached max pending tokens limit.", refusedTokens},
}

// parseRefusal recognises vLLM's refusal body: its ErrorResponse with
// type "Service Unavailable", code 503 and one of its refusal messages.
func parseRefusal(body []byte) (refusal, bool) {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if len(body) > maxRefusalBody || json.Unmarshal(body, &e) != nil || e.Error == nil ||
		e.Error.Type != "Service Unavailable" || e.Error.Code != http.StatusServiceUnavailable {
		return 0, false
	}
	for _, m := range refusalMessages {
		if strings.HasPrefix(e.Error.Message, m.prefix) {
			return m.why, true
		}
	}
	return 0, false
}

// refused notes that b refused a request at admission: counted, and held
// back from the next picks until refusalHold from now.
func (b *backend) refused(why refusal, now time.Time) {
	b.refusals[why].Add(1)
	b.refusedUntil.Store(now.Add(refusalHold).UnixNano())
}

// held reports whether b is held back after a refusal at now.
func (b *backend) held(now time.Time) bool { return now.UnixNano() < b.refusedUntil.Load() }

// drainRefusal reads the refusal's short body to its end, so the
// connection can carry the next request.
func drainRefusal(up *upstream) {
	_, _ = io.CopyN(io.Discard, &up.Body, maxRefusalBody+1)
}

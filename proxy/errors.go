package proxy

import (
	"errors"
	"net/http"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/shaping"
	"github.com/valyala/fasthttp"
)

// Outcomes of a request, as logs and metrics name them.
const (
	outcomeOK         = "ok"
	outcomeClientGone = "client_gone"
	outcomeTimeout    = "timeout"
	outcomeUpstream   = "upstream_error"
	outcomeNoBackend  = "no_backend"
	outcomeRejected   = "rejected" // bad input, unknown model
	outcomeShutdown   = "shutdown"
	outcomeBackend4xx = "backend_4xx"
	outcomeBackend5xx = "backend_5xx"
	outcomeShed       = "shed"      // refused by admission control: queue full or wait too long
	outcomePreempted  = "preempted" // its slot went to a higher class before its first byte (classes)
	outcomePanic      = "panic"     // the gateway failed (a recovered panic)
)

// Causes of a request's end, set on its context or returned by the
// upstream call; errorResponse, below, maps each to what the client sees.
var (
	errClientGone       = errors.New("proxy: client went away")
	errTotalTimeout     = errors.New("proxy: request exceeded timeouts.total")
	errFirstByteTimeout = errors.New("proxy: backend did not answer within timeouts.first_byte")
	errIdleTimeout      = errors.New("proxy: backend stream idle longer than timeouts.idle")
	errConnect          = errors.New("proxy: cannot connect to backend")
	errUpstream         = errors.New("proxy: backend failed")
	errEndedEarly       = errors.New("proxy: backend ended the stream early")
	errShutdown         = errors.New("proxy: gateway shut down before the response completed")
	errResponseTooLarge = errors.New("proxy: backend response exceeds server.max_response_bytes")
)

// errShed wraps a refusal of the limiter, so errorResponse can answer 429
// or 503 with Retry-After.
var errShed = errors.New("proxy: admission refused")

// errBackendsFull is a request every backend it was tried on refused at
// admission (their queues full: refusal.go), with no other left to try.
var errBackendsFull = errors.New("proxy: every backend tried refused the request: their queues are full")

// ErrNoBackend means every backend of a pool is unavailable or was tried.
var ErrNoBackend = errors.New("proxy: no available backend")

// clientError is what a client is told about a failure: status (499 means
// the client left and is told nothing), OpenAI error type and code, a
// message that names no internals, and the outcome for logs and metrics.
type clientError struct {
	status       int
	typ, code    string
	msg, outcome string
}

// errorResponse is the one place where failures become responses.
func errorResponse(err error) clientError {
	switch {
	case errors.Is(err, errPanic):
		return clientError{http.StatusInternalServerError, openai.TypeServer, "internal_error", "the gateway failed while handling this request", outcomePanic}
	case errors.Is(err, errPreempted):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "preempted",
			"this request gave its place to a request of a higher service class; retry after the time in Retry-After", outcomePreempted}
	case errors.Is(err, errClientGone):
		return clientError{499, "", "", "", outcomeClientGone}
	case errors.Is(err, errTotalTimeout):
		return clientError{http.StatusGatewayTimeout, openai.TypeTimeout, "timeout", "the request exceeded the gateway's total timeout", outcomeTimeout}
	case errors.Is(err, errFirstByteTimeout):
		return clientError{http.StatusGatewayTimeout, openai.TypeTimeout, "timeout", "the backend did not answer in time", outcomeTimeout}
	case errors.Is(err, errIdleTimeout):
		return clientError{http.StatusGatewayTimeout, openai.TypeTimeout, "timeout", "the backend stream stalled longer than the idle timeout", outcomeTimeout}
	case errors.Is(err, errShed) && errors.Is(err, shaping.ErrShed):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "shed",
			"the gateway's queue is full and this request gave its place to one of a higher service class; retry after the time in Retry-After", outcomeShed}
	case errors.Is(err, errShed) && errors.Is(err, shaping.ErrClassCap):
		return clientError{http.StatusTooManyRequests, openai.TypeRateLimit, "class_limit_reached",
			"too many requests of this service class in flight; retry after the time in Retry-After", outcomeShed}
	case errors.Is(err, errShed) && errors.Is(err, shaping.ErrTenantCap):
		return clientError{http.StatusTooManyRequests, openai.TypeRateLimit, "tenant_limit_reached",
			"too many requests in flight for this API key; retry after the time in Retry-After", outcomeShed}
	case errors.Is(err, errShed):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "capacity_exceeded",
			"the gateway is at capacity and its queue is full or the wait too long; retry after the time in Retry-After", outcomeShed}
	case errors.Is(err, errBackendsFull):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "backends_full",
			"every backend that could take this request is at its queue limit; retry after the time in Retry-After", outcomeShed}
	case errors.Is(err, ErrNoBackend):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "no_backend", "no healthy backend is available for this model", outcomeNoBackend}
	case errors.Is(err, errShutdown):
		return clientError{http.StatusServiceUnavailable, openai.TypeUnavailable, "shutting_down", "the gateway is shutting down", outcomeShutdown}
	case errors.Is(err, errConnect):
		return clientError{http.StatusBadGateway, openai.TypeServer, "upstream_connect_error", "the gateway could not connect to a backend", outcomeUpstream}
	case errors.Is(err, errEndedEarly):
		return clientError{http.StatusBadGateway, openai.TypeServer, "upstream_stream_ended", "the backend ended the stream before it was complete", outcomeUpstream}
	case errors.Is(err, errResponseTooLarge):
		return clientError{http.StatusBadGateway, openai.TypeServer, "upstream_response_too_large", "the backend's response is too large", outcomeUpstream}
	default:
		return clientError{http.StatusBadGateway, openai.TypeServer, "upstream_error", "the backend failed", outcomeUpstream}
	}
}

// writeError sets an OpenAI-style error response.
func writeError(rc *fasthttp.RequestCtx, status int, typ, code, msg string) {
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(openai.AppendError(nil, typ, code, msg))
}

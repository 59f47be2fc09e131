package sim

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// Admission limits as vLLM's frontend has them (0.29 and later, PR
// vllm-project/vllm#49445): before a request reaches the engine,
// AsyncLLM.check_admission refuses it with 503 when the requests not yet
// finished (waiting and running) would pass --max-num-queued-reqs, or when
// the prompt tokens of the requests still in prefill (no output yet) are
// already at --max-num-queued-tokens; the request count is checked first.
// The refusal is a GracefulHTTPError (vllm/exceptions.py), which
// create_error_response turns into vLLM's ErrorResponse with the status's
// phrase as its type, no param, and no Retry-After header.

// AdmissionConfig bounds what the simulator accepts, as vLLM's
// --max-num-queued-reqs and --max-num-queued-tokens do. The zero value
// accepts everything (vLLM's default: unbounded).
type AdmissionConfig struct {
	// MaxNumQueuedReqs bounds the requests admitted and not finished,
	// waiting or running; 0 is no bound (unlike vLLM, where 0 refuses
	// every request).
	MaxNumQueuedReqs int `yaml:"max_num_queued_reqs"`
	// MaxNumQueuedTokens bounds the prompt tokens of the admitted requests
	// that have no output yet: a request is refused while they are at the
	// bound; 0 is no bound. vLLM's PR suggests about the TTFT target times
	// the prefill speed (tokens per second).
	MaxNumQueuedTokens int `yaml:"max_num_queued_tokens"`
}

// The messages of vLLM's two admission refusals (QueueOverflowError and
// MaxQueuedTokensError in vllm/exceptions.py), and the reason label of
// vllm:admission_rejections_total for each (PR vllm-project/vllm#55812:
// "which queue cap fired"; the label values are the flags' names here,
// as that PR's text names them).
const (
	queueFullMessage     = "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."
	tokenBacklogMessage  = "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."
	reasonQueuedRequests = "max_num_queued_reqs"
	reasonQueuedTokens   = "max_num_queued_tokens"
)

// admission counts what the limits bound. Safe for concurrent use.
type admission struct {
	cfg      AdmissionConfig
	reqs     atomic.Int64 // admitted, not finished
	tokens   atomic.Int64 // prompt tokens of admitted requests with no output yet
	rejected *prometheus.CounterVec
}

// admitted is one admitted request's share of the counts.
type admitted struct {
	a      *admission
	tokens atomic.Int64 // its prompt tokens, until its first output
	done   atomic.Bool
}

// admit reserves a place for a request of prompt tokens, or says which
// limit refused it ("" and a charge when admitted).
func (a *admission) admit(prompt int) (*admitted, string) {
	if m := int64(a.cfg.MaxNumQueuedReqs); m > 0 {
		for {
			n := a.reqs.Load()
			if n+1 > m {
				a.rejected.WithLabelValues(reasonQueuedRequests).Inc()
				return nil, reasonQueuedRequests
			}
			if a.reqs.CompareAndSwap(n, n+1) {
				break
			}
		}
	} else {
		a.reqs.Add(1)
	}
	if m := int64(a.cfg.MaxNumQueuedTokens); m > 0 && a.tokens.Load() >= m {
		a.reqs.Add(-1)
		a.rejected.WithLabelValues(reasonQueuedTokens).Inc()
		return nil, reasonQueuedTokens
	}
	c := &admitted{a: a}
	c.tokens.Store(int64(prompt))
	a.tokens.Add(int64(prompt))
	return c, ""
}

// prefilled ends c's prompt's share of the token count: its first output
// is out (the engine calls it; safe to call twice).
func (c *admitted) prefilled() {
	if c == nil {
		return
	}
	if n := c.tokens.Swap(0); n != 0 {
		c.a.tokens.Add(-n)
	}
}

// finish gives c's place back (safe to call twice).
func (c *admitted) finish() {
	if c == nil || !c.done.CompareAndSwap(false, true) {
		return
	}
	c.prefilled()
	c.a.reqs.Add(-1)
}

// refuse writes vLLM's admission refusal for reason: status 503 and its
// ErrorResponse, with no Retry-After.
func refuse(rc *fasthttp.RequestCtx, reason string) {
	msg := queueFullMessage
	if reason == reasonQueuedTokens {
		msg = tokenBacklogMessage
	}
	vllmError(rc, fasthttp.StatusServiceUnavailable, "Service Unavailable", msg)
}

package proxy

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/policy"
	"github.com/valyala/fasthttp"
)

// The policy step (DESIGN: the request path): the tenant is named from
// the key before the body is read, so an unauthenticated request costs
// nothing more; after routing, the policy may refuse the model, trim the
// context, cap the output and ask for usage, before admission.

// identify names the request's tenant, or answers 401.
func (x *exchange) identify(rc *fasthttp.RequestCtx) bool {
	id, err := x.st.pol.Identify(rc.Request.Header.Peek("Authorization"))
	x.tenant = id.Tenant
	if err != nil {
		rc.Response.Header.Set("WWW-Authenticate", `Bearer realm="infergate"`)
		x.policyReject(rc, err)
		return false
	}
	return true
}

// applyPolicy runs the policy on the routed request, returning the body to
// forward. It reports false when the request was refused.
func (x *exchange) applyPolicy(rc *fasthttp.RequestCtx, body []byte, env openai.Envelope) ([]byte, bool) {
	p := x.st.pol
	chat, completion, responses := x.path == chatPath, x.path == completionsPath, x.path == openai.ResponsesPath
	count := x.st.tokenCaps && (chat || responses)
	if !count && !p.Needs(x.tenant, x.model, x.stream) {
		if responses && env.ContinuesResponse(body) {
			// No other work for the policy: the note alone.
			x.tl.Policy.UnknownHistory = true
			rc.Response.Header.Set(hdrInputHistory, "unknown")
		}
		return body, true
	}
	start := time.Now()
	d, err := p.Apply(policy.Request{Tenant: x.tenant, Model: x.model, Body: body, Env: env, Chat: chat, Completion: completion, Responses: responses, Count: count, Exact: x.exactCounter()})
	x.tl.PolicyTime = time.Since(start)
	if err != nil {
		x.policyReject(rc, err)
		return nil, false
	}
	x.pol = d
	n := &x.tl.Policy
	n.InputTokens, n.Estimated = d.InputTokens, d.Estimated
	n.TrimmedTokens, n.TrimmedMessages = d.TrimmedTokens, d.TrimmedMessages
	n.UnknownHistory = d.UnknownHistory
	if d.Clamped {
		n.MaxTokens, n.RequestedMaxTokens = d.MaxTokens, d.ClampedFrom
	}
	h := &rc.Response.Header
	if d.TrimmedTokens > 0 || d.TrimmedMessages > 0 {
		h.Set("X-Infergate-Trimmed-Tokens", strconv.Itoa(d.TrimmedTokens))
		h.Set("X-Infergate-Trimmed-Messages", strconv.Itoa(d.TrimmedMessages))
	}
	if d.Clamped {
		h.Set("X-Infergate-Max-Tokens-Clamped", strconv.Itoa(d.MaxTokens))
		req := "none"
		if d.ClampedFrom >= 0 {
			req = strconv.Itoa(d.ClampedFrom)
		}
		h.Set("X-Infergate-Max-Tokens-Requested", req)
	}
	if d.InputTokens > 0 {
		h.Set("X-Infergate-Input-Tokens", strconv.Itoa(d.InputTokens))
	}
	if d.UnknownHistory {
		h.Set(hdrInputHistory, "unknown")
	}
	if d.Body == nil {
		return body, true
	}
	return d.Body, true
}

// hdrInputHistory tells a client whose request continues a stored
// response (previous_response_id) that its input was counted without the
// history the backend prepends: "unknown".
const hdrInputHistory = "X-Infergate-Input-History"

// policyReject answers a request the policy refused.
func (x *exchange) policyReject(rc *fasthttp.RequestCtx, err error) {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		x.reject(rc, http.StatusInternalServerError, openai.TypeServer, "internal_error", "the policy failed")
		return
	}
	x.reject(rc, pe.Status, pe.Type, pe.Code, pe.Message)
}

// exactCounter returns the count of a model whose tokenizer is "backend":
// the backend's own (tokencount.go: vLLM's /tokenize, llama.cpp's
// input_tokens, whichever the backend speaks), exact at the cost of a
// round trip. An error leaves the policy's estimate.
func (x *exchange) exactCounter() func(policy.ExactInput) (int, error) {
	if !x.st.pol.UsesBackend(x.model) {
		return nil
	}
	return func(in policy.ExactInput) (int, error) {
		model := x.model
		if x.route.upstreamModel != "" {
			model = x.route.upstreamModel
			in.Body = openai.SetMember(in.Body, "model", openai.AppendJSONString(nil, model))
		}
		now := time.Now()
		for _, b := range x.route.pool.backends {
			if !b.Available(now) {
				continue
			}
			return b.countTokens(model, in, x.st.cfg.Timeouts.Connect+time.Second, x.g.log)
		}
		return 0, ErrNoBackend
	}
}

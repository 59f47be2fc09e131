package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/infergate/infergate/shaping"
	"github.com/valyala/fasthttp"
)

// Admission: before a backend is picked, every request asks the limiter
// for a slot under the caps of its tenant, pool and model (DESIGN: the
// request path). It may wait in the limiter's queue; a client that leaves
// meanwhile cancels the wait through the request's context.

// tokenBudget is what a request may hold of a token cap: its prompt as
// the policy counted it, else estimated at 4 bytes of body per token
// (cl100k's average for English), plus the output it may ask for (the
// limit the backend gets, else the configured default).
func (x *exchange) tokenBudget(body []byte) int64 {
	out := int64(x.pol.MaxTokens)
	if out <= 0 {
		out = int64(x.askedOut)
	}
	if out <= 0 {
		out = x.st.cfg.Shaping.DefaultOutputTokens
	}
	in := int64(x.pol.InputTokens)
	if in == 0 {
		in = int64(len(body) / 4)
	}
	return in + out
}

// admit waits for the request's slot. On success the permit is the
// exchange's until finishWith releases it.
func (x *exchange) admit(rc *fasthttp.RequestCtx, body []byte) error {
	g := x.g
	r := shaping.Request{Tenant: x.tenant, Pool: x.route.pool.name, Model: x.model, Tokens: x.tokenBudget(body)}
	x.tl.Asked = time.Now()
	p, err := g.lim.Acquire(&x.ctx, r)
	x.tl.Admitted = time.Now()
	if err != nil {
		if errors.Is(err, shaping.ErrQueueFull) || errors.Is(err, shaping.ErrQueueTimeout) || errors.Is(err, shaping.ErrSharedDown) {
			return fmt.Errorf("%w: %w", errShed, err)
		}
		// The wait ended with the request: the client left, or the total
		// timeout passed.
		if c := x.ctx.Cause(); c != nil {
			return c
		}
		return err
	}
	x.permit = p
	return nil
}

package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/shaping"
	"github.com/valyala/fasthttp"
)

// Admission: before a backend is picked, every request asks the limiter
// for a slot under the caps of its tenant, pool and model (DESIGN: the
// request path). It may wait in the limiter's queue; a client that leaves
// meanwhile cancels the wait through the request's context.

// setTenantKeys indexes the configured API keys by tenant.
func (g *Gateway) setTenantKeys(c shaping.Config) {
	m := map[string]string{}
	for name, t := range c.Tenants {
		for _, k := range t.APIKeys {
			m[k] = name
		}
	}
	g.tenantKeys.Store(&m)
}

var bearer = []byte("Bearer ")

// tenantOf names the request's tenant: the configured tenant of its API
// key, else "key-" and 12 hex digits of the key's SHA-256 (the key itself
// never reaches logs or metrics), else "anonymous".
func (g *Gateway) tenantOf(rc *fasthttp.RequestCtx) string {
	auth := rc.Request.Header.Peek("Authorization")
	key, ok := bytes.CutPrefix(auth, bearer)
	if !ok || len(key) == 0 {
		return "anonymous"
	}
	if name, ok := (*g.tenantKeys.Load())[string(key)]; ok {
		return name
	}
	sum := sha256.Sum256(key)
	return "key-" + hex.EncodeToString(sum[:6])
}

// tokenBudget is what a request may hold of a token cap: its prompt,
// estimated at 4 bytes of body per token (cl100k's average for English;
// exact counts come with the policy package), plus the output it asks for
// (max_completion_tokens or max_tokens, else the configured default).
func tokenBudget(body []byte, defaultOutput int64) int64 {
	out := int64(openai.MaxOutputTokens(body))
	if out <= 0 {
		out = defaultOutput
	}
	return int64(len(body)/4) + out
}

// admit waits for the request's slot. On success the permit is the
// exchange's until finishWith releases it.
func (x *exchange) admit(rc *fasthttp.RequestCtx, body []byte) error {
	g := x.g
	x.tenant = g.tenantOf(rc)
	r := shaping.Request{Tenant: x.tenant, Pool: x.route.pool.name, Model: x.model,
		Tokens: tokenBudget(body, x.st.cfg.Shaping.DefaultOutputTokens)}
	p, err := g.lim.Acquire(x.ctx, r)
	x.tl.Admitted = time.Now()
	if err != nil {
		if errors.Is(err, shaping.ErrQueueFull) || errors.Is(err, shaping.ErrQueueTimeout) || errors.Is(err, shaping.ErrSharedDown) {
			return fmt.Errorf("%w: %w", errShed, err)
		}
		// The wait ended with the request: the client left, or the total
		// timeout passed.
		if c := context.Cause(x.ctx); c != nil {
			return c
		}
		return err
	}
	x.permit = p
	return nil
}

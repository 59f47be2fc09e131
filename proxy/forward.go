package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Forwarding: picking a backend and trying it, moving on to another on a
// connect error, a stale connection, a 5xx, a 429 or an admission refusal
// (refusal.go) while retries and the budget allow. Nothing has reached the
// client yet.

// forward tries backends until one answers with headers that can go to the
// client: a connect error, a stale connection, a 5xx or a 429 moves on to
// another backend while retries and the budget allow; nothing has reached
// the client yet. With fill set, a streaming answer's first event is also
// awaited (the keep-alive path waits for it off the handler).
func (x *exchange) forward(fill bool) error {
	cfg := &x.st.cfg
	pool := x.route.pool
	x.st.budget.request(time.Now())
	var tried [8]*backend
	nTried, refusedBy := 0, 0
	for {
		b, done, why, blocks, err := pool.pick(tried[:nTried], time.Now(), x.key)
		if err != nil {
			if refusedBy > 0 && errors.Is(err, ErrNoBackend) {
				return fmt.Errorf("%w: %w", errBackendsFull, err)
			}
			return err
		}
		x.routeWhy = why.traced()
		b.outstanding.Add(1)
		// The attempt is the request's from here: whatever happens, a
		// panic included, finishWith gives its permit and count back.
		x.backend, x.done = b, done
		x.prefill.charge(b, uncached(x.promptTokens, x.key, blocks))
		x.g.fail.at("attempt", x.id)
		x.prepare(b)
		x.tl.Attempts++
		up, err := b.roundTrip(x.attemptCtx(), x, &cfg.Timeouts)
		if err != nil {
			cause := x.attemptCause()
			// A client that left or a total timeout is not the backend's fault.
			x.dropAttempt(cause != nil)
			// Connect errors and resets before any response byte move on;
			// a first-byte timeout does not (it would double the wait).
			if cause == nil && (errors.Is(err, errConnect) || errors.Is(err, errUpstream)) && x.canRetry(pool, tried[:nTried], b) {
				tried[nTried] = b
				nTried++
				x.g.log.Warn("upstream attempt failed, trying another backend", "id", x.id, "backend", b.name, "err", err)
				continue
			}
			return err
		}
		x.up = up
		status := up.Resp.StatusCode()
		if why, ok := admissionRefusal(up); ok {
			// Full, not failing: another backend, or the gateway's own
			// 503 with Retry-After; never the breaker.
			drainRefusal(up)
			up.finish(true)
			x.up = nil
			b.refused(why, time.Now())
			x.dropAttempt(true)
			refusedBy++
			if x.canRetry(pool, tried[:nTried], b) {
				tried[nTried] = b
				nTried++
				x.g.log.Info("backend refused the request at admission (its queue is full), trying another backend", "id", x.id, "backend", b.name, "reason", why.String())
				continue
			}
			return fmt.Errorf("%w (%s: %s)", errBackendsFull, b.name, why)
		}
		if status >= 500 || status == http.StatusTooManyRequests {
			if x.canRetry(pool, tried[:nTried], b) {
				up.finish(false)
				x.up = nil
				x.dropAttempt(status == http.StatusTooManyRequests) // 429 is load, not failure
				tried[nTried] = b
				nTried++
				x.g.log.Warn("backend answered with an error, trying another backend", "id", x.id, "backend", b.name, "status", status)
				continue
			}
		}
		if fill && bytes.HasPrefix(up.Resp.Header.ContentType(), eventStream) {
			x.fillFirst()
		}
		return nil
	}
}

// dropAttempt gives back the attempt's breaker permit, reporting ok, and
// its count of outstanding requests: the request moves on or fails.
func (x *exchange) dropAttempt(ok bool) {
	x.prefill.release()
	x.backend.settle(x.done, ok)
	x.backend.outstanding.Add(-1)
	x.backend, x.done = nil, nil
}

// canRetry reports whether another attempt is allowed and has somewhere to go.
func (x *exchange) canRetry(p *pool, tried []*backend, failed *backend) bool {
	max := x.st.cfg.Retries.Max
	if max < 0 || x.tl.Attempts > max || len(tried)+1 >= 8 {
		return false
	}
	now := time.Now()
	other := false
	for _, b := range p.backends {
		if b != failed && !contains(tried, b) && b.Available(now) {
			other = true
			break
		}
	}
	if !other || !x.st.budget.retry(now) {
		return false
	}
	x.g.m.Retry()
	return true
}

// prepare points the upstream request at b.
func (x *exchange) prepare(b *backend) {
	r := x.ureq
	b.target(r, x.rawPath, x.query)
	if b.auth != "" {
		r.Header.Set("Authorization", b.auth)
	} else if !x.st.cfg.Server.ForwardAuthorization {
		r.Header.Del("Authorization")
	}
}

// Package safehttp holds the outbound HTTP policy of infergate's own
// calls (the judge, the admin API, diagnose's scrapes, bench's probes):
// a request that carries a credential is never redirected, so a key goes
// only to the address it was configured for.
package safehttp

import (
	"errors"
	"net/http"
	"time"
)

// ErrRedirect is what a redirect of a request holding a credential
// gives: the caller sees the refusal, not a silently followed hop.
var ErrRedirect = errors.New("the server redirected a request that holds a credential; not followed (point the URL at the final address)")

// CheckRedirect is an http.Client's CheckRedirect: it refuses to follow
// a redirect of a request with an Authorization header (net/http sends
// it on to any port of the same host, and to other schemes), and
// follows others at most five times.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > 0 && via[0].Header.Get("Authorization") != "" {
		return ErrRedirect
	}
	if len(via) >= 5 {
		return errors.New("more than 5 redirects")
	}
	return nil
}

// Client is an http.Client with CheckRedirect and the timeout given.
func Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: CheckRedirect}
}

// Guard returns c with CheckRedirect, or a Client with no timeout when c
// is nil; a caller's own CheckRedirect is kept.
func Guard(c *http.Client) *http.Client {
	if c == nil {
		return Client(0)
	}
	if c.CheckRedirect != nil {
		return c
	}
	g := *c
	g.CheckRedirect = CheckRedirect
	return &g
}

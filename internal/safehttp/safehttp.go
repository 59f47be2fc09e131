// Package safehttp holds the outbound HTTP policy of infergate's own
// calls (the judge, the admin API, diagnose's scrapes, bench's probes):
// a request that carries a credential is never redirected, so a key goes
// only to the address it was configured for.
package safehttp

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// ErrRedirect is what a redirect of a request holding a credential
// gives: the caller sees the refusal, not a silently followed hop.
var ErrRedirect = errors.New("the server redirected a request that holds a credential; not followed (point the URL at the final address)")

// CheckRedirect is an http.Client's CheckRedirect: it refuses to follow
// a redirect of a request with a credential header (CredentialHeaders:
// net/http sends Authorization on to any port of the same host and to
// other schemes, and a provider's own key header to any host), and
// follows others at most five times.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > 0 {
		for name := range via[0].Header {
			if IsCredential(name) {
				return ErrRedirect
			}
		}
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

// CredentialHeaders are the headers a key travels in: Authorization and
// the providers' own (Azure's api-key, x-api-key).
var CredentialHeaders = []string{"Authorization", "Proxy-Authorization", "Api-Key", "X-Api-Key", "Cookie"}

// IsCredential reports whether the header name is one of
// CredentialHeaders, in any case.
func IsCredential(name string) bool {
	for _, c := range CredentialHeaders {
		if strings.EqualFold(name, c) {
			return true
		}
	}
	return false
}

// Resendable marks req, a POST that is safe to send twice (a completion,
// a judge's verdict), as one net/http may send again on another
// connection when a kept one the server closed (llama.cpp's server closes
// one after every streamed answer) fails before anything came back:
// net/http resends only a request it counts as idempotent, which an
// X-Idempotency-Key header with no value says; the header is not sent.
func Resendable(req *http.Request) { req.Header["X-Idempotency-Key"] = nil }

package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// redacted stands in for a credential a backend echoed back.
var redacted = []byte("[redacted]")

// minRedactKey is the shortest key looked for: shorter ones would blank
// ordinary words of an answer.
const minRedactKey = 8

// redactKey replaces the key of an Authorization value ("Bearer KEY") in
// b. Backends echo a key they refuse ("Incorrect API key provided:
// sk-..."): relayed as is, the gateway's upstream credential would reach
// its clients and its pair files.
func redactKey(b []byte, authorization []byte) []byte {
	key := authorization
	if len(key) > 7 && bytes.EqualFold(key[:7], []byte("bearer ")) {
		key = bytes.TrimSpace(key[7:])
	}
	if len(key) < minRedactKey || !bytes.Contains(b, key) {
		return b
	}
	return bytes.ReplaceAll(b, key, redacted)
}

// sentAuthorization is the Authorization the backend got for x: its own
// key, or the client's when server.forward_authorization passes it on.
func (x *exchange) sentAuthorization(rc *fasthttp.RequestCtx) []byte {
	if x.backend != nil && x.backend.auth != "" {
		return []byte(x.backend.auth)
	}
	if x.st.cfg.Server.ForwardAuthorization {
		return rc.Request.Header.Peek(fasthttp.HeaderAuthorization)
	}
	return nil
}

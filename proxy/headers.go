package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 section 7.6.1), and so are never forwarded.
var hopByHop = [][]byte{
	[]byte("Connection"), []byte("Keep-Alive"), []byte("Proxy-Authenticate"), []byte("Proxy-Authorization"),
	[]byte("Proxy-Connection"), []byte("Te"), []byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
}

func isHopByHop(k []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// connectionListed reports whether the Connection header value conn names
// header k (a header made hop-by-hop by the sender).
func connectionListed(conn, k []byte) bool {
	for len(conn) > 0 {
		tok := conn
		if i := bytes.IndexByte(conn, ','); i >= 0 {
			tok, conn = conn[:i], conn[i+1:]
		} else {
			conn = nil
		}
		if bytes.EqualFold(bytes.TrimSpace(tok), k) {
			return true
		}
	}
	return false
}

// headerRules says which client headers go to the backend beside the
// end-to-end ones every proxy passes.
type headerRules struct {
	// forwardAuth passes the client's Authorization (server.forward_authorization).
	forwardAuth bool
	// forwardSimFault passes X-Sim-Fault (server.forward_sim_fault): only
	// a simulator acts on it, and a client must not inject faults into a
	// real backend's test harness.
	forwardSimFault bool
}

var (
	hdrAuthorization = []byte("Authorization")
	hdrRequestID     = []byte("X-Request-Id")
	hdrForwardedFor  = []byte("X-Forwarded-For")
	hdrSimFault      = []byte("X-Sim-Fault")
	prefixInfergate  = []byte("X-Infergate-")
)

// copyRequestHeaders sets on dst the end-to-end headers of src, except
// those the gateway sets itself, of which a client's copies never reach
// the backend beside the gateway's: X-Request-Id (the gateway's id), the
// gateway's own X-Infergate-* headers, and X-Forwarded-For, whose client
// copies, every one of them, are appended to xff for the caller to extend
// with the client's address and set once. traceparent is replaced when
// the gateway starts a trace (injectSpan).
func copyRequestHeaders(dst *fasthttp.RequestHeader, src *fasthttp.RequestHeader, rules headerRules, xff []byte) []byte {
	conn := src.Peek("Connection")
	for k, v := range src.All() {
		switch {
		case isHopByHop(k), len(conn) > 0 && connectionListed(conn, k):
		// Host is the backend's; the body is whole, so its length is known
		// and an Expect: 100-continue was already answered by the server.
		case bytes.EqualFold(k, []byte("Host")), bytes.EqualFold(k, []byte("Content-Length")), bytes.EqualFold(k, []byte("Expect")):
		case !rules.forwardAuth && bytes.EqualFold(k, hdrAuthorization):
		case bytes.EqualFold(k, hdrRequestID):
		case len(k) >= len(prefixInfergate) && bytes.EqualFold(k[:len(prefixInfergate)], prefixInfergate):
		case !rules.forwardSimFault && bytes.EqualFold(k, hdrSimFault):
		case bytes.EqualFold(k, hdrForwardedFor):
			if len(xff) > 0 {
				xff = append(xff, ", "...)
			}
			xff = append(xff, v...)
		default:
			dst.AddBytesKV(k, v)
		}
	}
	return xff
}

// copyResponseHeaders sets on dst the end-to-end headers of src, without
// Content-Length: the server frames the body itself.
func copyResponseHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader) {
	conn := src.Peek("Connection")
	for k, v := range src.All() {
		switch {
		case isHopByHop(k), len(conn) > 0 && connectionListed(conn, k):
		case bytes.EqualFold(k, []byte("Content-Length")):
		case bytes.EqualFold(k, []byte("Content-Type")):
			dst.SetContentTypeBytes(v)
		case bytes.EqualFold(k, []byte("Server")):
			dst.SetServerBytes(v)
		default:
			dst.AddBytesKV(k, v)
		}
	}
}

var hdrContentLength = []byte("content-length")

// hasHeader reports whether raw request headers name the header key
// (lower case) at the start of a line, in any case.
func hasHeader(raw, key []byte) bool {
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) > len(key) && line[len(key)] == ':' && bytes.EqualFold(line[:len(key)], key) {
			return true
		}
	}
	return false
}

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

// copyRequestHeaders sets on dst the end-to-end headers of src.
// Authorization goes along only when forwardAuth is set.
func copyRequestHeaders(dst *fasthttp.RequestHeader, src *fasthttp.RequestHeader, forwardAuth bool) {
	conn := src.Peek("Connection")
	for k, v := range src.All() {
		switch {
		case isHopByHop(k), len(conn) > 0 && connectionListed(conn, k):
		// Host is the backend's; the body is whole, so its length is known
		// and an Expect: 100-continue was already answered by the server.
		case bytes.EqualFold(k, []byte("Host")), bytes.EqualFold(k, []byte("Content-Length")), bytes.EqualFold(k, []byte("Expect")):
		case !forwardAuth && bytes.EqualFold(k, []byte("Authorization")):
		default:
			dst.AddBytesKV(k, v)
		}
	}
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

package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// Routes: which handler a path gets. The completion routes must carry a
// JSON body naming a model; the rest of /v1 is routed by its model when it
// names one, else to the default pool; /healthz and /readyz answer here.

// The completion routes, as strings (an exchange's path) and as bytes
// (a request's, routed in place).
const (
	chatPath        = "/v1/chat/completions"
	completionsPath = "/v1/completions"
)

var (
	pathChat        = []byte(chatPath)
	pathCompletions = []byte(completionsPath)
	pathResponses   = []byte(openai.ResponsesPath)
	pathModels      = []byte("/v1/models")
	pathV1          = []byte("/v1/")
	eventStream     = []byte("text/event-stream")
	keepAliveLine   = []byte(": keep-alive\n\n")
	// hdrDeclaredLength marks a request refused by its declared length;
	// the server sets it (HeaderReceived), a client's copy only refuses
	// its own request.
	hdrDeclaredLength = []byte("X-Infergate-Declared-Length")
)

// handle is the API listener's handler: fasthttp calls it once the whole
// request is read.
func (g *Gateway) handle(rc *fasthttp.RequestCtx) {
	if g.draining.Load() {
		// Keep-alive clients learn to go elsewhere with this answer.
		rc.SetConnectionClose()
	}
	if rc.Request.Header.ContentLength() == -1 && hasHeader(rc.Request.Header.RawHeaders(), hdrContentLength) {
		// Content-Length beside Transfer-Encoding: chunked is how requests
		// are smuggled past a proxy (RFC 9112, section 6.1): refused, and
		// the connection closed.
		rc.SetConnectionClose()
		writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request",
			"Content-Length and Transfer-Encoding together")
		return
	}
	if rc.Request.Header.ContentLength() == 0 && len(rc.Request.Header.PeekBytes(hdrDeclaredLength)) > 0 {
		// Declared longer than max_body_bytes (HeaderReceived): its body
		// is unread, so the connection cannot serve another request.
		rc.SetConnectionClose()
		writeError(rc, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
		return
	}
	path := rc.Path()
	if bytes.HasPrefix(path, pathV1) && !plainPath(rc.URI().PathOriginal()) {
		// The route is decided on the decoded path and the backend gets
		// the path as sent: they must name the same thing.
		writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "invalid_path",
			"the path has an encoded /, ?, # or \\, a dot segment, an empty segment or a control character")
		return
	}
	if refusedDoubleAuthorization(rc) {
		return
	}
	switch {
	case bytes.Equal(path, pathChat), bytes.Equal(path, pathCompletions), bytes.Equal(path, pathResponses):
		if !rc.IsPost() {
			rc.Response.Header.Set("Allow", "POST")
			writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use POST for "+string(path))
			return
		}
		g.serveAPI(rc, completionRoute)
	case bytes.Equal(path, pathModels) && g.state.Load().modelList != nil:
		if !rc.IsGet() {
			rc.Response.Header.Set("Allow", "GET")
			writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use GET for /v1/models")
			return
		}
		if _, err := g.state.Load().pol.Identify(rc.Request.Header.Peek("Authorization")); err != nil {
			rc.Response.Header.Set("WWW-Authenticate", `Bearer realm="infergate"`)
			writeError(rc, http.StatusUnauthorized, openai.TypeInvalidRequest, "invalid_api_key", err.Error())
			return
		}
		rc.SetContentType("application/json")
		rc.SetBody(g.state.Load().modelList)
	case bytes.HasPrefix(path, pathV1):
		g.serveAPI(rc, otherRoute)
	case string(path) == "/healthz":
		rc.Response.Header.Set("X-Infergate-Config-Hash", g.state.Load().configHash)
		rc.SetContentType("text/plain")
		rc.SetBodyString("ok\n")
	case string(path) == "/readyz":
		rc.SetContentType("text/plain")
		switch {
		case g.draining.Load():
			rc.SetStatusCode(http.StatusServiceUnavailable)
			rc.SetBodyString("draining\n")
		case g.Ready():
			rc.SetBodyString("ready\n")
		default:
			rc.SetStatusCode(http.StatusServiceUnavailable)
			rc.SetBodyString("no healthy backend\n")
		}
	default:
		writeError(rc, http.StatusNotFound, openai.TypeNotFound, "not_found", "no route for "+string(path))
	}
}

// refusedDoubleAuthorization answers 400 to a request with more than one
// Authorization header and reports whether it did. Authorization is not
// a list (RFC 9110, 11.6.2): with two, the gateway would check one and a
// backend or a proxy behind it might act on the other.
func refusedDoubleAuthorization(rc *fasthttp.RequestCtx) bool {
	if len(rc.Request.Header.PeekAll(fasthttp.HeaderAuthorization)) <= 1 {
		return false
	}
	writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "invalid_api_key", "more than one Authorization header")
	return true
}

// readError answers requests fasthttp could not read: too large, or
// malformed at the HTTP level. It runs instead of handle.
func (g *Gateway) readError(rc *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(rc, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		writeError(rc, http.StatusRequestHeaderFieldsTooLarge, openai.TypeInvalidRequest, "request_header_too_large",
			fmt.Sprintf("the request line and headers exceed %d bytes", g.state.Load().cfg.Server.MaxHeaderBytes))
		return
	}
	var se interface{ Timeout() bool }
	if errors.As(err, &se) && se.Timeout() {
		writeError(rc, http.StatusRequestTimeout, openai.TypeInvalidRequest, "request_timeout", "the request was not read in time")
		return
	}
	writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request", "malformed HTTP request")
}

// plainPath reports whether a request path as sent means the same to
// every server that decodes it: no empty or dot segments, no backslash,
// no control character, and no percent-encoding of a character that
// changes where a path goes (/ ? # \ .) or of a control character.
// Encodings of other characters (%20, %63) decode the same everywhere.
func plainPath(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '/' {
		return false
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c < 0x20 || c == 0x7f || c == '\\' || c == '?' || c == '#':
			return false
		case c == '/':
			seg := raw[i+1:]
			if j := bytes.IndexByte(seg, '/'); j >= 0 {
				seg = seg[:j]
			}
			// An empty segment is allowed only at the end (a trailing /).
			if (len(seg) == 0 && i+1 < len(raw)) || string(seg) == "." || string(seg) == ".." {
				return false
			}
		case c == '%':
			if i+2 >= len(raw) || unhex(raw[i+1]) < 0 || unhex(raw[i+2]) < 0 {
				return false
			}
			d := byte(unhex(raw[i+1])<<4 | unhex(raw[i+2]))
			if d < 0x20 || d == 0x7f || d == '/' || d == '?' || d == '#' || d == '\\' || d == '.' || d == '%' {
				return false
			}
			i += 2
		}
	}
	return true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

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

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
	pathModels      = []byte("/v1/models")
	pathV1          = []byte("/v1/")
	eventStream     = []byte("text/event-stream")
	keepAliveLine   = []byte(": keep-alive\n\n")
)

// handle is the API listener's handler: fasthttp calls it once the whole
// request is read.
func (g *Gateway) handle(rc *fasthttp.RequestCtx) {
	path := rc.Path()
	switch {
	case bytes.Equal(path, pathChat), bytes.Equal(path, pathCompletions):
		if !rc.IsPost() {
			rc.Response.Header.Set("Allow", "POST")
			writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use POST for "+string(path))
			return
		}
		g.serveAPI(rc, true)
	case bytes.Equal(path, pathModels) && g.state.Load().modelList != nil:
		if !rc.IsGet() {
			rc.Response.Header.Set("Allow", "GET")
			writeError(rc, http.StatusMethodNotAllowed, openai.TypeInvalidRequest, "method_not_allowed", "use GET for /v1/models")
			return
		}
		rc.SetContentType("application/json")
		rc.SetBody(g.state.Load().modelList)
	case bytes.HasPrefix(path, pathV1):
		g.serveAPI(rc, false)
	case string(path) == "/healthz":
		rc.Response.Header.Set("X-Infergate-Config-Hash", g.state.Load().configHash)
		rc.SetContentType("text/plain")
		rc.SetBodyString("ok\n")
	case string(path) == "/readyz":
		rc.SetContentType("text/plain")
		if g.Ready() {
			rc.SetBodyString("ready\n")
		} else {
			rc.SetStatusCode(http.StatusServiceUnavailable)
			rc.SetBodyString("no healthy backend\n")
		}
	default:
		writeError(rc, http.StatusNotFound, openai.TypeNotFound, "not_found", "no route for "+string(path))
	}
}

// readError answers requests fasthttp could not read: too large, or
// malformed at the HTTP level. It runs instead of handle.
func (g *Gateway) readError(rc *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(rc, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
		return
	}
	var se interface{ Timeout() bool }
	if errors.As(err, &se) && se.Timeout() {
		writeError(rc, http.StatusRequestTimeout, openai.TypeInvalidRequest, "request_timeout", "the request was not read in time")
		return
	}
	writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request", "malformed HTTP request")
}

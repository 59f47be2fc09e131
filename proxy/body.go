package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// Request bodies are read as they arrive. The server streams them
// (StreamRequestBody): fasthttp reads at most 8 KiB of a body before the
// handler runs, so a connection that declares an 8 MiB body and sends
// nothing holds 8 KiB, not 8 MiB. The handler reads the rest into
// fasthttp's pooled body buffer, growing it with the bytes that come,
// bounded by server.max_body_bytes, and within server.read_timeout, the
// deadline fasthttp set on the connection for the request.

var (
	errBodyTooLarge = errors.New("proxy: request body exceeds server.max_body_bytes")
	errBodyRead     = errors.New("proxy: request body not read whole")
)

// readBody returns the whole request body.
func (g *Gateway) readBody(rc *fasthttp.RequestCtx) ([]byte, error) {
	req := &rc.Request
	if !req.IsBodyStream() {
		return req.Body(), nil
	}
	limit := g.state.Load().cfg.Server.MaxBodyBytes
	switch cl := req.Header.ContentLength(); {
	case cl > limit:
		return nil, errBodyTooLarge
	case cl >= 0:
		// fasthttp reads exactly cl bytes; a read that fails leaves its
		// error's text as the body, which the length gives away.
		body := req.Body()
		if len(body) != cl {
			return nil, fmt.Errorf("%w: %s", errBodyRead, body)
		}
		return body, nil
	}
	// Chunked: bounded by the limit as it is read.
	b, err := io.ReadAll(io.LimitReader(req.BodyStream(), int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBodyRead, err)
	}
	if len(b) > limit {
		return nil, errBodyTooLarge
	}
	req.SetBodyRaw(b)
	return b, nil
}

// bodyError answers a request whose body could not be read; the
// connection is closed, since what is left of the body is unread.
func (g *Gateway) bodyError(rc *fasthttp.RequestCtx, err error) {
	rc.SetConnectionClose()
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeError(rc, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
	case isTimeout(err) || errors.Is(err, errBodyRead) && isTimeoutText(err):
		writeError(rc, http.StatusRequestTimeout, openai.TypeInvalidRequest, "request_timeout", "the request body was not read in time")
	default:
		writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request", "the request body could not be read")
	}
}

// isTimeoutText tells a timeout that fasthttp reported as the body's text.
func isTimeoutText(err error) bool {
	s := err.Error()
	return strings.Contains(s, "timeout") || strings.Contains(s, "deadline exceeded")
}

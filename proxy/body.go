package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// Request bodies are read as they arrive. The server streams them
// (StreamRequestBody): fasthttp reads at most 8 KiB of a body before the
// handler runs, so a connection that declares an 8 MiB body and sends
// nothing holds 8 KiB, not 8 MiB. The handler reads the rest into a
// pooled buffer, growing it only with bytes that came, bounded by
// server.max_body_bytes, and within server.read_timeout, the deadline
// fasthttp set on the connection for the request.

var (
	errBodyTooLarge = errors.New("proxy: request body exceeds server.max_body_bytes")
	errBodyRead     = errors.New("proxy: request body not read whole")
)

// bodyPool holds the buffers bodies are read into; a buffer past
// maxPooledBody is left to the collector.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBody = 1 << 20

// body is a request's body, read whole; release gives its buffer back
// once nothing refers to it (the upstream request holds a copy).
type body struct {
	b   []byte
	buf *[]byte
}

func (b *body) release() {
	if b.buf != nil && cap(*b.buf) <= maxPooledBody {
		*b.buf = b.b[:0]
		bodyPool.Put(b.buf)
	}
	b.buf, b.b = nil, nil
}

// readBody reads the whole request body.
func (g *Gateway) readBody(rc *fasthttp.RequestCtx) (body, error) {
	req := &rc.Request
	if !req.IsBodyStream() {
		return body{b: req.Body()}, nil
	}
	limit := g.state.Load().cfg.Server.MaxBodyBytes
	cl := req.Header.ContentLength()
	if cl > limit {
		return body{}, errBodyTooLarge
	}
	buf := bodyPool.Get().(*[]byte)
	b := (*buf)[:0]
	r := req.BodyStream()
	for {
		if len(b) == cap(b) {
			// Grow with what came, never to a declared size ahead of it.
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > limit {
			*buf = b[:0]
			bodyPool.Put(buf)
			return body{}, errBodyTooLarge
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*buf = b[:0]
			bodyPool.Put(buf)
			return body{}, fmt.Errorf("%w: %w", errBodyRead, err)
		}
	}
	if cl >= 0 && len(b) != cl {
		*buf = b[:0]
		bodyPool.Put(buf)
		return body{}, fmt.Errorf("%w: %d of %d bytes", errBodyRead, len(b), cl)
	}
	return body{b: b, buf: buf}, nil
}

// bodyError answers a request whose body could not be read; the
// connection is closed, since what is left of the body is unread.
func (g *Gateway) bodyError(rc *fasthttp.RequestCtx, err error) {
	rc.SetConnectionClose()
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeError(rc, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body exceeds %d bytes", g.state.Load().cfg.Server.MaxBodyBytes))
	case isTimeout(err):
		writeError(rc, http.StatusRequestTimeout, openai.TypeInvalidRequest, "request_timeout", "the request body was not read in time")
	default:
		writeError(rc, http.StatusBadRequest, openai.TypeInvalidRequest, "bad_request", "the request body could not be read")
	}
}

package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// The response: the chosen backend's status and headers go to the client;
// a stream is handed to the hijacked connection (hijack.go), any other
// body is read whole, bounded, and sent. fail answers a request that got
// no usable response at all.

// commit sends the chosen backend's response: a stream is relayed event
// by event after the handler returns; any other body is read whole first.
func (x *exchange) commit(rc *fasthttp.RequestCtx) {
	if x.cls.armed && !x.firstByte() {
		x.failPreempted(rc)
		return
	}
	up := x.up
	x.status = up.Resp.StatusCode()
	rc.SetStatusCode(x.status)
	if st, ok := openai.ServerTimingOfHeaders(up.Resp.Header.Peek); ok {
		x.tl.Server = st // TGI; a body's own account replaces it
	}
	copyResponseHeaders(&rc.Response.Header, &up.Resp.Header)
	if bytes.HasPrefix(up.Resp.Header.ContentType(), eventStream) && x.status < 300 {
		rc.Response.Header.Set("X-Accel-Buffering", "no")
		x.streamResponse(rc, x)
		return
	}
	wb := wholePool.Get().(*[]byte)
	body, err := x.readWhole((*wb)[:0])
	handed := false // the pair took body (finishWith hands it on before this returns)
	defer func() {
		// The buffer read into goes back, unless it grew past what is
		// worth keeping (then the one taken goes back), or a pair took it.
		if handed {
			*wb = nil
		} else if body != nil && cap(body) <= maxPooledWhole {
			*wb = body[:0]
		}
		wholePool.Put(wb)
	}()
	if err != nil {
		rc.Response.Reset()
		rc.Response.Header.Set("X-Request-Id", x.id)
		if x.cls.on {
			rc.Response.Header.Set(hdrClass, x.cls.class.String())
		}
		ce := errorResponse(err)
		x.err = err
		x.finishWith(ce.status, ce.outcome)
		if ce.status != 499 {
			writeError(rc, ce.status, ce.typ, ce.code, ce.msg)
		}
		return
	}
	if x.status >= 300 {
		// An error's body is the backend's words about the request, the
		// credential it was sent among them at times.
		body = redactKey(body, x.sentAuthorization(rc))
	}
	if x.cls.tier && x.status < 300 {
		body = x.echoTier(body)
	}
	if cap(body) <= maxPooledWhole {
		rc.Response.SetBody(body) // a copy: the buffer goes back to the pool
	} else {
		rc.Response.SetBodyRaw(body) // not pooled: no copy
	}
	if x.pair != nil {
		// The pair reads the answer's text on the recorder's goroutine,
		// not here: it takes the buffer the response was copied from, or
		// a copy when the response holds that buffer itself.
		a := x.pair.Served()
		if cap(body) <= maxPooledWhole {
			a.Body, handed = body, true
		} else {
			a.Body = bytes.Clone(body)
		}
	}
	if x.timing {
		a := x.tl.Attribute(time.Now())
		rc.Response.Header.SetBytesV("Server-Timing", a.AppendServerTiming(nil))
	}
	x.finishWith(x.status, statusOutcome(x.status))
}

func statusOutcome(status int) string {
	switch {
	case status >= 500:
		return outcomeBackend5xx
	case status >= 400:
		return outcomeBackend4xx
	}
	return outcomeOK
}

// wholePool holds the buffers plain answers are read into: the answer is
// copied into the response (fasthttp's own pooled buffer) and the buffer
// comes back, so a small answer costs no allocation.
var wholePool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledWhole is the largest buffer kept in wholePool; larger answers
// are read into a buffer of their own and sent without a copy.
const maxPooledWhole = 64 << 10

// readWhole reads a non-streamed body into buf, bounded in size and by the
// idle timeout between reads, and returns it (grown when needed).
func (x *exchange) readWhole(buf []byte) ([]byte, error) {
	limit := x.st.cfg.Server.MaxResponseBytes
	idle := x.st.cfg.Timeouts.Idle
	if n := x.up.Resp.Header.ContentLength(); n > cap(buf) && n <= limit {
		buf = make([]byte, 0, n)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		if !x.up.Body.Ready() {
			// Only a read that may wait on the backend needs the bound:
			// a small answer is usually whole in the reader already.
			_ = x.up.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := x.up.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errResponseTooLarge
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				x.reuse = true
				x.tl.Done = time.Now()
				if u, ok := openai.UsageOf(buf); ok {
					x.tl.PromptTokens, x.tl.OutputTokens = u.PromptTokens, u.CompletionTokens
					x.tl.CachedTokens, x.tl.CachedReported = u.Cached()
					x.tl.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
				}
				if st, ok := openai.ServerTimingOf(buf); ok {
					x.tl.Server = st
				}
				if x.tally.Responses {
					x.tl.FinishReason = openai.ResponseFinish(buf)
					if x.key != nil { // selection prefix: its sessions learn the stored response
						x.tally.ResponseID = responseIDSum(buf)
					}
				} else if f := openai.FinishReason(buf); f != nil {
					x.tl.FinishReason = openai.FinishString(f)
				}
				return buf, nil
			}
			return nil, x.readErr(err)
		}
	}
}

// readErr names why reading the backend's body stopped.
func (x *exchange) readErr(err error) error {
	if cause := x.ctx.Cause(); cause != nil {
		return cause
	}
	if isTimeout(err) {
		return errIdleTimeout
	}
	return fmt.Errorf("%w: %w", errEndedEarly, err)
}

// fail answers a request that got no usable backend response.
func (x *exchange) fail(rc *fasthttp.RequestCtx, err error) {
	x.err = err
	ce := errorResponse(err)
	x.tl.Done = time.Now()
	if ce.status == 499 {
		rc.SetConnectionClose()
	} else {
		if ra := x.retryAfter(err); ra != "" {
			rc.Response.Header.Set("Retry-After", ra)
		}
		x.refusalHeaders(rc, err)
		writeError(rc, ce.status, ce.typ, ce.code, ce.msg)
	}
	x.finishWith(ce.status, ce.outcome)
}

func (x *exchange) retryAfter(err error) string {
	switch {
	case errors.Is(err, errShed), errors.Is(err, errPreempted):
		return strconv.Itoa(int(x.g.lim.RetryAfter() / time.Second))
	case errors.Is(err, errBackendsFull):
		return strconv.Itoa(int(refusalHold / time.Second))
	case errors.Is(err, ErrNoBackend) || errors.Is(err, errShutdown):
		return "1"
	}
	return ""
}

package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// Keep-alive comments: a stream whose backend is slow to its first event
// is committed after keepalive.delay and kept open with comment lines
// until the backend answers.

// forwardWithKeepAlive forwards off the handler goroutine. If no first
// event arrives within the delay, it commits a 200 event stream and sends
// comment lines until the backend answers; failover is then over for this
// request, and any failure ends the stream with an SSE error event.
func (x *exchange) forwardWithKeepAlive(rc *fasthttp.RequestCtx, ka KeepAlive) {
	res := make(chan error, 1)
	go x.forwardSafely(res)
	t := time.NewTimer(ka.Delay)
	select {
	case err := <-res:
		t.Stop()
		if err != nil {
			x.fail(rc, err)
			return
		}
		x.commit(rc)
		return
	case <-t.C:
	}
	if x.cls.armed && !x.firstByte() {
		<-res // forward ends with the request (preempted): x is ours again
		x.failPreempted(rc)
		return
	}
	x.status = http.StatusOK
	rc.SetStatusCode(http.StatusOK)
	rc.SetContentType("text/event-stream")
	rc.Response.Header.Set("Cache-Control", "no-cache")
	rc.Response.Header.Set("X-Accel-Buffering", "no")
	x.streamResponse(rc, &keepAliveStream{x: x, res: res, interval: ka.Interval})
}

// keepAliveStream is the body of a stream committed before its backend
// answered: comment lines until then, then the relay.
type keepAliveStream struct {
	x        *exchange
	res      chan error // forward's result
	answered bool       // res was read
	interval time.Duration
}

func (k *keepAliveStream) ready() bool { return false }

func (k *keepAliveStream) body(w *bufio.Writer) {
	x := k.x
	tick := time.NewTicker(k.interval)
	defer tick.Stop()
	alive := true
	send := func() {
		if !alive {
			return
		}
		if _, err := w.Write(keepAliveLine); err != nil || w.Flush() != nil {
			alive = false
			x.ctx.Cancel(errClientGone)
		}
	}
	send()
	for {
		select {
		case <-tick.C:
			send()
			continue
		case err := <-k.res:
			k.answered = true
			if err == nil && (x.up.Resp.StatusCode() >= 300 || !bytes.HasPrefix(x.up.Resp.Header.ContentType(), eventStream)) {
				err = fmt.Errorf("%w: status %d after the stream was committed", errUpstream, x.up.Resp.StatusCode())
			}
			if err != nil || !alive {
				if err == nil {
					err = errClientGone
				}
				x.failStream(w, err)
				return
			}
			x.relayStream(w)
			return
		}
	}
}

// abandon ends the request when its body will never run: it waits for
// forward (which the cancelled context cuts short) and releases all.
func (k *keepAliveStream) abandon() {
	err := <-k.res
	if err == nil {
		err = errClientGone
	}
	k.x.failStream(nil, err)
}

// release ends a keep-alive stream after a panic: its forwarding may still
// run, so it is cancelled and awaited before anything is released.
func (k *keepAliveStream) release(err error) {
	x := k.x
	if x.finished {
		return
	}
	x.ctx.Cancel(err)
	if !k.answered {
		<-k.res
		k.answered = true
	}
	x.failStream(nil, err)
}

// failStream ends a committed stream that never got a backend stream; w
// is nil when nothing can be written.
func (x *exchange) failStream(w *bufio.Writer, err error) {
	x.err = err
	x.tl.Done = time.Now()
	ce := errorResponse(err)
	if ce.status != 499 && w != nil {
		_, _ = w.Write(x.errorEvent(ce))
		_ = w.Flush()
	}
	if x.er != nil {
		x.putReader(x.er)
	}
	x.finishWith(ce.status, ce.outcome)
}

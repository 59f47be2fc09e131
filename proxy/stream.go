package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
)

// A relayed stream's life on the hijacked connection: its first event
// awaited (so the headers can leave with it), the relay (relay.go), and
// an honest end: an SSE error event when it did not end well.

// body runs on the client connection once the handler has returned (see
// streamResponse): it relays the events, then ends the stream honestly.
func (x *exchange) body(w *bufio.Writer) { x.relayStream(w) }

// abandon releases a stream whose body will never run.
func (x *exchange) abandon() {
	x.err = fmt.Errorf("%w before its stream started", errClientGone)
	if x.er != nil {
		x.putReader(x.er)
	}
	x.finishWith(499, outcomeClientGone)
}

// release ends the request after a panic on its stream.
func (x *exchange) release(err error) {
	if x.finished {
		return
	}
	x.failStream(nil, err)
}

// errorEvent is the event that ends the stream after its first byte
// when it did not end well: data: {"error":{...}} on a chat or completion
// stream, the Responses API's own error event on one of its streams.
func (x *exchange) errorEvent(ce clientError) []byte {
	if x.tally.Responses {
		return openai.AppendResponsesSSEError(nil, ce.code, ce.msg)
	}
	return openai.AppendSSEError(nil, ce.typ, ce.code, ce.msg)
}

func (x *exchange) relayStream(w *bufio.Writer) {
	x.g.fail.at("stream", x.id)
	er := x.reader()
	cfg := &x.st.cfg
	out := relay(w, er, x.up, cfg.Timeouts.FirstByte, cfg.Timeouts.Idle, &x.tl, &x.tally, x.relayMode())
	x.endStream(w, out)
	x.putReader(er)
}

// ready reports whether the stream's first event has fully arrived (with
// the headers, typically), reading nothing that is not there yet.
func (x *exchange) ready() bool {
	if x.er == nil {
		x.er = readerPool.Get().(*openai.EventReader)
		x.er.Reset(&x.up.Body, nil, maxEventBytes)
	}
	return x.er.TryFill()
}

// endStream decides how a relayed stream ended and tells the client when
// it did not end well.
func (x *exchange) endStream(w *bufio.Writer, out relayOutcome) {
	var err error
	switch {
	case x.ctx.Cause() != nil:
		// Before a write error: a total timeout or a shutdown cuts a
		// blocked write short (hijack.go), and is the reason.
		err = x.ctx.Cause()
	case out.clientErr && isTimeout(w.Flush()): // a failed writer keeps its error
		err = fmt.Errorf("%w: a write blocked longer than server.write_timeout", errClientGone)
	case out.clientErr:
		err = errClientGone
	case errors.Is(out.err, io.EOF) && (x.tally.Done || x.tally.Finished()) && !x.tally.ErrorEvent:
		x.reuse = true
	case errors.Is(out.err, io.EOF) && x.tally.ErrorEvent:
		err = fmt.Errorf("%w: the backend sent an error event", errUpstream)
	case errors.Is(out.err, io.EOF) && x.tally.Responses:
		err = fmt.Errorf("%w: no response.completed or response.incomplete", errEndedEarly)
	case errors.Is(out.err, io.EOF):
		err = fmt.Errorf("%w: no finish_reason and no [DONE]", errEndedEarly)
	default:
		err = x.readErr(out.err)
	}
	x.tl.Done = time.Now()
	if err == nil {
		x.finishWith(x.status, outcomeOK)
		return
	}
	x.err = err
	ce := errorResponse(err)
	if ce.status != 499 && !x.tally.ErrorEvent {
		// After the first byte the status is sent; the stream's last event
		// says what went wrong.
		_, _ = w.Write(x.errorEvent(ce))
		_ = w.Flush()
	}
	x.finishWith(ce.status, ce.outcome)
}

func (x *exchange) reader() *openai.EventReader {
	if x.er != nil {
		return x.er // made by ready or the keep-alive path
	}
	er := readerPool.Get().(*openai.EventReader)
	er.Reset(&x.up.Body, nil, maxEventBytes)
	return er
}

func (x *exchange) putReader(er *openai.EventReader) {
	er.Reset(nil, nil, maxEventBytes)
	if er.Cap() <= 64<<10 {
		readerPool.Put(er)
	}
	x.er = nil
}

// fillFirst waits for the first event of a stream, keeping it buffered.
func (x *exchange) fillFirst() {
	x.er = readerPool.Get().(*openai.EventReader)
	x.er.Reset(&x.up.Body, nil, maxEventBytes)
	_ = x.up.SetReadDeadline(time.Now().Add(x.st.cfg.Timeouts.FirstByte))
	x.er.Fill()
}

func (x *exchange) relayMode() relayMode {
	if x.pair != nil {
		x.tally.TextLimit = mirror.MaxCapture // the primary's half of the pair
	}
	return relayMode{timing: x.timing, stripUsage: x.pol.StripUsage, prefill: &x.prefill}
}

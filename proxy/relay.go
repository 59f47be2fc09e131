package proxy

import (
	"bufio"
	"sync"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
)

// maxEventBytes bounds one SSE event held by the relay.
const maxEventBytes = 1 << 20

// readerPool holds event readers with their 4 KiB buffers, so a stream
// allocates nothing per event and little per request.
var readerPool = sync.Pool{New: func() any { return openai.NewEventReader(nil, make([]byte, 4096), maxEventBytes) }}

// readDeadliner is the part of the backend connection the relay uses.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// relayMode is what the relay adds to or takes from a stream.
type relayMode struct {
	// timing: the client asked for the gateway's timeline on the usage
	// chunk; stripUsage: the policy asked the backend for a usage chunk
	// the client did not ask for.
	timing, stripUsage bool
	// capture, when set (a mirrored request), collects the answer's text.
	capture *[]byte
}

// relayOutcome is how a relayed stream ended.
type relayOutcome struct {
	// err is the read error that ended the stream (io.EOF at a clean end).
	err error
	// clientErr is set when writing to the client failed: it is gone.
	clientErr bool
	// done and finish tell whether [DONE] and a finish_reason were seen;
	// backendError whether the backend sent an in-stream error object.
	done, finish, backendError bool
}

// relay copies events from er to w as they arrive, unchanged. It flushes
// whenever the next event cannot be had without waiting, so an event never
// waits for the next one, while events that arrived together leave in one
// write. conn is the backend connection: before each read that may block it
// gets a deadline, the first-byte timeout until content starts and the idle
// timeout after. The timeline gets the first and last content events,
// counts and relay time. With m.timing set, the usage chunk carries the
// gateway's timeline (timing.go); with m.stripUsage (the gateway asked
// for the usage, the client did not), the usage chunk is read and not
// relayed.
func relay(w *bufio.Writer, er *openai.EventReader, conn readDeadliner, firstByte, idle time.Duration, tl *tracing.Timeline, m relayMode) relayOutcome {
	timing := m.timing
	var out relayOutcome
	var timed []byte
	content := false
	pending := 0
	// One clock reading per read from the backend: the events it brought
	// arrived together.
	readAt := time.Now()
	batchStart := readAt
	var dl coarseDeadline // the backend's read deadline
	for {
		ev, err := er.TryNext()
		if err == openai.ErrWouldBlock {
			// Nothing more has arrived: what is pending goes out now,
			// before the wait.
			if pending > 0 {
				if err := w.Flush(); err != nil {
					out.clientErr = true
					return out
				}
				now := time.Now()
				d := now.Sub(batchStart)
				tl.Relay += d
				tl.RelayMax = max(tl.RelayMax, d)
				if !content && !tl.FirstTokenIn.IsZero() {
					content = true
					tl.FirstTokenOut = now
				}
				pending = 0
			}
			d := idle
			if !content {
				d = firstByte
			}
			if now := time.Now(); dl.due(now, d) {
				_ = conn.SetReadDeadline(now.Add(d))
			}
			ev, err = er.Next()
			readAt = time.Now()
		}
		if err != nil {
			out.err = err
			if pending > 0 && w.Flush() != nil {
				out.clientErr = true
			}
			return out
		}
		if pending == 0 {
			batchStart = readAt
		}
		data := openai.EventData(ev)
		switch {
		case len(data) == 0 || out.finish:
			// comments, and what follows the finish (usage, [DONE])
			if openai.IsDoneData(data) {
				out.done = true
				break
			}
			ev = usage(ev, data, tl, timing, readAt, &timed)
			if m.stripUsage && !timing && openai.IsUsageOnly(data) {
				continue
			}
		case openai.IsDoneData(data):
			out.done = true
		case openai.IsErrorChunk(data):
			out.backendError = true
		case openai.HasFinishReason(data):
			out.finish = true
			tl.FinishReason = tracing.FinishReasonOf(openai.FinishReason(data))
			if openai.HasContent(data) { // vLLM puts the last token here
				tl.ContentEvents++
				if m.capture != nil && len(*m.capture) < maxCapture {
					*m.capture = openai.AppendContent(*m.capture, data)
				}
				tl.LastTokenIn = readAt
				if tl.FirstTokenIn.IsZero() {
					tl.FirstTokenIn = readAt
				}
			}
			// Some servers put the usage on the finishing chunk itself.
			ev = usage(ev, data, tl, timing, readAt, &timed)
		case !tl.FirstTokenIn.IsZero():
			// After the first content event, every chunk until the finish
			// carries output: no need to look inside.
			tl.LastTokenIn = readAt
			tl.ContentEvents++
			if m.capture != nil && len(*m.capture) < maxCapture {
				*m.capture = openai.AppendContent(*m.capture, data)
			}
		case openai.HasContent(data):
			tl.FirstTokenIn, tl.LastTokenIn = readAt, readAt
			tl.ContentEvents++
			if m.capture != nil && len(*m.capture) < maxCapture {
				*m.capture = openai.AppendContent(*m.capture, data)
			}
		}
		if _, err := w.Write(ev); err != nil {
			out.clientErr = true
			return out
		}
		tl.Events++
		pending++
	}
}

// usage reads the token counts of a chunk that carries usage into tl and,
// with timing, returns the chunk with the gateway's timing added (in
// *timed, reused); any other chunk is returned as it is. It is called only
// for chunks at or after the finish, never per token.
func usage(ev, data []byte, tl *tracing.Timeline, timing bool, readAt time.Time, timed *[]byte) []byte {
	// vLLM's per-request metrics ride on the usage chunk, llama.cpp's
	// timings on the finishing one: read before the timing is added.
	if st, ok := openai.ServerTimingOf(data); ok {
		tl.Server = st
	}
	u, ok := openai.UsageOf(data)
	if !ok {
		return ev
	}
	tl.PromptTokens, tl.OutputTokens = u.PromptTokens, u.CompletionTokens
	if !timing {
		return ev
	}
	ttft := tl.TTFT()
	if ttft == 0 && !tl.FirstTokenIn.IsZero() {
		// The first token came in this same batch: not flushed yet, it
		// leaves with this write.
		ttft = tl.FirstTokenIn.Sub(tl.Received)
	}
	*timed = appendTimed((*timed)[:0], ev, tl.Attribute(readAt), ttft)
	return *timed
}

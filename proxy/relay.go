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
	// prefill is the stream's share of its backend's prompt tokens to
	// prefill, given back at its first content event (nil: none).
	prefill *prefillCharge
}

// relayOutcome is how a relayed stream ended.
type relayOutcome struct {
	// err is the read error that ended the stream (io.EOF at a clean end).
	err error
	// clientErr is set when writing to the client failed: it is gone.
	clientErr bool
}

// relay copies events from er to w as they arrive, unchanged. It flushes
// whenever the next event cannot be had without waiting, so an event never
// waits for the next one, while events that arrived together leave in one
// write. conn is the backend connection: before each read that may block it
// gets a deadline, the first-byte timeout until content starts and the idle
// timeout after. Each event is accounted by t (openai.Tally, the one rule
// bench and the mirror count by too: content, finish, usage, [DONE],
// in-stream errors; its text when t.TextLimit is set); the timeline gets
// the first and last content events, the counts and the relay time. With
// m.timing set, the usage chunk carries the gateway's timeline (timing.go);
// with m.stripUsage (the gateway asked for the usage, the client did not),
// the usage chunk is read and not relayed.
func relay(w *bufio.Writer, er *openai.EventReader, conn readDeadliner, firstByte, idle time.Duration, tl *tracing.Timeline, t *openai.Tally, m relayMode) relayOutcome {
	var out relayOutcome
	var timed []byte
	content, output := false, false
	pending := 0
	// One clock reading per read from the backend: the events it brought
	// arrived together.
	readAt := time.Now()
	batchStart := readAt
	var dl coarseDeadline // the backend's read deadline
	defer func() {
		tl.ContentEvents = t.ContentEvents
		tl.FinishReason = t.Finish
	}()
	// flush sends what is pending and stamps the batch's relay time and
	// the first token and output out. A stream whose last read brought
	// the end with it (the whole answer in one read) leaves here too.
	flush := func() (time.Time, bool) {
		if err := w.Flush(); err != nil {
			return time.Time{}, false
		}
		now := time.Now()
		d := now.Sub(batchStart)
		tl.Relay += d
		tl.RelayMax = max(tl.RelayMax, d)
		if !content && !tl.FirstTokenIn.IsZero() {
			content = true
			tl.FirstTokenOut = now
		}
		if !output && !tl.FirstOutputIn.IsZero() {
			output = true
			tl.FirstOutputOut = now
		}
		pending = 0
		return now, true
	}
	for {
		ev, err := er.TryNext()
		if err == openai.ErrWouldBlock {
			// Nothing more has arrived: what is pending goes out now,
			// before the wait.
			var now time.Time
			if pending > 0 {
				var ok bool
				if now, ok = flush(); !ok {
					out.clientErr = true
					return out
				}
			} else {
				now = time.Now()
			}
			d := idle
			if !content {
				d = firstByte
			}
			// The flush's own clock reading serves the deadline too: one
			// reading fewer per batch.
			if dl.due(now, d) {
				_ = conn.SetReadDeadline(now.Add(d))
			}
			ev, err = er.Next()
			readAt = time.Now()
		}
		if err != nil {
			out.err = err
			if pending > 0 {
				if _, ok := flush(); !ok {
					out.clientErr = true
				}
			}
			return out
		}
		if pending == 0 {
			batchStart = readAt
		}
		data := openai.EventData(ev)
		n := t.ContentEvents
		kind, usage := t.Add(data, readAt)
		if t.ContentEvents > n {
			tl.LastTokenIn = t.LastContent
			if tl.FirstTokenIn.IsZero() {
				tl.FirstTokenIn = t.FirstContent
				m.prefill.release()
			}
			if tl.FirstOutputIn.IsZero() {
				tl.FirstOutputIn = t.FirstOutput
			}
			tl.ReasoningEvents = t.ReasoningEvents // the timing on the usage reads it
		}
		if kind == openai.KindFinish || kind == openai.KindTrailer {
			// vLLM's per-request metrics ride on the usage chunk,
			// llama.cpp's timings on the finishing one: read before the
			// timing is added. Never per token: only at or after the
			// finish.
			if st, ok := openai.ServerTimingOf(data); ok {
				tl.Server = st
			}
		}
		if usage {
			tl.PromptTokens, tl.OutputTokens = t.Usage.PromptTokens, t.Usage.CompletionTokens
			tl.CachedTokens, tl.CachedReported = t.Usage.Cached()
			tl.ReasoningTokens = t.Usage.CompletionTokensDetails.ReasoningTokens
			if m.stripUsage && !m.timing && openai.IsUsageOnly(data) {
				continue
			}
			if m.timing {
				ev = withTiming(ev, tl, readAt, &timed)
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

// withTiming returns the usage chunk ev with the gateway's timing added
// (in *timed, reused).
func withTiming(ev []byte, tl *tracing.Timeline, readAt time.Time, timed *[]byte) []byte {
	ttft := tl.TTFT()
	if ttft == 0 && !tl.FirstTokenIn.IsZero() {
		// The first token came in this same batch: not flushed yet, it
		// leaves with this write.
		ttft = tl.FirstTokenIn.Sub(tl.Received)
	}
	*timed = appendTimed((*timed)[:0], ev, tl.Attribute(readAt), ttft)
	return *timed
}

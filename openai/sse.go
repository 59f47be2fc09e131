package openai

import (
	"bytes"
	"errors"
	"io"
)

// Sentinel errors of event reading.
var (
	// ErrEventTooLarge means one event outgrew the reader's limit.
	ErrEventTooLarge = errors.New("openai: SSE event exceeds size limit")
	// ErrTruncatedEvent means the stream ended inside an event.
	ErrTruncatedEvent = errors.New("openai: stream ended inside an SSE event")
	// ErrWouldBlock is TryNext's answer when the next event has not fully
	// arrived.
	ErrWouldBlock = errors.New("openai: next event not yet arrived")
)

// EventReader splits a server-sent event stream into events without
// copying or re-encoding them: each event is returned as the raw bytes read,
// its terminating blank line included, so a relay can write it out exactly.
// It is not safe for concurrent use; the zero value is not usable.
type EventReader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	scan       int // bytes of buf[start:end] already searched for a boundary
	max        int
	pending    error // the error of the last read, reported once its data is used
	avail      Availer
}

// Availer is a reader that can tell whether a Read would return at once.
type Availer interface {
	Available() bool
}

// NewEventReader reads events from r using buf (which it may replace by a
// larger one, up to max bytes, for a long event).
func NewEventReader(r io.Reader, buf []byte, max int) *EventReader {
	er := &EventReader{}
	er.Reset(r, buf, max)
	return er
}

// Reset makes er read from r with buf, keeping no state from before. A nil
// buf keeps the reader's current buffer.
func (er *EventReader) Reset(r io.Reader, buf []byte, max int) {
	if len(buf) == 0 {
		buf = er.buf
	}
	if len(buf) == 0 {
		buf = make([]byte, 4096)
	}
	if max < len(buf) {
		max = len(buf)
	}
	*er = EventReader{r: r, buf: buf, max: max}
	er.avail, _ = r.(Availer)
}

// Cap returns the size of the reader's buffer.
func (er *EventReader) Cap() int { return len(er.buf) }

// TryNext is Next without waiting: it returns ErrWouldBlock unless the
// next event is buffered or can be completed from bytes the reader already
// holds (when it is an Availer).
func (er *EventReader) TryNext() ([]byte, error) { return er.take(er.fillWith(false)) }

// TryFill reads what the source already holds and reports whether Next
// would now return at once (an event, or the stream's end), consuming
// nothing.
func (er *EventReader) TryFill() bool {
	_, err := er.fillWith(false)
	return err != ErrWouldBlock
}

// Next returns the next event. The slice is valid until the next call. At a
// clean end of stream it returns io.EOF; a stream that ends in the middle of
// an event gives ErrTruncatedEvent; a read error is returned as it is, after
// the complete events that arrived before it.
func (er *EventReader) Next() ([]byte, error) { return er.take(er.fill()) }

// take consumes the n-byte event that fill found.
func (er *EventReader) take(n int, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	ev := er.buf[er.start : er.start+n]
	er.start += n
	er.scan = 0
	return ev, nil
}

// Fill blocks until a complete event is buffered, or the stream's end or
// error is known, without consuming anything: the next Next returns at
// once. It lets a caller wait for the first event in another goroutine.
func (er *EventReader) Fill() {
	if _, err := er.fill(); err != nil && er.pending == nil {
		er.pending = err
	}
}

// fill reads until buf[start:] begins with a complete event and returns
// its length.
func (er *EventReader) fill() (int, error) { return er.fillWith(true) }

func (er *EventReader) fillWith(block bool) (int, error) {
	for {
		if n := boundary(er.buf[er.start+er.scan : er.end]); n >= 0 {
			return er.scan + n, nil
		}
		if err := er.pending; err != nil {
			if err == io.EOF && len(bytes.TrimSpace(er.buf[er.start:er.end])) > 0 {
				return 0, ErrTruncatedEvent
			}
			return 0, err
		}
		// Keep the last two bytes unscanned: a boundary may straddle reads.
		if s := er.end - er.start - 2; s > er.scan {
			er.scan = s
		}
		if er.start > 0 && er.end == len(er.buf) {
			copy(er.buf, er.buf[er.start:er.end])
			er.end -= er.start
			er.start = 0
		}
		if er.end == len(er.buf) {
			if len(er.buf) >= er.max {
				return 0, ErrEventTooLarge
			}
			nb := make([]byte, min(2*len(er.buf), er.max))
			copy(nb, er.buf[:er.end])
			er.buf = nb
		}
		if !block && (er.avail == nil || !er.avail.Available()) {
			return 0, ErrWouldBlock
		}
		n, err := er.r.Read(er.buf[er.end:])
		er.end += n
		er.pending = err
	}
}

// boundary returns the length of the leading event in b, blank line
// included, or -1 when b holds no complete event. LF and CRLF line endings
// are both accepted.
func boundary(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		k := i + j + 1
		if k < len(b) && b[k] == '\n' {
			return k + 1
		}
		if k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n' {
			return k + 2
		}
		i = k
	}
	return -1
}

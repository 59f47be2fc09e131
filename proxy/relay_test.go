package proxy

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
)

// eventSource yields one event per Read, n times, then the tail, then EOF:
// a backend that flushes each event, as vLLM does.
type eventSource struct {
	ev, tail []byte
	n, i     int
}

func (s *eventSource) Read(p []byte) (int, error) {
	switch {
	case s.i < s.n:
		s.i++
		return copy(p, s.ev), nil
	case s.i == s.n:
		s.i++
		return copy(p, s.tail), nil
	}
	return 0, io.EOF
}

type noDeadline struct{}

func (noDeadline) SetReadDeadline(time.Time) error { return nil }

// countWriter counts Write calls, which are flushes of the bufio.Writer.
type countWriter struct{ writes, bytes int }

func (c *countWriter) Write(p []byte) (int, error) { c.writes++; c.bytes += len(p); return len(p), nil }

var benchEvent = []byte(chunk("hello"))

func TestRelayFlushesEachEventAndCounts(t *testing.T) {
	t.Parallel()
	src := &eventSource{ev: benchEvent, tail: []byte(finishEvent + doneEvent), n: 10}
	cw := &countWriter{}
	var tl tracing.Timeline
	var ta openai.Tally
	out := relay(bufio.NewWriter(cw), openai.NewEventReader(src, nil, 1<<20), noDeadline{}, time.Second, time.Second, &tl, &ta, relayMode{})
	if out.err != io.EOF || !ta.Done || !ta.Finished() || out.clientErr || ta.ErrorEvent {
		t.Fatalf("outcome %+v, tally %+v, want a clean EOF with finish and [DONE]", out, ta)
	}
	if tl.ContentEvents != 10 || ta.ContentEvents != 10 {
		t.Errorf("%d content events on the timeline, %d in the tally; want 10", tl.ContentEvents, ta.ContentEvents)
	}
	// 10 separate reads give 10 flushes; finish and [DONE] arrived in one
	// read and leave in one write.
	if cw.writes != 11 || tl.Events != 12 {
		t.Errorf("%d writes for %d events, want 11 writes for 12 events", cw.writes, tl.Events)
	}
	if tl.FirstTokenIn.IsZero() || tl.FirstTokenOut.Before(tl.FirstTokenIn) || tl.LastTokenIn.Before(tl.FirstTokenIn) {
		t.Errorf("timeline stamps out of order: %+v", tl)
	}
	if want := 10*len(benchEvent) + len(finishEvent+doneEvent); cw.bytes != want {
		t.Errorf("relayed %d bytes, want %d", cw.bytes, want)
	}
}

func TestRelayReportsClientGone(t *testing.T) {
	t.Parallel()
	src := &eventSource{ev: benchEvent, tail: []byte(doneEvent), n: 5}
	out := relay(bufio.NewWriterSize(failWriter{}, 16), openai.NewEventReader(src, nil, 1<<20), noDeadline{}, time.Second, time.Second, &tracing.Timeline{}, &openai.Tally{}, relayMode{})
	if !out.clientErr {
		t.Errorf("outcome %+v, want clientErr", out)
	}
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, io.ErrClosedPipe }

func BenchmarkRelay(b *testing.B) {
	er := openai.NewEventReader(nil, nil, 1<<20)
	w := bufio.NewWriter(io.Discard)
	src := &eventSource{ev: benchEvent, tail: []byte(doneEvent)}
	var tl tracing.Timeline
	b.ReportAllocs()
	b.SetBytes(int64(len(benchEvent)))
	const perStream = 200
	b.ResetTimer()
	for i := 0; i < b.N; i += perStream {
		src.n, src.i = perStream, 0
		er.Reset(src, nil, 1<<20)
		tl.Reset()
		relay(w, er, noDeadline{}, time.Second, time.Second, &tl, &openai.Tally{}, relayMode{})
	}
}

func TestEventReaderNoGrowthForSmallEvents(t *testing.T) {
	t.Parallel()
	er := readerPool.Get().(*openai.EventReader)
	er.Reset(strings.NewReader(strings.Repeat(string(benchEvent), 100)), nil, maxEventBytes)
	for {
		if _, err := er.Next(); err != nil {
			break
		}
	}
	if er.Cap() != 4096 {
		t.Errorf("buffer grew to %d for %d-byte events", er.Cap(), len(benchEvent))
	}
}

// oneRead yields the whole stream in one Read with io.EOF, as a body that
// arrived complete does.
type oneRead struct{ b []byte }

func (r *oneRead) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// A stream that arrives in one read still stamps its first token out:
// without it the request shows no TTFT, TPOT or speed.
func TestRelayStampsAStreamThatArrivedWhole(t *testing.T) {
	t.Parallel()
	for _, eofWithData := range []bool{true, false} {
		src := io.Reader(&oneRead{b: []byte(chunk("a") + chunk("b") + finishEvent + doneEvent)})
		if !eofWithData {
			src = &eventSource{tail: []byte(chunk("a") + chunk("b") + finishEvent + doneEvent)}
		}
		var tl tracing.Timeline
		tl.Received = time.Now()
		out := relay(bufio.NewWriter(io.Discard), openai.NewEventReader(src, nil, 1<<20), noDeadline{}, time.Second, time.Second, &tl, &openai.Tally{}, relayMode{})
		if out.err != io.EOF || out.clientErr {
			t.Fatalf("outcome %+v, want a clean EOF", out)
		}
		if tl.FirstTokenIn.IsZero() || tl.FirstTokenOut.IsZero() || tl.FirstTokenOut.Before(tl.FirstTokenIn) || tl.TTFT() <= 0 || tl.Relay <= 0 {
			t.Errorf("EOF with the data %v: first token in %v out %v, TTFT %v, relay %v", eofWithData, tl.FirstTokenIn, tl.FirstTokenOut, tl.TTFT(), tl.Relay)
		}
	}
}

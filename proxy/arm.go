package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/infergate/infergate/internal/roundtrip"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// The arms of a pair as the gateway sees them: the primary's answer
// taken from the finished exchange, and a copy's round trip to its pool,
// read in full and accounted by the rule the relay counts by
// (openai.Tally), timed from the moment each request was sent.

// primaryDone fills the answer of the arm that served the client from
// the finished exchange, and hands it to its flight.
func (x *exchange) primaryDone() {
	f := x.pair
	a := f.Served()
	tl := &x.tl
	if x.backend != nil {
		a.Backend = x.backend.name
	}
	a.Status = x.status
	if x.err != nil {
		a.Error = x.err.Error()
	}
	t := &x.tally
	if !tl.Sent.IsZero() {
		armTimes(&a.Arm, tl.Sent, t, tl.Done)
	}
	a.OutputTokens, a.PromptTokens, a.Finish = tl.OutputTokens, tl.PromptTokens, tl.FinishReason
	a.ReasoningTokens = tl.ReasoningTokens
	if tl.CachedReported {
		c := tl.CachedTokens
		a.CachedTokens = &c
	}
	if a.OutputTokens == 0 {
		a.OutputTokens = tl.ContentEvents
	}
	// The policy set the output limit: the judge counts a cut at it as
	// the policy's (a Responses cut on llama.cpp says completed, not length).
	a.ByPolicy = tl.Policy.MaxTokens > 0
	a.Text, a.ToolCalls = t.Text, t.ToolCalls // a plain answer's Body was handed over by commit
	t.Text = nil
	if x.outcome == outcomeClientGone && f.Stop != nil {
		// Nobody waits for this request any more: its copies stop too,
		// so no backend generates for nobody.
		f.Stop()
	}
	f.Done()
}

// armTimes sets an arm's TTFT, end-to-end time and TPOT from its send,
// its tally and the end of its answer (done, when it had no content).
func armTimes(a *mirror.Arm, sent time.Time, t *openai.Tally, done time.Time) {
	if t.ContentEvents > 0 {
		a.TTFTms = ms(t.FirstContent.Sub(sent))
		if t.ReasoningEvents > 0 && !t.FirstOutput.IsZero() {
			a.TTFOms = ms(t.FirstOutput.Sub(sent))
		}
		a.E2Ems = ms(t.LastContent.Sub(sent))
		if d := t.TPOT(); d > 0 {
			a.TPOTms = ms(d)
		}
	} else if !done.IsZero() {
		a.E2Ems = ms(done.Sub(sent))
	}
}

// armObserver times a copy's round trip (roundtrip.Observer).
type armObserver struct {
	b               *backend
	start, conn, at time.Time
}

func (o *armObserver) Starting()                { o.start = time.Now() }
func (o *armObserver) Connected(net.Conn, bool) { o.conn = time.Now() }
func (o *armObserver) Sent(net.Conn)            { o.at = time.Now() }
func (o *armObserver) Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader {
	if last != nil {
		return nil
	}
	return o.b.hc.AcquireReader(conn)
}
func (o *armObserver) ReleaseReader(br *bufio.Reader) { o.b.hc.ReleaseReader(br) }

// readArm sends req to b and reads its answer in full into a, timed as
// the primary is. It reports whether the backend did its part (for its
// breaker): any answer but a 5xx or a failure.
func readArm(ctx context.Context, b *backend, req *fasthttp.Request, stream, responses bool, t Timeouts, a *mirror.Answer, maxBody int) bool {
	obs := &armObserver{b: b}
	wait := time.Duration(0)
	if stream {
		wait = t.FirstByte
	}
	trip, err := roundtrip.Do(ctx, b.hc, req, roundtrip.Options{Connect: t.Connect, Deadline: wait, Peer: &b.peer}, obs)
	if err != nil {
		a.Error = string(redactKey([]byte(err.Error()), []byte(b.auth)))
		return false
	}
	resp := trip.Resp
	a.Status = resp.StatusCode()
	sse := bytes.HasPrefix(resp.Header.ContentType(), eventStream) && a.Status < 300
	fasthttp.ReleaseResponse(resp)
	ta := openai.Tally{TextLimit: mirror.MaxCapture, Responses: responses}
	var done time.Time
	trip.DeadlineSet = true // both readers bound their reads
	if sse {
		done, err = readArmStream(trip.Conn, &trip.Body, t, &ta)
	} else {
		done, err = readArmBody(trip.Conn, &trip.Body, t, &ta, a, maxBody, []byte(b.auth))
	}
	trip.Finish(err == nil)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The connection was closed under the reader: say why.
		err = fmt.Errorf("the copy ran past timeouts.total (%v): deadline exceeded", t.Total)
	}
	if err != nil && a.Error == "" {
		// A transport error can quote what the backend sent.
		a.Error = string(redactKey([]byte(err.Error()), []byte(b.auth)))
	}
	if ta.ErrorEvent && a.Error == "" {
		a.Error = "the backend sent an error event"
	}
	armTimes(&a.Arm, obs.at, &ta, done)
	if !sse {
		a.TTFTms = 0 // a first token is a stream's figure, as the primary's
	}
	a.OutputTokens, a.Finish, a.Text, a.ToolCalls = ta.OutputTokens(), ta.Finish, ta.Text, ta.ToolCalls
	if ta.HasUsage {
		a.PromptTokens = ta.Usage.PromptTokens
		a.ReasoningTokens = ta.Usage.CompletionTokensDetails.ReasoningTokens
		if c, ok := ta.Usage.Cached(); ok {
			a.CachedTokens = &c
		}
	}
	if !sse {
		a.TTFOms = 0
	}
	return err == nil && a.Status < 500
}

// readArmStream reads a stream's events into ta, each read bounded by
// the first-byte timeout until content starts and the idle timeout
// after; it returns when the stream ended.
func readArmStream(conn net.Conn, body io.Reader, t Timeouts, ta *openai.Tally) (time.Time, error) {
	er := readerPool.Get().(*openai.EventReader)
	defer readerPool.Put(er)
	er.Reset(body, nil, maxEventBytes)
	for {
		d := t.Idle
		if ta.ContentEvents == 0 {
			d = t.FirstByte
		}
		_ = conn.SetReadDeadline(time.Now().Add(d))
		ev, err := er.Next()
		now := time.Now()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return now, nil
			}
			return now, err
		}
		ta.Add(openai.EventData(ev), now)
	}
}

// readArmBody reads a whole body, bounded by maxBody and timeouts.total;
// a success's body goes to a (its text is read by the recorder), an
// error's first bytes, with the key of auth redacted, to its error.
func readArmBody(conn net.Conn, body io.Reader, t Timeouts, ta *openai.Tally, a *mirror.Answer, maxBody int, auth []byte) (time.Time, error) {
	_ = conn.SetReadDeadline(time.Now().Add(t.Total))
	b, err := io.ReadAll(io.LimitReader(body, int64(maxBody)+1))
	done := time.Now()
	if err != nil {
		return done, err
	}
	if len(b) > maxBody {
		return done, errResponseTooLarge
	}
	if a.Status >= 300 {
		b = redactKey(b, auth) // before the cut: no half of a key stays
		a.Error = fmt.Sprintf("status %d: %s", a.Status, b[:min(len(b), 200)])
		return done, nil
	}
	ta.AddBody(b, done)
	ta.Text = ta.Text[:min(len(ta.Text), mirror.MaxCapture)]
	return done, nil
}

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/quality"
)

// parser reads responses; one per goroutine, reused across requests.
type parser struct {
	er   *openai.EventReader
	text []byte
	body []byte
	// contentType is the response's, for an error's text.
	contentType []byte
	count       func(string) int // counts tokens when the server reports no usage
	jd          *quality.Judge   // nil judges nothing
	tally       openai.Tally
	// keepAll keeps the whole text; otherwise only its head (headBytes).
	keepAll    bool
	keepEvents bool
	gaps       []time.Duration
	flushGaps  func([]time.Duration)
	// br reads a response; pre is its source: the connection, after any
	// bytes carried over from a smaller reader.
	br  *bufio.Reader
	pre prefixReader
	// r is the result of the request under way (the round trip's
	// observer stamps it).
	r *Result
	// cacheN and promptN are llama.cpp's timings.cache_n and prompt_n of
	// the answer under way, -1 until seen.
	cacheN, promptN int
}

// timings reads llama.cpp's top-level "timings" object from a chunk or
// body, when it has one with cache_n.
func (p *parser) timings(data []byte) {
	i := bytes.Index(data, keyTimings)
	if i < 0 {
		return
	}
	var t struct {
		CacheN  *int `json:"cache_n"`
		PromptN *int `json:"prompt_n"`
	}
	if json.NewDecoder(bytes.NewReader(data[i+len(keyTimings)-1:])).Decode(&t) != nil || t.CacheN == nil || *t.CacheN < 0 {
		return
	}
	p.cacheN, p.promptN = *t.CacheN, 0
	if t.PromptN != nil && *t.PromptN > 0 {
		p.promptN = *t.PromptN
	}
}

// The parser observes its request's round trips (roundtrip.Observer).

func (p *parser) Starting()                   { p.r.Sent = time.Now() }
func (p *parser) Connected(net.Conn, bool)    {}
func (p *parser) Sent(net.Conn)               {}
func (p *parser) ReleaseReader(*bufio.Reader) {}

// Reader is the parser's small reader, or, when the headers did not fit
// it, a larger one holding what it read.
func (p *parser) Reader(conn net.Conn, last *bufio.Reader) *bufio.Reader {
	if last == nil {
		return p.reader(conn)
	}
	return p.bigReader(last, conn)
}

// reader returns the parser's small reader set to read conn: response
// headers and body are read through it, so an open stream holds 512
// bytes of read buffer, not the 4 KiB a header parser usually asks for.
func (p *parser) reader(conn io.Reader) *bufio.Reader {
	p.pre.buf, p.pre.off, p.pre.r = nil, 0, conn
	if p.br == nil {
		// Large body reads bypass it; it holds the headers, chunk-size
		// lines and the odd partial event.
		p.br = bufio.NewReaderSize(&p.pre, 512)
	} else {
		p.br.Reset(&p.pre)
	}
	return p.br
}

// bigReader returns a 16 KiB reader of what small holds, then conn: for
// the rare response whose headers do not fit the small reader.
func (p *parser) bigReader(small *bufio.Reader, conn io.Reader) *bufio.Reader {
	head, _ := small.Peek(small.Buffered())
	p.pre.buf, p.pre.off, p.pre.r = bytes.Clone(head), 0, conn
	return bufio.NewReaderSize(&p.pre, 16<<10)
}

// prefixReader reads buf, then r.
type prefixReader struct {
	buf []byte
	off int
	r   io.Reader
}

func (pr *prefixReader) Read(b []byte) (int, error) {
	if pr.off < len(pr.buf) {
		n := copy(b, pr.buf[pr.off:])
		pr.off += n
		if pr.off == len(pr.buf) {
			pr.buf = nil // not held for the rest of a long stream
		}
		return n, nil
	}
	return pr.r.Read(b)
}

// headBytes of an answer are kept at least: what the refusal patterns
// read, and the empty-answer check.
const headBytes = quality.Opening

// checkUsage says whether answer i is counted with the tokenizer to
// check the usage the server reports: every 16th of the first 4096, then
// every 256th, so the check costs little at any rate.
func checkUsage(i int) bool { return i%256 == 0 || i < 4096 && i%16 == 0 }

func newParser(count func(string) int, j *quality.Judge) *parser {
	return &parser{er: openai.NewEventReader(nil, make([]byte, 512), 4<<20), count: count, jd: j, gaps: make([]time.Duration, 0, 32)}
}

// gap notes one gap, handing a full batch on.
func (p *parser) gap(g time.Duration) {
	p.gaps = append(p.gaps, g)
	if len(p.gaps) == cap(p.gaps) {
		p.flush()
	}
}

func (p *parser) flush() {
	if len(p.gaps) > 0 && p.flushGaps != nil {
		p.flushGaps(p.gaps)
	}
	p.gaps = p.gaps[:0]
}

// read consumes the body b of r. stream says it is an SSE stream.
func (p *parser) read(ctx context.Context, b io.Reader, r *Result, stream bool) {
	p.tally.Text = p.text[:0]
	p.tally.Reset()
	p.tally.TextLimit = headBytes
	if p.keepAll {
		p.tally.TextLimit = 64 << 20
	}
	defer func() { p.text = p.tally.Text }()
	r.UsageTokens, r.CountedTokens, r.PromptTokens = -1, -1, -1
	p.cacheN, p.promptN = -1, -1
	if r.Status != 200 {
		p.body = readSome(p.body[:0], b, 4096)
		r.End = time.Since(r.Sent)
		r.fail(ctx, fmt.Sprintf("http_%d", r.Status), errors.New(DescribeAnswer(r.Status, string(p.contentType), p.body, "")))
		return
	}
	if stream {
		p.readStream(ctx, b, r)
		p.flush()
	} else {
		p.readPlain(ctx, b, r)
	}
	if r.OK() {
		p.judge(r)
	}
}

func (p *parser) readStream(ctx context.Context, b io.Reader, r *Result) {
	p.er.Reset(b, nil, 4<<20)
	t := &p.tally
	var last time.Time
	for {
		ev, err := p.er.Next()
		now := time.Now()
		if err != nil {
			r.End = now.Sub(r.Sent)
			switch {
			case err == io.EOF && (t.Done || t.Responses && t.Finished()):
				// A Responses stream ends at response.completed: no [DONE].
			case err == io.EOF || errors.Is(err, openai.ErrTruncatedEvent):
				r.fail(ctx, ErrTruncated, errors.New("stream ended without [DONE]"))
			default:
				r.fail(ctx, ErrReset, err)
			}
			p.settle(r)
			return
		}
		if r.FirstEvent == 0 {
			r.FirstEvent = now.Sub(r.Sent)
		}
		data := openai.EventData(ev)
		if data == nil || t.Done {
			continue // a comment, or bytes after [DONE]
		}
		if !openai.IsDoneData(data) && !json.Valid(data) {
			r.fail(ctx, ErrMalformed, fmt.Errorf("event data is not JSON: %.200s", data))
			continue
		}
		n := t.ContentEvents
		kind, usage := t.Add(data, now)
		if kind == openai.KindError {
			r.fail(ctx, ErrEvent, fmt.Errorf("error event: %s", bytes.TrimSpace(data)))
			continue
		}
		if usage || (t.Finish != "" && p.cacheN < 0) {
			// llama.cpp's timings ride on the usage chunk (on the finish
			// chunk when usage was not asked for).
			p.timings(data)
		}
		if usage {
			if i := bytes.Index(data, keySimTTFT); i >= 0 {
				r.ServerTTFT = time.Duration(leadingInt(data[i+len(keySimTTFT):])) * time.Microsecond
			}
			if i := bytes.Index(data, keyGatewayTiming); i >= 0 {
				r.Gateway = parseGatewayTiming(data[i+len(keyGatewayTiming)-1:])
			}
		}
		if t.ContentEvents == n {
			continue
		}
		if r.TTFO == 0 && !t.FirstOutput.IsZero() {
			r.TTFO = now.Sub(r.Sent)
		}
		if n == 0 {
			r.TTFT = now.Sub(r.Sent)
		} else {
			p.gap(now.Sub(last))
		}
		if p.keepEvents {
			r.Events = append(r.Events, now.Sub(r.Sent))
		}
		r.LastToken = now.Sub(r.Sent)
		last = now
	}
}

// settle copies what the tally counted into the result.
func (p *parser) settle(r *Result) {
	t := &p.tally
	r.ContentEvents = t.ContentEvents
	r.ReasoningEvents = t.ReasoningEvents
	r.Finish = t.Finish
	r.ReasoningTokens, r.CachedTokens = -1, -1
	if t.HasUsage {
		if c, ok := t.Usage.Cached(); ok {
			r.CachedTokens = c
		}
		r.UsageTokens, r.PromptTokens = t.Usage.CompletionTokens, t.Usage.PromptTokens
	}
	if r.CachedTokens < 0 && p.cacheN >= 0 {
		// llama.cpp's own account: cache_n of the prompt was cached,
		// prompt_n computed.
		r.CachedTokens = p.cacheN
		if r.PromptTokens <= 0 {
			r.PromptTokens = p.cacheN + p.promptN
		}
	}
	if t.HasUsage {
		if t.ReasoningEvents > 0 || t.Usage.CompletionTokensDetails.ReasoningTokens > 0 {
			r.ReasoningTokens = t.Usage.CompletionTokensDetails.ReasoningTokens
		}
	}
}

func (p *parser) readPlain(ctx context.Context, b io.Reader, r *Result) {
	var err error
	p.body, err = readAll(p.body[:0], b, 64<<20)
	r.End = time.Since(r.Sent)
	if err != nil {
		r.fail(ctx, ErrReset, err)
		return
	}
	key := keyChoices
	if p.tally.Responses {
		key = keyOutput
	}
	if !json.Valid(p.body) || !bytes.Contains(p.body, key) {
		r.fail(ctx, ErrBadBody, errors.New(DescribeAnswer(r.Status, string(p.contentType), p.body, "a JSON completion")))
		return
	}
	// The same account as a stream's chunks: the message's content (and
	// reasoning_content) or the completion's text, tool calls,
	// finish_reason and usage.
	p.tally.AddBody(p.body, time.Now())
	p.timings(p.body)
	p.settle(r)
	// Without a stream the first token arrives with the whole answer.
	r.TTFT, r.LastToken, r.FirstEvent, r.TTFO = r.End, r.End, r.End, r.End
}

// leadingInt reads the decimal digits at the start of b.
func leadingInt(b []byte) int64 {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' || n > 1e15 {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// parseGatewayTiming reads the object at the start of b.
// (The object nests the backend's split: the first value is decoded
// whole, not cut at its first closing brace.)
func parseGatewayTiming(b []byte) *openai.Timing {
	var g openai.Timing
	if json.NewDecoder(bytes.NewReader(b)).Decode(&g) != nil {
		return nil
	}
	return &g
}

var (
	keyGatewayTiming = []byte(`"infergate_timing":{`)
	keySimTTFT       = []byte(`"sim_timing":{"ttft_us":`)
	keyTimings       = []byte(`"timings":{`)
	keyChoices       = []byte(`"choices"`)
	keyOutput        = []byte(`"output"`)
)

// judge sets the token count and the quality signals of a success.
func (p *parser) judge(r *Result) {
	text := p.tally.Text
	// Usage missing: count. With usage, every 16th answer is counted too,
	// to check the server's figure at a bounded cost.
	if p.count != nil && p.keepAll && (r.UsageTokens < 0 || checkUsage(r.Index)) {
		r.CountedTokens = p.count(string(text))
	}
	r.OutputTokens = r.UsageTokens
	if r.OutputTokens < 0 {
		// Counted when the text was kept; otherwise (the first answers
		// without usage) one token per content event, a lower bound.
		r.OutputTokens = max(r.CountedTokens, r.ContentEvents)
	}
	// The output the server counted, else the content events: a lower
	// bound, which reaching the cap is as good a sign.
	out := r.UsageTokens
	if out < 0 {
		out = r.ContentEvents
	}
	a := quality.Answer{Text: text, ToolCalls: p.tally.ToolCalls, Finish: r.Finish, ByPolicy: r.ClampedByGateway, OutputTokens: out, Ask: r.Ask}
	if p.jd == nil {
		r.Empty = len(bytes.TrimSpace(text)) == 0 && !p.tally.ToolCalls
		r.Truncated = quality.Truncated(a)
		r.LengthByPolicy = r.Truncated && r.ClampedByGateway
		return
	}
	r.Signals = p.jd.Judge(a)
}

// readAll appends r's bytes to dst, at most limit.
func readAll(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		if len(dst) > limit {
			return dst, fmt.Errorf("body larger than %d bytes", limit)
		}
	}
}

// readSome reads up to limit bytes of an error body for the message and
// drains the rest.
func readSome(dst []byte, r io.Reader, limit int) []byte {
	dst, _ = readAll(dst, io.LimitReader(r, int64(limit)), limit+1)
	_, _ = io.Copy(io.Discard, r)
	return dst
}

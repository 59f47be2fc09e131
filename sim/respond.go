package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// Writing an answer: whole, or as a stream of chunk events, each token
// appended without reflection.

// respondWhole waits for the whole answer and writes it as one body.
func (s *Server) respondWhole(rc *fasthttp.RequestCtx, r *request) {
	n, ok := 0, true
	for ok && n < r.ans.tokens {
		n, ok = r.src.wait(n)
	}
	if n < r.ans.tokens {
		// aborted: the client is gone; nothing to write
		rc.SetConnectionClose()
		return
	}
	s.recordFinish(r)
	text := r.ans.text()
	finish := r.ans.finish
	var body []byte
	switch {
	case r.responses:
		body = r.responseBody()
	case r.chat:
		msg := openai.ChatMessage{Role: "assistant", Content: text}
		if r.ans.think > 0 {
			if s.cfg.Output.ReasoningField == "reasoning" {
				msg.Reasoning = r.ans.thoughts()
			} else {
				msg.ReasoningContent = r.ans.thoughts()
			}
		}
		body, _ = json.Marshal(openai.ChatResponse{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.model,
			Choices: []openai.ChatChoice{{Message: msg, FinishReason: &finish}}})
	default:
		body, _ = json.Marshal(openai.CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.model,
			Choices: []openai.CompletionChoice{{Text: text, FinishReason: &finish}}})
	}
	if len(body) > 0 && !r.responses {
		body = body[:len(body)-1]
		body = r.appendUsage(append(body, `,"usage":`...))
		if s.cfg.PerRequestMetrics {
			body = r.appendMetrics(body)
		}
		body = append(body, '}')
	}
	if d := r.faults.netDelay(); d > 0 {
		time.Sleep(d)
	}
	rc.SetContentType("application/json")
	rc.SetBody(body)
}

func (s *Server) recordFinish(r *request) {
	s.metrics.success.WithLabelValues(r.ans.finish).Inc()
	if s.eng == nil {
		s.metrics.generation.Add(float64(r.ans.tokens))
	}
}

// stream writes the answer as server-sent events, one event per token,
// each flushed as it is due.
func (s *Server) stream(w *bufio.Writer, r *request) {
	if r.responses {
		s.streamResponse(w, r)
		return
	}
	buf := make([]byte, 0, 512)
	sent, ok := 0, true
	write := func(b []byte) bool {
		if d := r.faults.netDelay(); d > 0 {
			time.Sleep(d)
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return w.Flush() == nil
	}
	role := func() bool {
		buf = r.appendChunkStart(buf[:0])
		buf = append(buf, `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		if !write(buf) {
			r.src.abort()
			return false
		}
		return true
	}
	roleFirst := r.chat && s.cfg.RoleFirst
	if roleFirst && !role() {
		return
	}
	for sent < r.ans.tokens {
		var n int
		n, ok = r.src.wait(sent)
		if !ok {
			return // aborted or shutting down: end the response without [DONE]
		}
		for ; sent < n; sent++ {
			if sent == 0 && r.chat && !roleFirst && !role() {
				return
			}
			if !r.tokenFaults(sent) {
				return
			}
			buf = r.appendToken(buf[:0], sent)
			if !write(buf) {
				r.src.abort()
				return
			}
			if sent == 0 && r.timing {
				r.firstOut = time.Now()
			}
		}
	}
	s.recordFinish(r)
	buf = r.appendChunkStart(buf[:0])
	if r.chat {
		buf = append(buf, `{},"logprobs":null,"finish_reason":"`...)
	} else {
		buf = append(buf, `"","logprobs":null,"finish_reason":"`...)
	}
	buf = append(buf, r.ans.finish...)
	buf = append(buf, "\"}]"...)
	if s.cfg.PerRequestMetrics && !r.usage {
		buf = r.appendMetrics(buf)
	}
	buf = append(buf, "}\n\n"...)
	if r.usage {
		buf = r.appendChunkHead(buf)
		buf = r.appendUsage(append(buf, `,"choices":[],"usage":`...))
		if r.timing && !r.firstOut.IsZero() {
			buf = append(buf, `,"sim_timing":{"ttft_us":`...)
			buf = strconv.AppendInt(buf, r.firstOut.Sub(r.received).Microseconds(), 10)
			buf = append(buf, '}')
		}
		if s.cfg.PerRequestMetrics {
			buf = r.appendMetrics(buf)
		}
		buf = append(buf, "}\n\n"...)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	write(buf)
}

// tokenFaults injects the faults due before output token sent: a reset
// (the connection closed with an RST) or a stall. It reports false when
// the stream must end.
func (r *request) tokenFaults(sent int) bool {
	if f := r.faults.ResetAfter; f > 0 && sent >= f {
		// Let what was sent reach the client first: an RST makes the
		// peer's kernel drop data it has not yet read.
		time.Sleep(10 * time.Millisecond)
		reset(r.conn)
		r.src.abort()
		return false
	}
	if f := r.faults.StallAfter; f > 0 && sent == f {
		return r.src.sleep(r.faults.StallFor)
	}
	return true
}

// appendUsage appends the usage object; with prefix caching it says how
// many prompt tokens were found cached, as vLLM does with
// --enable-prompt-tokens-details.
func (r *request) appendUsage(b []byte) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(r.ans.tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(r.promptTokens+r.ans.tokens), 10)
	if r.prefixCaching {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(r.src.cachedTokens()), 10)
		b = append(b, '}')
	}
	if r.ans.think > 0 {
		b = append(b, `,"completion_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(r.ans.think), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendMetrics appends vLLM's per-request metrics object as a member of
// the object being written: ,"metrics":{...}.
func (r *request) appendMetrics(b []byte) []byte {
	queue, prefill, decode := r.src.split()
	ms := func(b []byte, key string, d time.Duration) []byte {
		b = append(b, key...)
		return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 3, 64)
	}
	b = ms(b, `,"metrics":{"time_to_first_token_ms":`, prefill)
	b = ms(b, `,"generation_time_ms":`, decode)
	b = ms(b, `,"queue_time_ms":`, queue)
	if r.ans.tokens > 1 && decode > 0 {
		b = ms(b, `,"mean_itl_ms":`, decode/time.Duration(r.ans.tokens-1))
	}
	return append(b, '}')
}

func (r *request) object() string {
	if r.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// appendChunkStart appends a chunk up to the opening of its delta (chat)
// or text (completion) value.
func (r *request) appendChunkStart(b []byte) []byte {
	b = r.appendChunkHead(b)
	if r.chat {
		return append(b, `,"choices":[{"index":0,"delta":`...)
	}
	return append(b, `,"choices":[{"index":0,"text":`...)
}

// appendChunkHead appends a chunk's event prefix and fields up to model.
func (r *request) appendChunkHead(b []byte) []byte {
	b = append(b, `data: {"id":"`...)
	b = append(b, r.id...)
	b = append(b, `","object":"`...)
	b = append(b, r.object()...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, r.created, 10)
	b = append(b, `,"model":`...)
	return strconv.AppendQuote(b, r.model)
}

func (r *request) appendToken(b []byte, i int) []byte {
	b = r.appendChunkStart(b)
	switch {
	case r.chat && r.ans.thinking(i):
		b = append(b, `{"`...)
		b = append(b, r.thinkField...)
		b = append(b, `":"`...)
	case r.chat:
		b = append(b, `{"content":"`...)
	default:
		b = append(b, '"')
	}
	start := len(b)
	b = r.ans.token(b, i)
	b = escapeJSON(b, start)
	if r.chat {
		b = append(b, `"},"logprobs":null,"finish_reason":null}]}`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":null}]}`...)
	}
	return append(b, "\n\n"...)
}

// escapeJSON escapes the quotes and backslashes of b[start:] in place; the
// token texts hold no control characters.
func escapeJSON(b []byte, start int) []byte {
	if bytes.IndexAny(b[start:], `"\`) < 0 {
		return b
	}
	raw := append([]byte(nil), b[start:]...)
	b = b[:start]
	for _, c := range raw {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}

// reset closes conn with an RST instead of a FIN.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

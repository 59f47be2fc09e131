package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/fastsrv"
	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// Server is a running simulator. Create it with New, start it with Serve,
// stop it with Shutdown.
type Server struct {
	cfg     Config
	tok     *tokens.Tokenizer
	eng     *engine // nil in fixed mode
	metrics *metrics
	watch   *hangup.Watcher
	srv     *fasthttp.Server
	log     *slog.Logger
	created int64
	nonce   atomic.Uint64
	clock   clock
}

// New fills in cfg's defaults, validates it and builds a simulator; it loads the tokenizer and, in
// engine mode, starts the scheduler loop.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok, err := tokens.New()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, tok: tok, metrics: newMetrics(cfg.Model), watch: hangup.New(0), log: log, created: time.Now().Unix()}
	if cfg.Mode == ModeEngine {
		s.eng = newEngine(cfg.Engine, cfg.Quality.DecodeSpeedup, s.metrics)
		eng := s.eng
		s.metrics.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "infergate_sim_scheduler_busy_seconds_total",
				Help: "Wall time the scheduler loop spent computing (not sleeping)."},
				func() float64 { return time.Duration(eng.busy.Load()).Seconds() }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "infergate_sim_steps_total",
				Help: "Engine steps run."}, func() float64 { return float64(eng.steps.Load()) }),
		)
		s.eng.start()
	}
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "infergate-sim",
		NoDefaultServerHeader: false,
		ReadTimeout:           0,
		IdleTimeout:           90 * time.Second,
		MaxRequestBodySize:    32 << 20,
		// Small buffers: a stream's events are a few hundred bytes, and
		// 2,000 open streams should cost little memory each.
		ReadBufferSize:  2048,
		WriteBufferSize: 2048,
		Concurrency:     1 << 20,
		CloseOnShutdown: true,
		Logger:          fastsrv.Logger{Log: log},
		ErrorHandler: func(rc *fasthttp.RequestCtx, err error) {
			vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		},
	}
	return s, nil
}

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown stops accepting, ends open streams, and stops the engine and
// the hang-up watcher.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.eng != nil {
		s.eng.close() // wakes every stream with done
	}
	err := s.srv.ShutdownWithContext(ctx)
	s.watch.Close()
	return err
}

func (s *Server) handle(rc *fasthttp.RequestCtx) {
	path := string(rc.Path())
	switch path {
	case "/v1/chat/completions", "/v1/completions":
		if !rc.IsPost() {
			vllmError(rc, fasthttp.StatusMethodNotAllowed, "MethodNotAllowed", "use POST")
			return
		}
		s.complete(rc, path == "/v1/chat/completions")
	case "/v1/models":
		b, _ := json.Marshal(openai.ModelList{Object: "list", Data: []openai.Model{{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "infergate-sim"}}})
		rc.SetContentType("application/json")
		rc.SetBody(b)
	case "/health":
		rc.SetStatusCode(fasthttp.StatusOK)
	case "/metrics":
		fastsrv.WriteMetrics(rc, s.metrics.reg, s.log)
	default:
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", "no route "+path)
	}
}

// vllmError writes an error the way vLLM's OpenAI server does.
func vllmError(rc *fasthttp.RequestCtx, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(b)
}

// request is one admitted completion request, shared by the handler and
// its stream writer.
type request struct {
	chat         bool
	model        string
	id           string
	created      int64
	promptTokens int
	ans          answer
	usage        bool // stream_options.include_usage
	faults       Faults
	src          tokenSource
	watch        *hangup.Handle
	conn         net.Conn
	// With TimingHeader: when the request was read, and when the first
	// content token was handed to the connection.
	timing             bool
	received, firstOut time.Time
}

// TimingHeader asks the simulator to report its own time to first token
// on the usage chunk, as "sim_timing":{"ttft_us":N} (request read →
// first content token written), so a client can tell its own and the
// network's share of the TTFT it measured.
const TimingHeader = "X-Sim-Timing"

func (s *Server) complete(rc *fasthttp.RequestCtx, chat bool) {
	received := time.Now()
	s.clock.active.Add(1)
	streaming := false
	defer func() {
		if !streaming {
			s.clock.active.Add(-1)
		}
	}()
	faults, err := parseFaults(s.cfg.Faults, string(rc.Request.Header.Peek(FaultHeader)))
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if faults.ErrorRate > 0 && rand.Float64() < faults.ErrorRate {
		status := faults.ErrorStatus
		if status == 0 {
			status = fasthttp.StatusInternalServerError
		}
		if faults.RetryAfter > 0 && (status == 429 || status == 503) {
			rc.Response.Header.Set("Retry-After", strconv.Itoa(int((faults.RetryAfter+time.Second-1)/time.Second)))
		}
		vllmError(rc, status, "InjectedFault", fmt.Sprintf("injected fault: status %d", status))
		return
	}
	var req openai.Request
	if err := json.Unmarshal(rc.PostBody(), &req); err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if req.Model != s.cfg.Model {
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if chat && len(req.Messages) == 0 {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "messages: field required")
		return
	}
	prompt, promptTokens, err := promptText(s.tok, &req)
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	ans, err := planAnswer(&s.cfg, &req, prompt, promptTokens, s.nonce.Add(1))
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	r := &request{
		chat: chat, model: s.cfg.Model, created: time.Now().Unix(), promptTokens: promptTokens, ans: ans,
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, faults: faults, conn: rc.Conn(),
		timing: len(rc.Request.Header.Peek(TimingHeader)) > 0, received: received,
	}
	r.id = fmt.Sprintf("%s-%016x", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], mix(ans.seed, s.nonce.Load()))
	if s.eng != nil {
		if !s.eng.fits(promptTokens, ans.tokens) {
			vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", fmt.Sprintf(
				"request needs %d tokens of KV cache but the cache holds %d", promptTokens+ans.tokens, s.cfg.Engine.KVCacheTokens))
			return
		}
		sq := newSeq(promptTokens, ans.tokens)
		if !s.eng.add(sq) {
			vllmError(rc, fasthttp.StatusServiceUnavailable, "ServiceUnavailable", "server is shutting down")
			return
		}
		r.src = &engineSource{s: sq}
	} else {
		r.src = newFixedSource(s.cfg.TTFT, s.cfg.ITL, ans.tokens, &s.clock)
	}
	s.metrics.prompt.Add(float64(promptTokens))
	// The client may leave while its request waits or runs; the engine
	// then frees its slot, as vLLM aborts a disconnected request.
	r.watch = s.watch.Watch(r.conn, r.src.abort)
	if faults.HeaderDelay > 0 {
		time.Sleep(faults.HeaderDelay)
	}
	if !req.Stream {
		defer r.watch.Stop()
		s.respondWhole(rc, r)
		return
	}
	rc.SetContentType("text/event-stream")
	rc.Response.Header.Set("Cache-Control", "no-cache")
	streaming = true // the stream writer ends the request
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.clock.active.Add(-1)
		defer r.watch.Stop()
		s.stream(w, r)
	})
}

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
	usage := &openai.Usage{PromptTokens: r.promptTokens, CompletionTokens: r.ans.tokens, TotalTokens: r.promptTokens + r.ans.tokens}
	var body []byte
	if r.chat {
		body, _ = json.Marshal(openai.ChatResponse{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.model,
			Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: "assistant", Content: text}, FinishReason: &finish}}, Usage: usage})
	} else {
		body, _ = json.Marshal(openai.CompletionResponse{ID: r.id, Object: "text_completion", Created: r.created, Model: r.model,
			Choices: []openai.CompletionChoice{{Text: text, FinishReason: &finish}}, Usage: usage})
	}
	if s.cfg.PerRequestMetrics && len(body) > 0 {
		body = append(r.appendMetrics(body[:len(body)-1]), '}')
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
	for sent < r.ans.tokens {
		var n int
		n, ok = r.src.wait(sent)
		if !ok {
			return // aborted or shutting down: end the response without [DONE]
		}
		for ; sent < n; sent++ {
			if sent == 0 && r.chat {
				buf = r.appendChunkStart(buf[:0])
				buf = append(buf, `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
				if !write(buf) {
					r.src.abort()
					return
				}
			}
			if f := r.faults.ResetAfter; f > 0 && sent >= f {
				// Let what was sent reach the client first: an RST makes
				// the peer's kernel drop data it has not yet read.
				time.Sleep(10 * time.Millisecond)
				reset(r.conn)
				r.src.abort()
				return
			}
			if f := r.faults.StallAfter; f > 0 && sent == f {
				if !r.src.sleep(r.faults.StallFor) {
					return
				}
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
		buf = append(buf, `,"choices":[],"usage":{"prompt_tokens":`...)
		buf = strconv.AppendInt(buf, int64(r.promptTokens), 10)
		buf = append(buf, `,"completion_tokens":`...)
		buf = strconv.AppendInt(buf, int64(r.ans.tokens), 10)
		buf = append(buf, `,"total_tokens":`...)
		buf = strconv.AppendInt(buf, int64(r.promptTokens+r.ans.tokens), 10)
		buf = append(buf, '}')
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
	if r.chat {
		b = append(b, `{"content":"`...)
	} else {
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

// tokenSource tells a handler when tokens are ready.
type tokenSource interface {
	// wait blocks until more than have tokens are ready and returns how
	// many are; ok is false when the request was aborted.
	wait(have int) (n int, ok bool)
	// sleep pauses for d unless the request is aborted first.
	sleep(d time.Duration) bool
	abort()
	// split is the engine's queue, prefill and decode time so far.
	split() (queue, prefill, decode time.Duration)
}

type engineSource struct{ s *seq }

func (e *engineSource) wait(have int) (int, bool) {
	for {
		if e.s.aborted.Load() {
			return 0, false
		}
		if n := int(e.s.emitted.Load()); n > have {
			return n, true
		}
		if e.s.done.Load() {
			return int(e.s.emitted.Load()), false
		}
		<-e.s.notify
	}
}

func (e *engineSource) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-e.s.notify:
			if e.s.aborted.Load() {
				return false
			}
		}
	}
}

func (e *engineSource) abort() { e.s.abort() }

func (e *engineSource) split() (queue, prefill, decode time.Duration) {
	return time.Duration(e.s.queueNs.Load()), time.Duration(e.s.prefillNs.Load()), time.Duration(e.s.decodeNs.Load())
}

// fixedSource releases token i at start+ttft+i*itl, with no load effects.
type fixedSource struct {
	start   time.Time
	ttft    time.Duration
	itl     time.Duration
	total   int
	aborted chan struct{}
	once    atomic.Bool
	timer   *time.Timer
	clock   *clock
}

func newFixedSource(ttft, itl time.Duration, total int, c *clock) *fixedSource {
	return &fixedSource{start: time.Now(), ttft: ttft, itl: itl, total: total, aborted: make(chan struct{}), clock: c}
}

func (f *fixedSource) wait(have int) (int, bool) {
	due := f.start.Add(f.ttft + time.Duration(have)*f.itl)
	if !f.sleepUntil(due) {
		return 0, false
	}
	if f.itl == 0 {
		return f.total, true
	}
	n := int(time.Since(f.start.Add(f.ttft))/f.itl) + 1
	return min(max(n, have+1), f.total), true
}

func (f *fixedSource) sleepUntil(t time.Time) bool {
	if f.timer == nil {
		f.timer = time.NewTimer(time.Hour)
		f.timer.Stop()
	}
	return waitUntil(t, f.timer, f.aborted, f.clock.lightLoad())
}

func (f *fixedSource) sleep(d time.Duration) bool { return f.sleepUntil(time.Now().Add(d)) }

func (f *fixedSource) split() (queue, prefill, decode time.Duration) {
	return 0, f.ttft, time.Duration(max(f.total-1, 0)) * f.itl
}

func (f *fixedSource) abort() {
	if f.once.CompareAndSwap(false, true) {
		close(f.aborted)
	}
}

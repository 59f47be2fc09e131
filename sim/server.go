package sim

import (
	"bufio"
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
	admit   *admission
	watch   *hangup.Watcher
	srv     *fasthttp.Server
	log     *slog.Logger
	created int64
	nonce   atomic.Uint64
	clock   clock
	// kv publishes the prefix cache's events (kvevents.go); nil when off.
	kv *kvPublisher
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
	s := &Server{cfg: cfg, tok: tok, metrics: newMetrics(cfg.Model, cfg.Engine), watch: hangup.New(0), log: log, created: time.Now().Unix()}
	s.admit = &admission{cfg: cfg.Admission, rejected: s.metrics.rejected}
	if cfg.Mode == ModeEngine {
		s.eng = newEngine(cfg.Engine, cfg.Quality.DecodeSpeedup, s.metrics)
		s.eng.priority = cfg.SchedulingPolicy == PolicyPriority
		if cfg.KVEvents.Endpoint != "" && cfg.Engine.PrefixCaching {
			if s.kv, err = newKVPublisher(cfg.KVEvents, log); err != nil {
				return nil, err
			}
			s.eng.kv = s.kv
		}
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
	if s.kv != nil {
		s.kv.close()
	}
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
		s.complete(rc, path == "/v1/chat/completions", false)
	case openai.ResponsesPath:
		if !rc.IsPost() {
			vllmError(rc, fasthttp.StatusMethodNotAllowed, "MethodNotAllowed", "use POST")
			return
		}
		s.complete(rc, true, true)
	case "/v1/models":
		b, _ := json.Marshal(openai.ModelList{Object: "list", Data: []openai.Model{{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "infergate-sim"}}})
		rc.SetContentType("application/json")
		rc.SetBody(b)
	case "/tokenize":
		if !rc.IsPost() {
			vllmError(rc, fasthttp.StatusMethodNotAllowed, "MethodNotAllowed", "use POST")
			return
		}
		s.tokenize(rc)
	case "/reset_prefix_cache":
		// vLLM's development endpoint: 200 when the cache was reset
		// (AllBlocksCleared published), 400 while blocks are in use.
		if !rc.IsPost() {
			vllmError(rc, fasthttp.StatusMethodNotAllowed, "MethodNotAllowed", "use POST")
		} else if !s.ResetPrefixCache() {
			vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "the prefix cache is in use or off")
		}
	case "/health":
		rc.SetStatusCode(fasthttp.StatusOK)
	case "/metrics":
		fastsrv.WriteMetrics(rc, s.metrics.reg, s.log)
	default:
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", "no route "+path)
	}
}

// tokenize counts a prompt as vLLM's /tokenize does, from messages (with
// the chat template's framing) or a prompt, as the completions count it.
// It answers the count, the context length and token ids: those of the
// prompt's full blocks are the ones its KV events carry (tokenIDs).
func (s *Server) tokenize(rc *fasthttp.RequestCtx) {
	var req openai.Request
	if !s.decode(rc, &req) {
		return
	}
	_, n, err := promptText(s.tok, &req)
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	b, _ := json.Marshal(struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}{n, s.cfg.Output.MaxModelLen, s.tokenIDs(&req, n)})
	rc.SetContentType("application/json")
	rc.SetBody(b)
}

// decode reads a request body for this server's model, answering 400 or
// 404 as vLLM does when it cannot.
func (s *Server) decode(rc *fasthttp.RequestCtx, req *openai.Request) bool {
	if err := json.Unmarshal(rc.PostBody(), req); err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return false
	}
	if req.Model != s.cfg.Model {
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return false
	}
	return true
}

// errorInfo is vLLM's ErrorInfo, members in its order (pydantic writes
// them as declared).
type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// vllmError writes an error the way vLLM's OpenAI server does:
// {"error":{"message","type","param":null,"code"}}.
func vllmError(rc *fasthttp.RequestCtx, status int, typ, msg string) {
	b, _ := json.Marshal(struct {
		Error errorInfo `json:"error"`
	}{errorInfo{Message: msg, Type: typ, Code: status}})
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(b)
}

// request is one admitted completion request, shared by the handler and
// its stream writer.
type request struct {
	chat bool
	// responses: a Responses API request (responses.go), chat set too.
	responses bool
	// thinkField names a chat delta's thinking (OutputConfig.ReasoningField).
	thinkField   string
	model        string
	id           string
	created      int64
	promptTokens int
	ans          answer
	usage        bool // stream_options.include_usage
	// prefixCaching: the engine caches prompt blocks, and usage says
	// how many tokens were found.
	prefixCaching bool
	faults        Faults
	src           tokenSource
	watch         *hangup.Handle
	conn          net.Conn
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

func (s *Server) complete(rc *fasthttp.RequestCtx, chat, responses bool) {
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
	if responses {
		if !s.decodeResponses(rc, &req) {
			return
		}
	} else if !s.decode(rc, &req) {
		return
	}
	if chat && len(req.Messages) == 0 {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "messages: field required")
		return
	}
	priority, err := s.requestPriority(rc.PostBody())
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
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
		chat: chat, responses: responses, thinkField: s.cfg.Output.ReasoningField, model: s.cfg.Model, created: time.Now().Unix(), promptTokens: promptTokens, ans: ans,
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, faults: faults, conn: rc.Conn(),
		timing: len(rc.Request.Header.Peek(TimingHeader)) > 0, received: received,
	}
	r.id = fmt.Sprintf("%s-%016x", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], mix(ans.seed, s.nonce.Load()))
	if responses {
		r.id = fmt.Sprintf("resp_%016x", mix(ans.seed, s.nonce.Load()))
	}
	charge, refused := s.admit.admit(promptTokens)
	if refused != "" {
		refuse(rc, refused)
		return
	}
	defer func() {
		if !streaming {
			charge.finish()
		}
	}()
	if s.eng != nil {
		if !s.eng.fits(promptTokens, ans.tokens) {
			vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", fmt.Sprintf(
				"request needs %d tokens of KV cache but the cache holds %d", promptTokens+ans.tokens, s.cfg.Engine.KVCacheTokens))
			return
		}
		sq := newSeq(promptTokens, ans.tokens)
		sq.charge = charge
		sq.priority = priority
		if s.cfg.Engine.PrefixCaching {
			sq.hashes = promptBlocks(s.tok, &req, s.cfg.Engine.BlockSize)
			r.prefixCaching = true
		}
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
		defer charge.finish()
		defer r.watch.Stop()
		s.stream(w, r)
	})
}

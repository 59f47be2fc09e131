package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/internal/fastsrv"
	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/reqctx"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/openai"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// Gateway is the proxy server. Build it with New, run it with Serve, swap
// its configuration with Reload, stop it with Shutdown.
type Gateway struct {
	log   *slog.Logger
	state atomic.Pointer[state]
	cert  atomic.Pointer[tls.Certificate]
	srv   *fasthttp.Server
	watch *hangup.Watcher
	m     *gatewayMetrics
	admin *fasthttp.Server // the admin listener's server: /metrics, /admin/*
	// telem feeds the telemetry goroutine (telemetry.go).
	telem *bgqueue.Queue[*exchange]
	stats *tracing.Recent // recent requests, for /admin/stats
	lim   *shaping.Limiter
	rlog  *tracing.RequestLog // nil when request_log.path is empty
	pairs *mirror.Recorder    // mirrored pairs (package mirror)
	// tracer is nil when no span is sent; spanProcessors are added to it
	// (WithSpanProcessor).
	tracer         *tracing.Tracer
	spanProcessors []sdktrace.SpanProcessor

	// base is the parent of the gateway's own work (mirrored requests);
	// reqs of each request's context. Shutdown cancels both.
	base       context.Context
	cancelBase context.CancelCauseFunc
	reqs       reqctx.Group
	inflight   sync.WaitGroup
	reloadMu   sync.Mutex
	// versions keeps the applied configurations for rollback.
	versions   versions
	draining   atomic.Bool // BeginDrain or Shutdown was called
	reservedMu sync.Mutex
	reserved   map[net.Conn]struct{} // keep-alive connections given back after a stream
	started    time.Time

	// conns counts the API listener's connections (listener.go).
	conns atomic.Pointer[connLimit]
	// Panics recovered on the request path (panics.go).
	panicsRequest, panicsStream, panicsForward, panicsMirror atomic.Int64
	// testHook, when a test sets it, is called at points of a request's
	// life ("admitted", "stream"); tests make it panic.
	testHook func(point, id string)
}

// state is one configuration made live: what a request reads, atomically,
// when it starts. A reload builds a new one and swaps it in.
type state struct {
	cfg       Config
	pools     map[string]*Pool
	models    map[string]*route
	def       *route // default_pool, or nil
	modelList []byte // GET /v1/models, rendered; nil means pass through
	budget    *retryBudget
	// pol is the compiled policy; tokenCaps is set when admission caps
	// tokens, so every chat request's prompt is counted.
	pol       *policy.Policy
	tokenCaps bool
	// adminKey is the SHA-256 of server.admin_auth, nil when unset.
	adminKey *[32]byte
	// mirrors are the mirror rules, in order; split the canary, or nil.
	mirrors []tapRule
	split   *tapSplit
	// configHash identifies the configuration (header
	// X-Infergate-Config-Hash on /healthz), so a benchmark record can say
	// which gateway settings it measured.
	configHash string
}

// route is where a model's requests go.
type route struct {
	pool          *Pool
	upstreamModel string // empty: keep the client's name
}

// New validates cfg (after filling its defaults) and builds a gateway.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Gateway, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lim, err := shaping.New(cfg.Shaping, log.With("component", "shaping"))
	if err != nil {
		return nil, err
	}
	g := &Gateway{log: log, watch: hangup.New(0), lim: lim, started: time.Now(), reserved: map[net.Conn]struct{}{}}
	if err := g.open(cfg, opts); err != nil {
		g.closeTelemetry()
		return nil, err
	}
	g.startTelemetry()
	g.warnDeprecated(cfg)
	g.base, g.cancelBase = context.WithCancelCause(context.Background())
	st, err := g.build(cfg, nil)
	if err == nil {
		if err = g.loadCert(cfg.Server.TLS); err != nil {
			st.close()
		}
	}
	if err != nil {
		g.stopTelemetry()
		g.closeTelemetry()
		return nil, err
	}
	g.state.Store(st)
	g.versions.add(cfg, st.configHash, "start")
	s := &cfg.Server
	g.srv = &fasthttp.Server{
		Handler:                       g.handle,
		ErrorHandler:                  g.readError,
		Name:                          "infergate",
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		MaxRequestBodySize:            s.MaxBodyBytes,
		StreamRequestBody:             true, // bodies read as they arrive (body.go)
		// The headers get HeaderTimeout; a body, from the end of the
		// headers, ReadTimeout.
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			cl := h.ContentLength()
			if cl == 0 {
				return fasthttp.RequestConfig{}
			}
			if cl > g.state.Load().cfg.Server.MaxBodyBytes {
				// Too large by its declared length. The server would wait
				// for the body's first 8 KiB before the handler sees the
				// request, so a client that declares much and sends
				// little would hold the connection until read_timeout.
				// With no body to read and no 100 Continue to send, the
				// handler refuses it at once (handle) and closes the
				// connection.
				h.SetContentLength(0)
				h.Del("Expect")
				h.SetBytesKV(hdrDeclaredLength, strconv.AppendInt(nil, int64(cl), 10))
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: s.ReadTimeout}
		},
		ReadTimeout:       s.HeaderTimeout,
		WriteTimeout:      s.WriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		ReadBufferSize:    s.MaxHeaderBytes,
		Concurrency:       1 << 20,
		CloseOnShutdown:   true,
		KeepHijackedConns: true, // streamResponse closes or re-serves them
		Logger:            fastsrv.Logger{Log: log},
	}
	g.admin = &fasthttp.Server{
		Handler:               g.handleAdmin,
		Name:                  "infergate-admin",
		NoDefaultServerHeader: true,
		ReadTimeout:           s.HeaderTimeout,
		IdleTimeout:           s.IdleTimeout,
		CloseOnShutdown:       true,
		Logger:                fastsrv.Logger{Log: log},
	}
	return g, nil
}

// open starts the request log, the tracer and the metrics.
func (g *Gateway) open(cfg Config, opts []Option) error {
	var err error
	if cfg.RequestLog.Path != "" {
		if g.rlog, err = tracing.OpenRequestLog(cfg.RequestLog); err != nil {
			return err
		}
	}
	if g.pairs, err = mirror.NewRecorder(cfg.Mirror.Record, g.log.With("component", "mirror")); err != nil {
		return err
	}
	for _, o := range opts {
		o(g)
	}
	if g.tracer, err = tracing.NewTracer(context.Background(), cfg.Tracing, g.spanProcessors...); err != nil {
		return err
	}
	mp, err := tracing.NewMeterProvider(context.Background(), cfg.Metrics, cfg.Tracing.ServiceName)
	if err != nil {
		return err
	}
	g.m, err = newGatewayMetrics(g, mp, cfg.Metrics)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return err
	}
	g.stats = tracing.NewRecent(tracing.RecentWindow)
	return nil
}

// closeTelemetry stops what New started, when New fails after starting it.
func (g *Gateway) closeTelemetry() {
	if g.m != nil {
		_ = g.m.mp.Shutdown(context.Background())
	}
	if g.tracer != nil {
		_ = g.tracer.Shutdown(context.Background())
	}
	if g.rlog != nil {
		_ = g.rlog.Close()
	}
	if g.pairs != nil {
		g.pairs.Close()
	}
	g.lim.Close()
	g.watch.Close()
}

// build makes a state from a validated config, taking over the unchanged
// backends of old (nil at start).
func (g *Gateway) build(cfg Config, old *state) (*state, error) {
	reuse := map[string]*Backend{}
	if old != nil {
		for _, p := range old.pools {
			for _, b := range p.backends {
				reuse[b.key] = b
			}
		}
	}
	var prev *policy.Policy
	if old != nil {
		prev = old.pol
	}
	// The policy first: a tokenizer that cannot be loaded refuses the
	// file before any pool is built.
	pol, err := policy.Compile(cfg.Policy, prev)
	if err != nil {
		return nil, err
	}
	st := &state{cfg: cfg, pools: map[string]*Pool{}, models: map[string]*route{}, pol: pol, tokenCaps: cfg.Shaping.HasTokenCaps(),
		budget: newRetryBudget(cfg.Retries.BudgetRatio, cfg.Retries.BudgetMinPerSecond), configHash: hashConfig(cfg)}
	if k := cfg.Server.AdminAuth; k != "" {
		d, _ := policy.ParseKey(k) // Validate checked it
		st.adminKey = &d
	}
	for name, pc := range cfg.Pools {
		p, err := newPool(name, pc, cfg.Timeouts.Connect, g.log, reuse)
		if err != nil {
			st.closeExcept(old)
			return nil, err
		}
		st.pools[name] = p
	}
	for _, m := range cfg.Models {
		st.models[m.Name] = &route{pool: st.pools[m.Pool], upstreamModel: m.UpstreamModel}
	}
	for _, r := range cfg.Mirror.Rules {
		st.mirrors = append(st.mirrors, tapRule{rule: mirror.Live(r), pool: st.pools[r.Pool]})
	}
	if sp := cfg.Mirror.Split; sp != nil {
		st.split = &tapSplit{split: mirror.LiveSplitOf(sp), pool: st.pools[sp.Pool]}
	}
	if cfg.DefaultPool != "" {
		st.def = &route{pool: st.pools[cfg.DefaultPool]}
	}
	if len(cfg.Models) > 0 {
		list := openai.ModelList{Object: "list"}
		for _, m := range cfg.Models {
			list.Data = append(list.Data, openai.Model{ID: m.Name, Object: "model", Created: g.started.Unix(), OwnedBy: "infergate"})
		}
		b, err := json.Marshal(list)
		if err != nil {
			return nil, fmt.Errorf("render models: %w", err)
		}
		st.modelList = b
	}
	return st, nil
}

func (st *state) close() { st.closeExcept(nil) }

// closeExcept closes st's pools but leaves the backends that next took
// over alone.
func (st *state) closeExcept(next *state) {
	kept := map[*Backend]bool{}
	if next != nil {
		for _, p := range next.pools {
			for _, b := range p.backends {
				kept[b] = true
			}
		}
	}
	for _, p := range st.pools {
		p.closeExcept(kept)
	}
}

// lookup returns the route of a model, or the default route, or nil.
func (st *state) lookup(model string) *route {
	if r, ok := st.models[model]; ok {
		return r
	}
	return st.def
}

func (g *Gateway) loadCert(t ServerTLS) error {
	cert, err := readCert(t)
	if err != nil {
		return err
	}
	g.cert.Store(cert)
	return nil
}

// readCert reads the certificate and key t names; nil when TLS is off.
func readCert(t ServerTLS) (*tls.Certificate, error) {
	if t.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls: %w", err)
	}
	return &cert, nil
}

// Config returns the configuration in force, defaults filled in.
func (g *Gateway) Config() Config { return g.state.Load().cfg }

// Metrics returns the registry of the gateway's Prometheus metrics (what
// the admin listener's /metrics serves).
func (g *Gateway) Metrics() *prometheus.Registry { return g.m.mp.Registry }

// ServeAdmin serves the admin endpoints on ln until Shutdown: /metrics
// (Prometheus text), /admin/stats (recent percentiles and attribution,
// JSON), /healthz and /readyz. It is plain HTTP: bind it to a private
// address.
func (g *Gateway) ServeAdmin(ln net.Listener) error { return g.admin.Serve(ln) }

// Serve accepts connections on ln until Shutdown; with TLS configured it
// serves HTTPS, the certificate read afresh at each reload.
func (g *Gateway) Serve(ln net.Listener) error {
	lim := &connLimit{Listener: ln, max: int64(g.state.Load().cfg.Server.MaxConnections)}
	g.conns.Store(lim)
	ln = lim
	if g.state.Load().cfg.Server.TLS.CertFile != "" {
		ln = tls.NewListener(ln, &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				if c := g.cert.Load(); c != nil {
					return c, nil
				}
				return nil, errors.New("proxy: no certificate loaded")
			},
		})
	}
	return g.srv.Serve(ln)
}

// Reload validates cfg and swaps it in, all or nothing: every check
// that can refuse the file (its validity, the settings that need a
// restart, the TLS files, the backends' settings) runs before anything of
// the running gateway changes, so a refused file changes nothing. The
// listen address and server limits take effect only at restart.
func (g *Gateway) Reload(cfg Config) error { return g.ReloadFrom("reload", cfg) }

// ReloadFrom is Reload, naming where the configuration came from in the
// kept history (ConfigVersions).
func (g *Gateway) ReloadFrom(source string, cfg Config) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	old := g.state.Load()
	switch {
	case cfg.Server.Listen != old.cfg.Server.Listen:
		return fmt.Errorf("server.listen: changing %s to %s needs a restart", old.cfg.Server.Listen, cfg.Server.Listen)
	case (cfg.Server.TLS.CertFile == "") != (old.cfg.Server.TLS.CertFile == ""):
		return errors.New("server.tls: turning TLS on or off needs a restart")
	case cfg.Tracing != old.cfg.Tracing:
		return errors.New("tracing: changing it needs a restart")
	case cfg.Metrics != old.cfg.Metrics || cfg.Server.AdminListen != old.cfg.Server.AdminListen:
		return errors.New("metrics, server.admin_listen: changing them needs a restart")
	case cfg.RequestLog.Path != old.cfg.RequestLog.Path:
		return errors.New("request_log.path: changing it needs a restart")
	case cfg.Shaping.Redis != old.cfg.Shaping.Redis:
		return errors.New("shaping.redis: changing it needs a restart")
	case cfg.Mirror.Record.Path != old.cfg.Mirror.Record.Path:
		return errors.New("mirror.record.path: changing it needs a restart")
	}
	cert, err := readCert(cfg.Server.TLS)
	if err != nil {
		return err
	}
	st, err := g.build(cfg, old)
	if err != nil {
		return err
	}
	// From here nothing refuses the file: the limiter first, as it is the
	// one change that could still fail.
	if err := g.lim.Reconfigure(cfg.Shaping); err != nil {
		st.closeExcept(old)
		return err
	}
	g.cert.Store(cert)
	if g.rlog != nil {
		g.rlog.SetSampleRate(cfg.RequestLog.SampleRate)
	}
	g.warnDeprecated(cfg)
	g.state.Store(st)
	g.versions.add(cfg, st.configHash, source)
	// Requests in flight keep the old pools until they end; closing stops
	// the old health checks and drops idle connections of backends that
	// are gone. Unchanged backends carry on in the new pools.
	old.closeExcept(st)
	return nil
}

// warnDeprecated logs what the file says in a way that still works but
// will not for ever.
func (g *Gateway) warnDeprecated(cfg Config) {
	if cfg.LegacyTenants {
		g.log.Warn("shaping.tenants is deprecated: move the tenants to the top-level tenants section (same fields)")
	}
	for _, w := range cfg.Mirror.Deprecated() {
		g.log.Warn(w)
	}
}

// BeginDrain starts a graceful stop without stopping anything yet:
// /readyz answers 503 at once, so load balancers take the gateway out,
// and every response closes its connection, so keep-alive clients
// reconnect elsewhere; requests are still accepted and served. Shutdown
// follows (after server.drain_delay, in `infergate serve`).
func (g *Gateway) BeginDrain() { g.draining.Store(true) }

// Shutdown drains: it stops accepting, lets in-flight requests finish
// until ctx ends, then cancels the rest (their streams end with an SSE
// error event) and waits briefly for them to wind up.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	// Shared caps: leases still held expire by their TTL if not released
	// by the drain; the limiter and the request log stop after it.
	defer g.lim.Close()
	if g.rlog != nil {
		defer g.rlog.Close()
	}
	defer g.pairs.Close()
	if g.tracer != nil {
		defer g.tracer.Shutdown(context.Background())
	}
	defer g.m.mp.Shutdown(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- g.srv.ShutdownWithContext(ctx) }()
	// Streams run on hijacked connections the server no longer counts, so
	// the drain waits for the gateway's own count of requests.
	idle := make(chan struct{})
	go func() { g.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	g.cancelBase(errShutdown)
	g.reqs.Cancel(errShutdown)
	var err error
	select {
	case <-idle:
	case <-time.After(5 * time.Second):
		err = errors.New("proxy: requests still running 5s after cancellation")
	}
	g.closeReserved()
	select {
	case e := <-srvDone:
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
			err = errors.Join(err, e) // a drain cut short is what the cancellation is for
		}
	case <-time.After(5 * time.Second):
		err = errors.Join(err, errors.New("proxy: server did not stop 5s after the drain"))
	}
	// The admin listener goes before the telemetry it reads; the
	// telemetry before the exporters and the request log (deferred).
	_ = g.admin.Shutdown()
	g.stopTelemetry()
	g.state.Load().close()
	g.watch.Close()
	return err
}

// Ready reports whether at least one backend of some pool is available.
func (g *Gateway) Ready() bool {
	now := time.Now()
	for _, p := range g.state.Load().pools {
		if p.Ready(now) {
			return true
		}
	}
	return false
}

// hashConfig is the first 16 hex digits of the SHA-256 of cfg as JSON,
// its secrets (backends' API keys and URL credentials, tenants' keys)
// left out: the hash is served on /healthz to anyone.
func hashConfig(cfg Config) string {
	b, err := json.Marshal(withoutSecrets(cfg))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// withoutSecrets is a copy of cfg with every secret blanked; cfg's maps
// and slices are not touched.
func withoutSecrets(cfg Config) Config {
	pools := make(map[string]PoolConfig, len(cfg.Pools))
	for name, p := range cfg.Pools {
		bs := slices.Clone(p.Backends)
		for i := range bs {
			bs[i].APIKey = ""
			if u, err := url.Parse(bs[i].URL); err == nil && u.User != nil {
				u.User = nil
				bs[i].URL = u.String()
			}
		}
		p.Backends = bs
		pools[name] = p
	}
	cfg.Pools = pools
	tenants := make(map[string]shaping.Tenant, len(cfg.Shaping.Tenants))
	for name, t := range cfg.Shaping.Tenants {
		t.APIKeys = nil
		tenants[name] = t
	}
	cfg.Shaping.Tenants = tenants
	top := make(map[string]TenantConfig, len(cfg.Tenants))
	for name, t := range cfg.Tenants {
		t.APIKeys = nil
		top[name] = t
	}
	cfg.Tenants = top
	cfg.Policy.Tenants = nil // a copy of Tenants
	cfg.Server.AdminAuth = ""
	return cfg
}

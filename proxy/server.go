package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/affinity/share"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/internal/fastsrv"
	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/reqctx"
	"github.com/infergate/infergate/mirror"
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
	// classm are the per-class figures (classmetrics.go).
	classm *classMetrics
	// bus shares placements with the other replicas (share.go); nil
	// until a configuration wants it.
	bus   atomic.Pointer[share.Bus]
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
	fileReload atomic.Pointer[func(by string) error] // SetFileReload
	// versions keeps the applied configurations for rollback.
	versions   versions
	draining   atomic.Bool // BeginDrain or Shutdown was called
	reservedMu sync.Mutex
	reserved   map[net.Conn]struct{} // keep-alive connections given back after a stream
	started    time.Time

	// conns counts the API listener's connections (listener.go).
	conns atomic.Pointer[connLimit]
	// Panics recovered on the request path (panics.go).
	panics [numPanicKinds]atomic.Int64
	// fail is the failpoints, which only tests set (panics.go).
	fail failpoints
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
	g.startShare(&cfg)
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
	// Placements made during the drain are sent before the bus stops.
	defer g.closeShare()
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

package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/internal/hangup"
	"github.com/infergate/infergate/internal/roundtrip"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/metric"
)

// backend is one upstream server with its connection pool, health state,
// breaker and count of outstanding requests. It is safe for concurrent use.
type backend struct {
	name   string // the URL as configured, for logs and metrics
	key    string // its settings, to carry it over a reload unchanged
	host   string // host:port, the Host header
	prefix string // path prefix from the URL, without a trailing slash
	weight int
	auth   string // "Bearer KEY" or empty

	hc *fasthttp.HostClient
	mc *fasthttp.HostClient // its /metrics scrapes (selection load, prefix)
	tc *fasthttp.HostClient // its token counts (tokenizer backend)
	// counts is the form its token counts take, once learned, and the
	// counts by source (tokencount.go).
	counts tokenCounts
	// peer is what the backend's answers said of its keep-alive
	// connections, for both clients (internal/roundtrip).
	peer roundtrip.Peer

	cb *gobreaker.TwoStepCircuitBreaker[struct{}]

	// Selection load and prefix: the scraper's last word, a hash of the
	// name for rendezvous ties, the prefix blocks routed to it and those
	// the index expected it to hold, the prompt tokens its answers
	// reported and those they said were cached, and picks by reason.
	load                         atomic.Pointer[loadState]
	nameHash                     uint64
	promptBlocks, expectedBlocks atomic.Int64
	usagePrompt, usageCached     atomic.Int64
	reasons                      [numReasons]atomic.Int64
	// tpot is a moving average of the time between content events of b's
	// streams (float64 seconds as bits; 0 before the first): selection
	// load and prefix weigh a backend's load by how slowly it decodes.
	// Not TTFT: that moves with cache hits and prompt lengths, and would
	// herd new prefixes away from a backend just for being cold.
	tpot atomic.Uint64
	// prefilling is the gateway's estimate of the prompt tokens b still
	// has to prefill: the uncached prompt tokens of the requests sent to
	// it that have no first token yet (prefill.go). refusedUntil is when
	// the hold after its last admission refusal ends (unix nanoseconds),
	// and refusals counts them by reason.
	prefilling   atomic.Int64
	refusedUntil atomic.Int64
	refusals     [numRefusals]atomic.Int64

	outstanding  atomic.Int64
	healthy      atomic.Bool  // active check verdict; true until checks say otherwise
	ejectedUntil atomic.Int64 // unix nanoseconds; passive ejection
	failStreak   atomic.Int32

	ejectAfter int32
	ejectFor   time.Duration
}

// newBackend builds a backend from its config; connect bounds a dial.
func newBackend(bc BackendConfig, pc PoolConfig, connect time.Duration) (*backend, error) {
	u, err := url.Parse(bc.URL)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", bc.URL, err)
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	b := &backend{
		name: bc.URL, host: u.Host, prefix: strings.TrimSuffix(u.Path, "/"), weight: bc.Weight,
		ejectAfter: int32(pc.Ejection.ConsecutiveFailures), ejectFor: pc.Ejection.Duration,
	}
	key := bc.APIKey
	if bc.APIKeyEnv != "" {
		key = os.Getenv(bc.APIKeyEnv)
	}
	if key != "" {
		b.auth = "Bearer " + key
	}
	b.healthy.Store(true)
	var tlsConf *tls.Config
	if u.Scheme == "https" {
		if tlsConf, err = backendTLS(bc.TLS, u.Hostname()); err != nil {
			return nil, fmt.Errorf("backend %s: %w", bc.URL, err)
		}
	}
	b.hc = &fasthttp.HostClient{
		Addr:                          host,
		Dial:                          dialer(connect, tlsConf),
		MaxConns:                      pc.MaxConnsPerBackend,
		MaxIdleConnDuration:           60 * time.Second,
		DisableHeaderNamesNormalizing: true,
		NoDefaultUserAgentHeader:      true,
		ReadBufferSize:                4096,
		WriteBufferSize:               4096,
	}
	b.mc = metricsClient(b.hc)
	b.tc = countClient(b.hc)
	b.nameHash = xxhash.Sum64String(bc.URL)
	bs := pc.Breaker
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        bc.URL,
		MaxRequests: bs.HalfOpenRequests,
		Interval:    bs.Interval,
		Timeout:     bs.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= bs.MinRequests && float64(c.TotalFailures) >= bs.FailureRatio*float64(c.Requests)
		},
	})
	return b, nil
}

// backendKey identifies a backend's settings: equal keys are the same
// backend to a reload. The resolved API key is part of it, so a changed
// environment variable takes effect.
func backendKey(bc BackendConfig, pc PoolConfig, connect time.Duration) string {
	key := bc.APIKey
	if bc.APIKeyEnv != "" {
		key = os.Getenv(bc.APIKeyEnv)
	}
	return fmt.Sprintf("%#v|%q|%#v|%#v|%d|%v", bc, key, pc.Breaker, pc.Ejection, pc.MaxConnsPerBackend, connect)
}

// Name returns the backend's URL as configured.
func (b *backend) Name() string { return b.name }

// Outstanding returns the requests in flight to b.
func (b *backend) Outstanding() int64 { return b.outstanding.Load() }

// Available reports whether b may be selected now: healthy by the active
// check, not ejected, and its breaker not open.
func (b *backend) Available(now time.Time) bool {
	return b.healthy.Load() && now.UnixNano() >= b.ejectedUntil.Load() && b.cb.State() != gobreaker.StateOpen
}

// BreakerState returns the breaker's state.
func (b *backend) BreakerState() gobreaker.State { return b.cb.State() }

// result records one request's outcome for passive ejection.
func (b *backend) result(ok bool, now time.Time) {
	if ok {
		b.failStreak.Store(0)
		return
	}
	if n := b.failStreak.Add(1); b.ejectAfter > 0 && n >= b.ejectAfter {
		b.failStreak.Store(0)
		b.ejectedUntil.Store(now.Add(b.ejectFor).UnixNano())
	}
}

// close drops idle connections; in-flight ones close when released.
func (b *backend) close() {
	b.hc.CloseIdleConnections()
	b.mc.CloseIdleConnections()
}

// dialConn is a backend connection that remembers what its dial cost.
type dialConn struct {
	net.Conn
	handshake time.Duration
	// rtt is the kernel's round-trip time as last read, at rttAt: a
	// connection is used by one request at a time, and the kernel's
	// figure moves slowly, so it is read again only after rttFresh.
	rtt   time.Duration
	rttAt time.Time
	// FD is the socket's descriptor, found once at the dial: the round
	// trip polls a pooled connection for the backend's hang-up before
	// each reuse (hangup.Resting).
	hangup.FD
}

// newDialConn wraps c, a new connection.
func newDialConn(c net.Conn, handshake time.Duration) *dialConn {
	return &dialConn{Conn: c, handshake: handshake, FD: hangup.FDOf(c)}
}

// rttFresh is how long a connection's round-trip time is reused before
// TCP_INFO is read again: one getsockopt per request was 3% of the
// gateway's CPU on small requests (docs/benchmarks-log.md,
// "2026-12-03: Request cost against nginx (issue 16)").
const rttFresh = 200 * time.Millisecond

// dialer dials TCP and, for HTTPS, does the TLS handshake itself so the
// handshake time is its own figure.
func dialer(timeout time.Duration, tlsConf *tls.Config) fasthttp.DialFunc {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(addr string) (net.Conn, error) {
		deadline := time.Now().Add(timeout)
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if tlsConf == nil {
			return newDialConn(c, 0), nil
		}
		start := time.Now()
		tc := tls.Client(c, tlsConf)
		_ = tc.SetDeadline(deadline)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		_ = tc.SetDeadline(time.Time{})
		return newDialConn(tc, time.Since(start)), nil
	}
}

func backendTLS(c BackendTLS, host string) (*tls.Config, error) {
	conf := &tls.Config{ServerName: host, InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.ServerName != "" {
		conf.ServerName = c.ServerName
	}
	if c.CAFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s holds no PEM certificate", c.CAFile)
		}
		conf.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// observeTPOT folds one stream's mean time between content events into
// b's average (weight 1/8: about the last eight streams).
func (b *backend) observeTPOT(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		old := b.tpot.Load()
		v := d.Seconds()
		if old != 0 {
			v = math.Float64frombits(old)*7/8 + v/8
		}
		if b.tpot.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// tpotAverage is b's moving average time per output token in seconds, 0
// before any stream.
func (b *backend) tpotAverage() float64 { return math.Float64frombits(b.tpot.Load()) }

// observeBackends registers each backend's requests in flight and breaker
// state.
func (g *Gateway) observeBackends(meter metric.Meter) error {
	in := instruments{meter: meter}
	upstream := in.gauge("infergate.upstream.in_flight", "{request}", "Requests in flight to each backend.")
	breaker := in.gauge("infergate.breaker.state", "", "Each backend's circuit breaker: 0 closed, 1 half-open, 2 open.")
	return in.register(func(_ context.Context, o metric.Observer) error {
		for _, p := range g.state.Load().pools {
			for _, b := range p.backends {
				at := backendAttrs(p, b)
				o.ObserveInt64(upstream, b.Outstanding(), at)
				o.ObserveInt64(breaker, breakerValue(b.BreakerState()), at)
			}
		}
		return nil
	})
}

func breakerValue(s gobreaker.State) int64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
	"github.com/infergate/infergate/tracing"
)

// Config is the gateway's part of the configuration file: the server, the
// upstream pools and the models routed to them. The zero value, after
// Defaults, is a server on 127.0.0.1:8080 with no pools.
type Config struct {
	Server    ServerConfig          `yaml:"server"`
	Timeouts  Timeouts              `yaml:"timeouts"`
	Retries   Retries               `yaml:"retries"`
	KeepAlive KeepAlive             `yaml:"keepalive"`
	Pools     map[string]PoolConfig `yaml:"pools"`
	Models    []ModelConfig         `yaml:"models"`
	// DefaultPool receives requests for models not listed in Models; empty
	// means such requests get 404 model_not_found. With no Models, GET
	// /v1/models is passed through to this pool.
	DefaultPool string `yaml:"default_pool"`
	// Auth and Tenants say who may call (package policy); a tenant also
	// carries its admission caps and share of the queue (package shaping).
	Auth    policy.Auth             `yaml:"auth"`
	Tenants map[string]TenantConfig `yaml:"tenants"`
	// Policy counts, trims and caps the tokens of each request (package
	// policy).
	Policy policy.Config `yaml:"policy"`
	// Shaping caps what is in flight and queues the rest (package shaping).
	Shaping shaping.Config `yaml:"shaping"`
	// Mirror copies a sample of requests to candidate pools and records
	// each pair of answers (package mirror; the tap is mirror.go).
	Mirror mirror.Config `yaml:"mirror"`
	// RequestLog writes one JSON line per request (package tracing).
	RequestLog tracing.LogConfig `yaml:"request_log"`
	// Tracing sends a span per request to OpenTelemetry (package tracing).
	// A reload cannot change it.
	Tracing tracing.TraceConfig `yaml:"tracing"`
	// Metrics are served at /metrics on server.admin_listen and may be
	// pushed by OTLP (package tracing). A reload cannot change them.
	Metrics tracing.MetricsConfig `yaml:"metrics"`

	// LegacyTenants is set when the file listed tenants under
	// shaping.tenants, the deprecated place (the gateway warns).
	LegacyTenants bool `yaml:"-" json:"-"`
	// tenantsMerged: Defaults moved the tenants once; tenantConflicts
	// names tenants listed in both places.
	tenantsMerged   bool
	tenantConflicts []string
}

// TenantConfig is one tenant: its keys, models and token limits (package
// policy) and its caps, weight and priority in the queue (package
// shaping), in one section.
type TenantConfig struct {
	policy.Tenant `yaml:",inline"`
	shaping.Cap   `yaml:",inline"`
	// Weight is the tenant's share when tenants of one priority wait
	// together (deficit round robin); default 1.
	Weight int `yaml:"weight"`
	// Priority: waiting requests of a higher priority go first; default 0.
	Priority int `yaml:"priority"`
}

// ServerConfig is the listening side.
type ServerConfig struct {
	// Listen is host:port. Default 127.0.0.1:8080. A reload cannot change it.
	Listen string `yaml:"listen"`
	// AdminListen is host:port of the admin listener: /metrics,
	// /admin/stats, /healthz, /readyz, in plain HTTP. Default
	// 127.0.0.1:9464; "off" turns it off. A reload cannot change it.
	AdminListen string `yaml:"admin_listen"`
	// TLS, when CertFile is set, serves HTTPS; the files are re-read on reload.
	TLS ServerTLS `yaml:"tls"`
	// MaxBodyBytes bounds a request body, in bytes. Default 8 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds a non-streaming response body buffered from a
	// backend, in bytes. Default 64 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// HeaderTimeout bounds reading a request's line and headers, from
	// their first byte (nginx's client_header_timeout): a slowloris
	// sending a byte at a time is cut here. Default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// ReadTimeout bounds reading a request's body, from the end of its
	// headers (nginx's client_body_timeout). Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// MaxConnections caps the client connections open at once; past it a
	// new connection is closed at once, unread, and counted
	// (infergate_connections_refused_total). Default 16384.
	MaxConnections int `yaml:"max_connections"`
	// MaxHeaderBytes bounds a request's line and headers; larger ones get
	// 431. It is also each connection's read buffer (fasthttp's ReadBufferSize). Default 4096.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// WriteTimeout is the longest one write to a client may block (nginx's
	// send_timeout): a client that stops reading a stream, or a large
	// answer, is cut off after it, its backend request cancelled and its
	// slot released. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a client keep-alive connection idle this long.
	// Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainDelay is how long the listener keeps accepting after SIGTERM,
	// with /readyz answering 503 and every response closing its
	// connection, before the drain proper: time for load balancers to
	// notice (match it to their health-check period). Default 0.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// DrainTimeout is how long SIGTERM waits for in-flight requests before
	// cancelling them. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ForwardAuthorization passes the client's Authorization header to the
	// backend. Default false: it is dropped, and a backend's api_key is sent.
	ForwardAuthorization bool `yaml:"forward_authorization"`
	// AdminAuth is the key the admin listener's /metrics and /admin/*
	// routes require, as "Authorization: Bearer KEY"; it may be written
	// as sha256:HEX. /healthz and /readyz stay open for probes. Empty (the
	// default): anyone who reaches admin_listen reads the metrics (model
	// names, backend addresses, tenant names, traffic) and the live view.
	AdminAuth string `yaml:"admin_auth"`
	// ForwardSimFault passes the client's X-Sim-Fault header (the
	// simulator's fault injection) to the backends. Default false;
	// `infergate serve` turns it on for its built-in simulator.
	ForwardSimFault bool `yaml:"forward_sim_fault"`
}

// ServerTLS names the certificate and key, PEM files.
type ServerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Timeouts each have their own error. Before the first byte went to the
// client they answer 504; after it, the stream ends with an SSE error.
type Timeouts struct {
	// Connect bounds dialling a backend, TLS handshake included. Default 5s.
	Connect time.Duration `yaml:"connect"`
	// FirstByte bounds a stream's wait from sending the request to the
	// response headers, and again to the first event. A plain answer's
	// headers come with the whole generation: only Total bounds that
	// wait. Default 120s.
	FirstByte time.Duration `yaml:"first_byte"`
	// Idle bounds the gap between two events of a stream, or between reads
	// of a plain body. Default 60s.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole request. Default 15m.
	Total time.Duration `yaml:"total"`
}

// Retries bounds failover. A retry happens only before the first byte went
// to the client, on a connect error, a 5xx or a 429 from a backend.
type Retries struct {
	// Max is the most retries per request. Default 2; -1 disables retries.
	Max int `yaml:"max"`
	// BudgetRatio caps retries at this share of requests. Default 0.2.
	BudgetRatio float64 `yaml:"budget_ratio"`
	// BudgetMinPerSecond allows this many retries a second whatever the
	// ratio, so a quiet gateway can still fail over. Default 10.
	BudgetMinPerSecond float64 `yaml:"budget_min_per_second"`
}

// KeepAlive makes a stream that waits long for its first event commit its
// response and send SSE comment lines, so idle timeouts of load balancers
// on the way do not cut it. It gives up failover for that request, and
// some clients (openai-go before v3.43) abort on comment lines.
type KeepAlive struct {
	// Delay is how long to wait for the first event before committing;
	// 0 (the default) turns keep-alive off.
	Delay time.Duration `yaml:"delay"`
	// Interval between comment lines. Default 15s.
	Interval time.Duration `yaml:"interval"`
}

// Selection policies.
const (
	LeastOutstandingPolicy   = "least_outstanding"
	WeightedRoundRobinPolicy = "weighted_round_robin"
	PowerOfTwoPolicy         = "power_of_two"
)

// PoolConfig is a set of interchangeable backends.
type PoolConfig struct {
	// Selection is least_outstanding (default), weighted_round_robin or
	// power_of_two.
	Selection string          `yaml:"selection"`
	Backends  []BackendConfig `yaml:"backends"`
	Health    HealthConfig    `yaml:"health"`
	Ejection  EjectionConfig  `yaml:"ejection"`
	Breaker   BreakerConfig   `yaml:"breaker"`
	// MaxConnsPerBackend bounds connections to each backend. Default 16384.
	MaxConnsPerBackend int `yaml:"max_conns_per_backend"`
}

// BackendConfig is one inference server.
type BackendConfig struct {
	// URL is http:// or https:// host:port with an optional path prefix.
	URL string `yaml:"url"`
	// Weight for weighted selection. Default 1.
	Weight int `yaml:"weight"`
	// APIKey is sent as "Authorization: Bearer KEY". APIKeyEnv names an
	// environment variable to read it from instead.
	APIKey    string     `yaml:"api_key"`
	APIKeyEnv string     `yaml:"api_key_env"`
	TLS       BackendTLS `yaml:"tls"`
}

// BackendTLS configures HTTPS to a backend. System roots are trusted, plus
// CAFile when set.
type BackendTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"` // client certificate
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// HealthConfig is the active health check. Path empty (the default) turns
// it off; backends are then judged by ejection and the breaker alone.
type HealthConfig struct {
	Path string `yaml:"path"`
	// Interval between checks. Default 5s.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one check. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// HealthyThreshold consecutive passes mark a backend healthy. Default 2.
	HealthyThreshold int `yaml:"healthy_threshold"`
	// UnhealthyThreshold consecutive failures mark it unhealthy. Default 3.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
}

// EjectionConfig is passive outlier ejection: a backend that fails
// ConsecutiveFailures requests in a row (connect errors, 5xx, timeouts)
// leaves selection for Duration.
type EjectionConfig struct {
	// ConsecutiveFailures before ejection. Default 5; -1 disables.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// Duration of an ejection. Default 30s.
	Duration time.Duration `yaml:"duration"`
}

// BreakerConfig is the per-backend circuit breaker (sony/gobreaker). It
// opens when, within Interval, at least MinRequests were made and the share
// that failed reached FailureRatio; while open the backend is out of
// selection; after OpenTimeout it lets HalfOpenRequests probes through.
type BreakerConfig struct {
	// FailureRatio that opens the breaker. Default 0.5.
	FailureRatio float64 `yaml:"failure_ratio"`
	// MinRequests in the window before the ratio counts. Default 10.
	MinRequests uint32 `yaml:"min_requests"`
	// Interval is the counting window while closed. Default 60s.
	Interval time.Duration `yaml:"interval"`
	// OpenTimeout is how long the breaker stays open. Default 30s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenRequests is the number of probes when half-open. Default 1.
	HalfOpenRequests uint32 `yaml:"half_open_requests"`
}

// ModelConfig routes a model name to a pool.
type ModelConfig struct {
	// Name is the model as clients ask for it.
	Name string `yaml:"name"`
	// Pool is a key of Pools.
	Pool string `yaml:"pool"`
	// UpstreamModel, when set, replaces the model name sent upstream.
	UpstreamModel string `yaml:"upstream_model"`
}

// Defaults fills every zero field with its default.
func (c *Config) Defaults() {
	s := &c.Server
	setDefault(&s.Listen, "127.0.0.1:8080")
	setDefault(&s.AdminListen, DefaultAdminListen)
	setDefault(&s.MaxBodyBytes, 8<<20)
	setDefault(&s.MaxResponseBytes, 64<<20)
	setDefault(&s.HeaderTimeout, 10*time.Second)
	setDefault(&s.ReadTimeout, 30*time.Second)
	setDefault(&s.WriteTimeout, 30*time.Second)
	setDefault(&s.MaxConnections, 16384)
	setDefault(&s.MaxHeaderBytes, 4096)
	setDefault(&s.IdleTimeout, 120*time.Second)
	setDefault(&s.DrainTimeout, 30*time.Second)
	t := &c.Timeouts
	setDefault(&t.Connect, 5*time.Second)
	setDefault(&t.FirstByte, 120*time.Second)
	setDefault(&t.Idle, 60*time.Second)
	setDefault(&t.Total, 15*time.Minute)
	r := &c.Retries
	setDefault(&r.Max, 2)
	setDefault(&r.BudgetRatio, 0.2)
	setDefault(&r.BudgetMinPerSecond, 10)
	setDefault(&c.KeepAlive.Interval, 15*time.Second)
	for name, p := range c.Pools {
		setDefault(&p.Selection, LeastOutstandingPolicy)
		setDefault(&p.MaxConnsPerBackend, 16384)
		setDefault(&p.Health.Interval, 5*time.Second)
		setDefault(&p.Health.Timeout, 2*time.Second)
		setDefault(&p.Health.HealthyThreshold, 2)
		setDefault(&p.Health.UnhealthyThreshold, 3)
		setDefault(&p.Ejection.ConsecutiveFailures, 5)
		setDefault(&p.Ejection.Duration, 30*time.Second)
		setDefault(&p.Breaker.FailureRatio, 0.5)
		setDefault(&p.Breaker.MinRequests, 10)
		setDefault(&p.Breaker.Interval, 60*time.Second)
		setDefault(&p.Breaker.OpenTimeout, 30*time.Second)
		setDefault(&p.Breaker.HalfOpenRequests, 1)
		for i := range p.Backends {
			setDefault(&p.Backends[i].Weight, 1)
		}
		c.Pools[name] = p
	}
	c.mergeTenants()
	c.Mirror.Defaults()
	c.Shaping.Defaults()
	c.RequestLog.Defaults()
	c.Tracing.Defaults()
	c.Metrics.Defaults()
}

// DefaultAdminListen is where the admin listener binds unless told
// otherwise: loopback, on the port OpenTelemetry's Prometheus exporters use.
const DefaultAdminListen = "127.0.0.1:9464"

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports the first invalid field, named by its path in the file
// (for example "pools.gpu.backends[1].url").
func (c *Config) Validate() error {
	s := &c.Server
	if s.MaxBodyBytes < 1 {
		return errors.New("server.max_body_bytes: must be positive")
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"header_timeout", s.HeaderTimeout}, {"read_timeout", s.ReadTimeout}, {"write_timeout", s.WriteTimeout}, {"idle_timeout", s.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("server.%s: must not be negative", d.name)
		}
	}
	if s.MaxConnections < 0 || s.MaxHeaderBytes < 0 {
		return errors.New("server.max_connections, server.max_header_bytes: must not be negative")
	}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		return errors.New("server.tls: cert_file and key_file must be set together")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"timeouts.connect", c.Timeouts.Connect}, {"timeouts.first_byte", c.Timeouts.FirstByte},
		{"timeouts.idle", c.Timeouts.Idle}, {"timeouts.total", c.Timeouts.Total},
		{"server.drain_timeout", s.DrainTimeout}, {"keepalive.interval", c.KeepAlive.Interval},
	} {
		if f.d <= 0 {
			return fmt.Errorf("%s: must be a positive duration, got %v", f.name, f.d)
		}
	}
	if c.KeepAlive.Delay < 0 {
		return errors.New("keepalive.delay: must not be negative")
	}
	if c.Server.DrainDelay < 0 {
		return errors.New("server.drain_delay: must not be negative")
	}
	if c.Retries.Max < -1 {
		return errors.New("retries.max: must be -1 (off) or more")
	}
	if c.Retries.BudgetRatio < 0 || c.Retries.BudgetMinPerSecond < 0 {
		return errors.New("retries: budget_ratio and budget_min_per_second must not be negative")
	}
	names := make([]string, 0, len(c.Pools))
	for name := range c.Pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := c.Pools[name].validate("pools." + name); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		at := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			return fmt.Errorf("%s.name: must be set", at)
		case seen[m.Name]:
			return fmt.Errorf("%s.name: %q is listed twice", at, m.Name)
		case m.Pool == "":
			return fmt.Errorf("%s.pool: must be set", at)
		}
		if _, ok := c.Pools[m.Pool]; !ok {
			return fmt.Errorf("%s.pool: no pool named %q", at, m.Pool)
		}
		seen[m.Name] = true
	}
	if c.DefaultPool != "" {
		if _, ok := c.Pools[c.DefaultPool]; !ok {
			return fmt.Errorf("default_pool: no pool named %q", c.DefaultPool)
		}
	}
	if len(c.Models) == 0 && c.DefaultPool == "" {
		return errors.New("models: at least one model, or a default_pool, is needed")
	}
	for name := range c.Shaping.Pools {
		if _, ok := c.Pools[name]; !ok {
			return fmt.Errorf("shaping.pools.%s: no pool of that name", name)
		}
	}
	if err := c.RequestLog.Validate(); err != nil {
		return err
	}
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	if err := c.Metrics.Validate(); err != nil {
		return err
	}
	if len(c.tenantConflicts) > 0 {
		return fmt.Errorf("tenants.%s: also under shaping.tenants; keep it in tenants only", c.tenantConflicts[0])
	}
	if c.Server.AdminAuth != "" {
		if _, err := policy.ParseKey(c.Server.AdminAuth); err != nil {
			return fmt.Errorf("server.admin_auth: %w", err)
		}
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if err := c.Mirror.Validate(func(name string) bool { _, ok := c.Pools[name]; return ok }); err != nil {
		return err
	}
	return c.Shaping.Validate()
}

// mergeTenants makes the top-level tenants the one list: tenants written
// under shaping.tenants (the old place, still read) move there, and the
// policy and the limiter each get their part. It runs once per Config.
func (c *Config) mergeTenants() {
	if c.tenantsMerged {
		return
	}
	c.tenantsMerged = true
	if len(c.Shaping.Tenants) > 0 {
		c.LegacyTenants = true
		if c.Tenants == nil {
			c.Tenants = map[string]TenantConfig{}
		}
		for _, name := range slices.Sorted(maps.Keys(c.Shaping.Tenants)) {
			t := c.Shaping.Tenants[name]
			if _, dup := c.Tenants[name]; dup {
				c.tenantConflicts = append(c.tenantConflicts, name)
				continue
			}
			c.Tenants[name] = TenantConfig{Tenant: policy.Tenant{APIKeys: t.APIKeys}, Cap: t.Cap, Weight: t.Weight, Priority: t.Priority}
		}
	}
	c.Shaping.Tenants = make(map[string]shaping.Tenant, len(c.Tenants))
	c.Policy.Tenants = make(map[string]policy.Tenant, len(c.Tenants))
	for name, t := range c.Tenants {
		c.Shaping.Tenants[name] = shaping.Tenant{Cap: t.Cap, Weight: t.Weight, Priority: t.Priority}
		c.Policy.Tenants[name] = t.Tenant
	}
	c.Policy.Auth = c.Auth
}

func (p PoolConfig) validate(at string) error {
	switch p.Selection {
	case LeastOutstandingPolicy, WeightedRoundRobinPolicy, PowerOfTwoPolicy:
	default:
		return fmt.Errorf("%s.selection: %q is not least_outstanding, weighted_round_robin or power_of_two", at, p.Selection)
	}
	if len(p.Backends) == 0 {
		return fmt.Errorf("%s.backends: at least one backend is needed", at)
	}
	for i, b := range p.Backends {
		bat := fmt.Sprintf("%s.backends[%d]", at, i)
		u, err := url.Parse(b.URL)
		if err != nil {
			return fmt.Errorf("%s.url: %w", bat, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q must be http:// or https:// with a host", bat, b.URL)
		}
		if b.Weight < 1 {
			return fmt.Errorf("%s.weight: must be at least 1", bat)
		}
		if b.APIKey != "" && b.APIKeyEnv != "" {
			return fmt.Errorf("%s: api_key and api_key_env are exclusive", bat)
		}
		if b.APIKeyEnv != "" && os.Getenv(b.APIKeyEnv) == "" {
			return fmt.Errorf("%s.api_key_env: environment variable %s is empty", bat, b.APIKeyEnv)
		}
		if (b.TLS.CertFile == "") != (b.TLS.KeyFile == "") {
			return fmt.Errorf("%s.tls: cert_file and key_file must be set together", bat)
		}
	}
	h := p.Health
	if h.Path != "" && (h.Interval <= 0 || h.Timeout <= 0 || h.HealthyThreshold < 1 || h.UnhealthyThreshold < 1) {
		return fmt.Errorf("%s.health: interval, timeout and thresholds must be positive", at)
	}
	if p.Breaker.FailureRatio <= 0 || p.Breaker.FailureRatio > 1 {
		return fmt.Errorf("%s.breaker.failure_ratio: %v is not in (0,1]", at, p.Breaker.FailureRatio)
	}
	if p.MaxConnsPerBackend < 1 {
		return fmt.Errorf("%s.max_conns_per_backend: must be positive", at)
	}
	return nil
}

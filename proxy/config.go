package proxy

import (
	"errors"
	"fmt"
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
	// Classes are the service classes (class.go, docs/classes.md); their
	// admission rules go to shaping.
	Classes ClassesConfig `yaml:"classes"`
	// Share sends where this replica placed prompts to the other
	// replicas, through shaping.redis (share.go).
	Share ShareConfig `yaml:"share"`
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
		p.defaults()
		c.Pools[name] = p
	}
	c.mergeTenants()
	c.Share.defaults()
	c.Mirror.Defaults()
	c.Classes.defaults()
	c.Shaping.Classes = c.Classes.Classes
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
	if err := c.Classes.validate(); err != nil {
		return err
	}
	if err := c.Share.validate(); err != nil {
		return err
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
	if err := c.Server.validateAdmin(c.Tenants); err != nil {
		return err
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if err := c.Mirror.Validate(func(name string) bool { _, ok := c.Pools[name]; return ok }); err != nil {
		return err
	}
	return c.Shaping.Validate()
}

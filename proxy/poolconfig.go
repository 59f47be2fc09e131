package proxy

import (
	"fmt"
	"net/url"
	"os"
	"time"
)

// The pools: each a set of interchangeable backends, with the health
// checks, outlier ejection and circuit breaker that keep them honest.

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

// defaults fills the pool's zero fields.
func (p *PoolConfig) defaults() {
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

package proxy

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/httpurl"
)

// The pools: each a set of interchangeable backends, with the health
// checks, outlier ejection and circuit breaker that keep them honest.

// Selection policies.
const (
	LeastOutstandingPolicy   = "least_outstanding"
	WeightedRoundRobinPolicy = "weighted_round_robin"
	PowerOfTwoPolicy         = "power_of_two"
	// LoadPolicy picks the backend with the least load by its own
	// metrics (running and waiting requests), corrected by what the
	// gateway sent and got back since the reading.
	LoadPolicy = "load"
	// PrefixPolicy sends a prompt to the backend expected to hold the
	// longest part of it in its prefix cache, unless that backend is
	// saturated, and otherwise by load.
	PrefixPolicy = "prefix"
)

// PoolConfig is a set of interchangeable backends.
type PoolConfig struct {
	// Selection is least_outstanding (default), weighted_round_robin,
	// power_of_two, load or prefix.
	Selection string          `yaml:"selection"`
	Backends  []BackendConfig `yaml:"backends"`
	// Load is where selection load and prefix read the backends' load.
	Load LoadConfig `yaml:"load"`
	// Prefix shapes selection prefix.
	Prefix   PrefixConfig   `yaml:"prefix"`
	Health   HealthConfig   `yaml:"health"`
	Ejection EjectionConfig `yaml:"ejection"`
	Breaker  BreakerConfig  `yaml:"breaker"`
	// MaxConnsPerBackend bounds connections to each backend. Default 16384.
	MaxConnsPerBackend int `yaml:"max_conns_per_backend"`
	// ClassPriority passes each request's service class to the engine as
	// the body's priority, in its convention: vllm (lower first: priority
	// -1, default 0, flex 1), sglang (higher first: 1, 0, -1), or none
	// (default). Only with classes enabled.
	ClassPriority string `yaml:"class_priority"`
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
	// KVEvents is the engine's KV-event publisher, tcp://host:port
	// (vLLM's kv-events-config endpoint); KVReplay its replay socket.
	// Read with prefix.exact; default none.
	KVEvents string `yaml:"kv_events"`
	KVReplay string `yaml:"kv_replay"`
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

// LoadConfig is the scrape of each backend's own metrics (vLLM's,
// SGLang's, TGI's or llama.cpp's names, as diagnose reads them) that
// selection load and prefix rank backends by. A reading is corrected at
// every pick by the requests the gateway sent and saw end since it was
// taken, so a burst between scrapes does not all land on the backend
// that looked idle. A backend whose scrape fails, or whose reading is
// older than StaleAfter, is ranked by the gateway's own in-flight count,
// and /admin/stats says so.
type LoadConfig struct {
	// MetricsPath is the backends' metrics path. Default /metrics.
	MetricsPath string `yaml:"metrics_path"`
	// Interval between scrapes of each backend. Default 100ms: vLLM's
	// exposition parses in about a millisecond, so four backends cost
	// the gateway about 4% of one core.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one scrape. Default 1s.
	Timeout time.Duration `yaml:"timeout"`
	// StaleAfter is the age past which a reading is not used. Default 2s.
	StaleAfter time.Duration `yaml:"stale_after"`
	// PrefillTokens is how many prompt tokens a backend still has to
	// prefill (uncached) weigh as much as one more request in its batch
	// and queue: a pick's cost is (requests + 1 + prefill tokens /
	// PrefillTokens) × decode slowness / weight. Default 1024 (about
	// 0.1 s of prefill on one GPU, the time a decode step or two of a
	// full batch takes).
	PrefillTokens float64 `yaml:"prefill_tokens"`
}

// PrefixConfig shapes selection prefix: the index of which backend was
// sent which prompt prefix, and the guard that spills a prompt from its
// warm backend to the least loaded one.
type PrefixConfig struct {
	// BlockBytes is the size of a prefix block, in bytes of the prompt's
	// JSON text (about a quarter as many tokens of English). Default 128.
	BlockBytes int `yaml:"block_bytes"`
	// MaxPrefixBytes bounds the part of a prompt that is hashed. Default
	// 131072 (the index tells prefixes apart up to 128 KiB).
	MaxPrefixBytes int `yaml:"max_prefix_bytes"`
	// IndexEntries sizes the pool's index, allocated once: 26 bytes an
	// entry, a prompt taking up to 36 (its checkpoints). Default 262144
	// (6.5 MiB), about 7,000 distinct 4,000-token prefixes remembered.
	IndexEntries int `yaml:"index_entries"`
	// SpillWaiting is the warm backend's queue (requests waiting, by its
	// own metrics) at which a prompt goes to the least loaded backend
	// instead. Default 2: a queue means a slot is scarcer than a prefill.
	SpillWaiting float64 `yaml:"spill_waiting"`
	// SpillKVUsage is the warm backend's KV cache usage (0 to 1) at which
	// a prompt spills: near full, the backend would preempt. Default 0.9.
	SpillKVUsage float64 `yaml:"spill_kv_usage"`
	// SpillImbalance is how many more requests than the least loaded
	// backend the warm one may carry before a prompt spills; the guard
	// that works without backend metrics. Default 32 (SGLang's router's
	// balance threshold).
	SpillImbalance int `yaml:"spill_imbalance"`
	// Sessions sizes the session table, allocated once: a request that
	// names its conversation (prompt_cache_key, previous_response_id,
	// conversation, a SessionHeaders header, or user with SessionUser)
	// goes to the backend that served it last, until the spill guard
	// trips. 22 bytes a session. Default 100000 (2.1 MiB); -1 turns
	// sessions off.
	Sessions int `yaml:"sessions"`
	// SessionHeaders are the request headers read as a session key, in
	// order, after the body's own keys. Default [x-session-id]; an empty
	// list reads none.
	SessionHeaders []string `yaml:"session_headers"`
	// SessionUser reads the body's user field as a session key, the
	// weakest. Default false: many clients send one user for all their
	// conversations, which would pin them all to one backend.
	SessionUser bool `yaml:"session_user"`
	// ColdLoadFactor (ε) and ColdLoadSlack (c, in requests per unit of
	// weight) bound cold placement: a prefix or session no backend is
	// known to hold goes to the backend a rendezvous hash of it ranks
	// first among those whose expected wait is at most (1+ε) times the
	// candidates' mean plus c (consistent hashing with bounded loads),
	// so gateway replicas that never talk place it alike. Defaults 0.25
	// and 2.
	ColdLoadFactor float64 `yaml:"cold_load_factor"`
	ColdLoadSlack  float64 `yaml:"cold_load_slack"`
	// Exact routes by the engines' own KV-cache events (select_exact.go).
	Exact ExactConfig `yaml:"exact"`
}

// DefaultSessionHeader is the header read as a session key unless
// prefix.session_headers says otherwise.
const DefaultSessionHeader = "x-session-id"

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
	setDefault(&p.Load.MetricsPath, "/metrics")
	setDefault(&p.Load.Interval, 100*time.Millisecond)
	setDefault(&p.Load.Timeout, time.Second)
	setDefault(&p.Load.StaleAfter, 2*time.Second)
	setDefault(&p.Load.PrefillTokens, 1024)
	setDefault(&p.Prefix.BlockBytes, 128)
	setDefault(&p.Prefix.MaxPrefixBytes, 128<<10)
	setDefault(&p.Prefix.IndexEntries, 1<<18)
	setDefault(&p.Prefix.SpillWaiting, 2)
	setDefault(&p.Prefix.SpillKVUsage, 0.9)
	setDefault(&p.Prefix.SpillImbalance, 32)
	setDefault(&p.Prefix.Sessions, 100000)
	if p.Prefix.SessionHeaders == nil {
		p.Prefix.SessionHeaders = []string{DefaultSessionHeader}
	}
	setDefault(&p.Prefix.ColdLoadFactor, 0.25)
	setDefault(&p.Prefix.ColdLoadSlack, 2)
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
	p.Prefix.Exact.defaults()
}

func (p PoolConfig) validate(at string) error {
	switch p.ClassPriority {
	case "", enginePriorityNone, enginePriorityVLLM, enginePrioritySGLang:
	default:
		return fmt.Errorf("%s.class_priority: %q is not vllm, sglang or none", at, p.ClassPriority)
	}
	switch p.Selection {
	case LeastOutstandingPolicy, WeightedRoundRobinPolicy, PowerOfTwoPolicy, LoadPolicy, PrefixPolicy:
	default:
		return fmt.Errorf("%s.selection: %q is not least_outstanding, weighted_round_robin, power_of_two, load or prefix", at, p.Selection)
	}
	l, x := p.Load, p.Prefix
	switch {
	case !strings.HasPrefix(l.MetricsPath, "/"):
		return fmt.Errorf("%s.load.metrics_path: %q must start with /", at, l.MetricsPath)
	case l.Interval < 10*time.Millisecond || l.Timeout <= 0 || l.StaleAfter < l.Interval:
		return fmt.Errorf("%s.load: interval must be at least 10ms, timeout positive, stale_after at least the interval", at)
	case !(l.PrefillTokens > 0) || math.IsInf(l.PrefillTokens, 0):
		return fmt.Errorf("%s.load.prefill_tokens: %v is not a positive number of tokens", at, l.PrefillTokens)
	case x.BlockBytes < 16 || x.BlockBytes > 1<<16:
		return fmt.Errorf("%s.prefix.block_bytes: %d is not between 16 and 65536", at, x.BlockBytes)
	case x.MaxPrefixBytes < x.BlockBytes:
		return fmt.Errorf("%s.prefix.max_prefix_bytes: must hold at least one block", at)
	case x.IndexEntries < 64 || x.IndexEntries > 1<<26:
		return fmt.Errorf("%s.prefix.index_entries: %d is not between 64 and 67108864", at, x.IndexEntries)
	case x.SpillWaiting < 0 || x.SpillKVUsage <= 0 || x.SpillKVUsage > 1 || x.SpillImbalance < 0:
		return fmt.Errorf("%s.prefix: spill_waiting and spill_imbalance must not be negative, spill_kv_usage in (0,1]", at)
	case x.Sessions != -1 && (x.Sessions < 64 || x.Sessions > 1<<26):
		return fmt.Errorf("%s.prefix.sessions: %d is not -1 (off) or between 64 and 67108864", at, x.Sessions)
	case len(x.SessionHeaders) > 8:
		return fmt.Errorf("%s.prefix.session_headers: %d headers; at most 8", at, len(x.SessionHeaders))
	case x.ColdLoadFactor < 0 || x.ColdLoadSlack < 0:
		return fmt.Errorf("%s.prefix: cold_load_factor and cold_load_slack must not be negative", at)
	}
	for i, h := range x.SessionHeaders {
		if !headerToken(h) {
			return fmt.Errorf("%s.prefix.session_headers[%d]: %q is not a header name", at, i, h)
		}
	}
	if len(p.Backends) == 0 {
		return fmt.Errorf("%s.backends: at least one backend is needed", at)
	}
	if err := p.validateExact(at); err != nil {
		return err
	}
	for i, b := range p.Backends {
		bat := fmt.Sprintf("%s.backends[%d]", at, i)
		_, err := httpurl.Parse(b.URL)
		if err != nil {
			return fmt.Errorf("%s.url: %w", bat, err)
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

// headerToken reports whether s is a header name (RFC 9110's token).
func headerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

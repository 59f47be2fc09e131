// Package shaping is the gateway's admission control: caps on what is in
// flight (requests or tokens) at four levels, a bounded queue with a
// deadline for what does not fit, and fairness across tenants. It knows
// nothing of HTTP; the proxy asks it for a Permit before it picks a
// backend and releases the permit when the response is done.
package shaping

import (
	"errors"
	"fmt"
	"time"
)

// Cap bounds what one level holds in flight. A zero field is no limit.
type Cap struct {
	// MaxRequests is the most requests in flight.
	MaxRequests int64 `yaml:"max_requests"`
	// MaxTokens is the most tokens in flight, each request counting its
	// prompt tokens plus the output it may still ask for (max_tokens): a
	// budget that follows KV-cache demand better than a request count.
	MaxTokens int64 `yaml:"max_tokens"`
}

func (c Cap) validate(field string) error {
	if c.MaxRequests < 0 || c.MaxTokens < 0 {
		return fmt.Errorf("shaping: %s: caps cannot be negative", field)
	}
	return nil
}

// Tenant is a tenant's cap and its share of the queue.
type Tenant struct {
	Cap `yaml:",inline"`
	// APIKeys is read from the deprecated shaping.tenants section only:
	// keys belong to the top-level tenants section (package policy),
	// where the gateway moves them. Admission knows tenants by name.
	//
	// Deprecated: write keys under the top-level tenants section.
	APIKeys []string `yaml:"api_keys"`
	// Weight is the tenant's share when tenants of one priority wait
	// together (deficit round robin); default 1.
	Weight int `yaml:"weight"`
	// Priority: waiting requests of a higher priority go first; default 0.
	Priority int `yaml:"priority"`
	// DefaultClass is the service class of the tenant's requests that ask
	// for none (or "auto"); default "default".
	DefaultClass string `yaml:"default_class"`
	// MaxClass is the highest class the tenant may ask for (its ceiling);
	// default "default", or DefaultClass when that is higher.
	MaxClass string `yaml:"max_class"`
}

// QueueConfig bounds the wait for a slot.
type QueueConfig struct {
	// MaxWaiting is the most requests waiting at once; beyond it a request
	// is refused at once. Default 1024; -1 means no queue at all.
	MaxWaiting int `yaml:"max_waiting"`
	// Timeout is the longest wait; default 30s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxWaitingPerTenant is the most requests one tenant may have
	// waiting, so that one tenant's flood cannot fill the queue and get
	// everyone else refused. Default half of MaxWaiting (at least 1): a
	// second tenant always finds room; -1 means no per-tenant bound.
	MaxWaitingPerTenant int `yaml:"max_waiting_per_tenant"`
}

// Config is the shaping section of the configuration file. Its zero value
// admits everything at once.
type Config struct {
	Global Cap `yaml:"global"`
	// Pools and Models cap by backend pool and by model name.
	Pools  map[string]Cap `yaml:"pools"`
	Models map[string]Cap `yaml:"models"`
	// Tenants are keyed by tenant name; DefaultTenant applies to every
	// tenant not listed (each gets a cap of its own of that size).
	Tenants       map[string]Tenant `yaml:"tenants"`
	DefaultTenant Tenant            `yaml:"default_tenant"`
	Queue         QueueConfig       `yaml:"queue"`
	// DefaultOutputTokens is the output a request that sets no max_tokens
	// is budgeted for under token caps. Default 512.
	DefaultOutputTokens int64 `yaml:"default_output_tokens"`
	// Redis, when its addr is set, shares every cap between the replicas
	// that name the same server and key prefix.
	Redis RedisConfig `yaml:"redis"`
	// Classes are the service classes (class.go). The file writes them at
	// the top level (classes:), where the gateway reads them from.
	Classes Classes `yaml:"-"`
}

// Defaults fills in zero values.
func (c *Config) Defaults() {
	if c.Queue.MaxWaiting == 0 {
		c.Queue.MaxWaiting = 1024
	}
	if c.Queue.MaxWaitingPerTenant == 0 && c.Queue.MaxWaiting > 0 {
		c.Queue.MaxWaitingPerTenant = max(1, c.Queue.MaxWaiting/2)
	}
	if c.Queue.Timeout == 0 {
		c.Queue.Timeout = 30 * time.Second
	}
	if c.Redis.Addr != "" {
		c.Redis.defaults()
	}
	c.Classes.defaults(c.Queue.Timeout)
	if c.DefaultOutputTokens == 0 {
		c.DefaultOutputTokens = 512
	}
	if c.DefaultTenant.Weight == 0 {
		c.DefaultTenant.Weight = 1
	}
	for name, t := range c.Tenants {
		if t.Weight == 0 {
			t.Weight = 1
			c.Tenants[name] = t
		}
	}
}

// HasTokenCaps reports whether any level caps tokens, so that requests
// need their prompt counted.
func (c *Config) HasTokenCaps() bool {
	if c.Global.MaxTokens > 0 || c.DefaultTenant.MaxTokens > 0 {
		return true
	}
	if c.Classes.Enabled {
		for _, k := range ClassesByRank {
			if c.Classes.Of(k).MaxTokens > 0 {
				return true
			}
		}
	}
	for _, m := range []map[string]Cap{c.Pools, c.Models} {
		for _, cp := range m {
			if cp.MaxTokens > 0 {
				return true
			}
		}
	}
	for _, t := range c.Tenants {
		if t.MaxTokens > 0 {
			return true
		}
	}
	return false
}

// Validate reports the first invalid field, named.
func (c *Config) Validate() error {
	if err := c.Global.validate("global"); err != nil {
		return err
	}
	for name, p := range c.Pools {
		if err := p.validate("pools." + name); err != nil {
			return err
		}
	}
	for name, m := range c.Models {
		if err := m.validate("models." + name); err != nil {
			return err
		}
	}
	for name, t := range c.Tenants {
		if err := t.validate("tenants." + name); err != nil {
			return err
		}
		if t.Weight < 0 {
			return fmt.Errorf("shaping: tenants.%s.weight: must be positive", name)
		}
		if err := validateTenantClasses("tenants."+name, t); err != nil {
			return err
		}
	}
	if err := c.DefaultTenant.validate("default_tenant"); err != nil {
		return err
	}
	if err := validateTenantClasses("default_tenant", c.DefaultTenant); err != nil {
		return err
	}
	if err := c.Classes.validate(); err != nil {
		return err
	}
	if err := c.validateReserves(); err != nil {
		return err
	}
	if c.DefaultOutputTokens < 0 {
		return fmt.Errorf("shaping: default_output_tokens: cannot be negative")
	}
	if err := c.Redis.validate(); err != nil {
		return err
	}
	if c.Queue.MaxWaitingPerTenant < -1 {
		return errors.New("shaping.queue.max_waiting_per_tenant: must be -1 (no bound) or more")
	}
	if c.Queue.MaxWaiting < -1 || c.Queue.Timeout < 0 {
		return fmt.Errorf("shaping: queue: max_waiting must be -1 or more and timeout not negative")
	}
	return nil
}

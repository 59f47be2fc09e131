package proxy

import (
	"maps"
	"slices"

	"github.com/infergate/infergate/policy"
	"github.com/infergate/infergate/shaping"
)

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
	// DefaultClass and MaxClass are the tenant's service class when it
	// asks for none, and the highest it may ask for (classes).
	DefaultClass string `yaml:"default_class"`
	MaxClass     string `yaml:"max_class"`
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
			c.Tenants[name] = TenantConfig{Tenant: policy.Tenant{APIKeys: t.APIKeys}, Cap: t.Cap, Weight: t.Weight, Priority: t.Priority,
				DefaultClass: t.DefaultClass, MaxClass: t.MaxClass}
		}
	}
	c.Shaping.Tenants = make(map[string]shaping.Tenant, len(c.Tenants))
	c.Policy.Tenants = make(map[string]policy.Tenant, len(c.Tenants))
	for name, t := range c.Tenants {
		c.Shaping.Tenants[name] = shaping.Tenant{Cap: t.Cap, Weight: t.Weight, Priority: t.Priority, DefaultClass: t.DefaultClass, MaxClass: t.MaxClass}
		c.Policy.Tenants[name] = t.Tenant
	}
	c.Policy.Auth = c.Auth
}

package shaping

import (
	"errors"
	"fmt"
	"time"
)

// Service classes (issue 45): three classes, highest first priority,
// default and flex. Between classes the queue is strict, except that a
// lower class that waits gets one grant in every Classes.LowerShare (the
// rule in fairQueue.next); within a class tenant priority and deficit
// round robin stay. A class has its own queue deadline and optional cap
// (a fifth cap level, shared through Redis like the others), the lowest
// class is shed first when the queue is full, and a request of a
// preemptible class that has sent nothing to its client yet can be
// preempted for a higher class that must queue (Permit.Arm).

// Class is a request's service class. The zero value is ClassDefault, so
// a Request that names none is a default one.
type Class uint8

const (
	// ClassDefault is what a request gets when it asks for nothing.
	ClassDefault Class = iota
	// ClassPriority goes first.
	ClassPriority
	// ClassFlex goes last, is shed first and may be preempted.
	ClassFlex
	// NumClasses is the number of classes.
	NumClasses
)

// ClassesByRank lists the classes highest first.
var ClassesByRank = [NumClasses]Class{ClassPriority, ClassDefault, ClassFlex}

var classNames = [NumClasses]string{"default", "priority", "flex"}

// String is the class's name as requests and configuration write it.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "unknown"
}

// rank orders the classes: higher goes first.
func (c Class) rank() int {
	switch c {
	case ClassPriority:
		return 2
	case ClassFlex:
		return 0
	}
	return 1
}

// Above reports whether c goes before d.
func (c Class) Above(d Class) bool { return c.rank() > d.rank() }

// MaxClassNameBytes bounds a class name as a client may send it: longer
// values are refused before anything else looks at them.
const MaxClassNameBytes = 16

// ParseClass reads a class name: priority, default or flex. "auto" and
// the empty string are not classes (the caller applies the tenant's
// default); anything else is refused.
func ParseClass(b []byte) (Class, bool) {
	switch string(b) { // compared in place
	case "priority":
		return ClassPriority, true
	case "default":
		return ClassDefault, true
	case "flex":
		return ClassFlex, true
	}
	return 0, false
}

func parseClassName(s string) (Class, bool) { return ParseClass([]byte(s)) }

// ClassConfig is one class's admission settings.
type ClassConfig struct {
	// Cap bounds the class's requests or tokens in flight (all tenants
	// together), shared across replicas with Redis like every other cap.
	Cap `yaml:",inline"`
	// QueueTimeout is the longest a request of the class waits for a
	// slot. Defaults: priority 10s, default the queue's timeout, flex 120s.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// Preemptible lets a request of the class be preempted, before its
	// first byte, for a higher class that must queue. Default: flex only.
	Preemptible *bool `yaml:"preemptible"`
	// SLOTTFT is the class's time-to-first-token objective; attainment
	// against it is counted per class (0: none).
	SLOTTFT time.Duration `yaml:"slo_ttft"`
	// Reserved and ReservedTokens hold part of every capped global, pool
	// and model cap (not tenant or class caps) for this class and those
	// above it: a request of a lower class takes a slot only while the
	// reserves of all the classes above its own stay free (priority's
	// reserve is kept from default and flex, default's from flex; they
	// add up). Nothing is reserved for flex: nothing is below it.
	Reserved       int64 `yaml:"reserved"`
	ReservedTokens int64 `yaml:"reserved_tokens"`
}

// Classes configures service classes. The zero value leaves them off:
// every request is a default one and nothing changes.
type Classes struct {
	// Enabled turns classes on.
	Enabled bool `yaml:"enabled"`
	// LowerShare is N in the starvation rule: while a lower class waits,
	// at most N-1 grants in a row go to higher classes; the Nth goes to
	// the lower class whose oldest waiter has waited longest. Default 10;
	// -1 is strict order (a lower class may starve).
	LowerShare int `yaml:"lower_share"`
	// AboveCeiling is what happens to a request that asks for a class
	// above its tenant's max_class: "lower" (default) serves it at the
	// ceiling and says so; "refuse" answers 403.
	AboveCeiling string `yaml:"above_ceiling"`
	// The classes' own settings.
	Priority ClassConfig `yaml:"priority"`
	Default  ClassConfig `yaml:"default"`
	Flex     ClassConfig `yaml:"flex"`
}

// HeldFrom returns how much of a capped level's cap class k may not take:
// the reserves of the classes above it (requests, tokens). Zero with
// classes off.
func (c *Classes) HeldFrom(k Class) (reqs, toks int64) {
	if !c.Enabled {
		return 0, 0
	}
	for _, above := range ClassesByRank {
		if !above.Above(k) {
			break
		}
		cc := c.Of(above)
		reqs += cc.Reserved
		toks += cc.ReservedTokens
	}
	return reqs, toks
}

// Of returns class k's settings.
func (c *Classes) Of(k Class) *ClassConfig {
	switch k {
	case ClassPriority:
		return &c.Priority
	case ClassFlex:
		return &c.Flex
	}
	return &c.Default
}

// Preemptible reports whether requests of class k may be preempted.
func (c *Classes) Preemptible(k Class) bool {
	if p := c.Of(k).Preemptible; p != nil {
		return *p
	}
	return k == ClassFlex
}

func (c *Classes) defaults(queueTimeout time.Duration) {
	if c.LowerShare == 0 {
		c.LowerShare = 10
	}
	if c.AboveCeiling == "" {
		c.AboveCeiling = "lower"
	}
	for k, d := range [NumClasses]time.Duration{ClassPriority: 10 * time.Second, ClassDefault: queueTimeout, ClassFlex: 120 * time.Second} {
		if cc := c.Of(Class(k)); cc.QueueTimeout == 0 {
			cc.QueueTimeout = d
		}
	}
}

func (c *Classes) validate() error {
	if c.LowerShare < -1 || c.LowerShare == 1 {
		return errors.New("shaping: classes.lower_share: want N >= 2 (one grant in N goes to a waiting lower class) or -1 (strict order)")
	}
	if c.AboveCeiling != "lower" && c.AboveCeiling != "refuse" && c.AboveCeiling != "" {
		return fmt.Errorf("shaping: classes.above_ceiling %q: want lower or refuse", c.AboveCeiling)
	}
	for _, k := range ClassesByRank {
		cc := c.Of(k)
		if err := cc.validate("classes." + k.String()); err != nil {
			return err
		}
		if cc.QueueTimeout < 0 || cc.SLOTTFT < 0 {
			return fmt.Errorf("shaping: classes.%s: queue_timeout and slo_ttft must not be negative", k)
		}
		if cc.Reserved < 0 || cc.ReservedTokens < 0 {
			return fmt.Errorf("shaping: classes.%s: reserved and reserved_tokens must not be negative", k)
		}
	}
	if c.Flex.Reserved != 0 || c.Flex.ReservedTokens != 0 {
		return errors.New("shaping: classes.flex.reserved: nothing is below flex to reserve against; set it on priority or default")
	}
	return nil
}

// validateReserves refuses reserves that would leave a lower class no
// room at some capped level: what is held from flex (every reserve added
// up) must be below each global, pool and model cap of its kind.
func (c *Config) validateReserves() error {
	if !c.Classes.Enabled {
		return nil
	}
	reqs, toks := c.Classes.HeldFrom(ClassFlex)
	if reqs == 0 && toks == 0 {
		return nil
	}
	check := func(field string, cp Cap) error {
		if cp.MaxRequests > 0 && reqs >= cp.MaxRequests {
			return fmt.Errorf("shaping: classes: %d requests reserved (priority.reserved + default.reserved) leave flex nothing of %s.max_requests %d; want fewer than the cap", reqs, field, cp.MaxRequests)
		}
		if cp.MaxTokens > 0 && toks >= cp.MaxTokens {
			return fmt.Errorf("shaping: classes: %d tokens reserved (priority.reserved_tokens + default.reserved_tokens) leave flex nothing of %s.max_tokens %d; want fewer than the cap", toks, field, cp.MaxTokens)
		}
		return nil
	}
	if err := check("global", c.Global); err != nil {
		return err
	}
	for name, p := range c.Pools {
		if err := check("pools."+name, p); err != nil {
			return err
		}
	}
	for name, m := range c.Models {
		if err := check("models."+name, m); err != nil {
			return err
		}
	}
	return nil
}

// validateTenantClasses checks a tenant's default_class and max_class.
func validateTenantClasses(field string, t Tenant) error {
	def, ceil := ClassDefault, ClassDefault
	var ok bool
	if t.DefaultClass != "" {
		if def, ok = parseClassName(t.DefaultClass); !ok {
			return fmt.Errorf("shaping: %s.default_class %q: want priority, default or flex", field, t.DefaultClass)
		}
	}
	if t.MaxClass != "" {
		if ceil, ok = parseClassName(t.MaxClass); !ok {
			return fmt.Errorf("shaping: %s.max_class %q: want priority, default or flex", field, t.MaxClass)
		}
	} else if def.Above(ceil) {
		ceil = def
	}
	if def.Above(ceil) {
		return fmt.Errorf("shaping: %s.default_class %s is above its max_class %s", field, def, ceil)
	}
	return nil
}

// ErrClassAboveCeiling refuses a request that asked for a class above its
// tenant's ceiling, with classes.above_ceiling "refuse".
var ErrClassAboveCeiling = errors.New("shaping: the class asked for is above the tenant's max_class")

// tenantClasses returns the tenant's default class and ceiling (after
// Validate). Without max_class the ceiling is default, or the tenant's
// default class when that is higher: priority must be granted.
func (t *Tenant) classes() (def, ceil Class) {
	def, ceil = ClassDefault, ClassDefault
	if c, ok := parseClassName(t.DefaultClass); ok {
		def = c
	}
	if c, ok := parseClassName(t.MaxClass); ok {
		ceil = c
	} else if def.Above(ceil) {
		ceil = def
	}
	return def, ceil
}

// ResolveClass is the class a request of tenant is served in: the class
// it asked for (asked set) or its tenant's default, held to the tenant's
// ceiling. lowered reports a request served below what it asked for; with
// above_ceiling "refuse" such a request gets ErrClassAboveCeiling instead.
func (c *Config) ResolveClass(tenant string, asked Class, set bool) (served Class, lowered bool, err error) {
	t, ok := c.Tenants[tenant]
	if !ok {
		t = c.DefaultTenant
	}
	def, ceil := t.classes()
	if !set {
		return def, false, nil
	}
	if asked.Above(ceil) {
		if c.Classes.AboveCeiling == "refuse" {
			return ceil, false, ErrClassAboveCeiling
		}
		return ceil, true, nil
	}
	return asked, false, nil
}

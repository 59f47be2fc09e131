package mirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/infergate/infergate/quality"
)

// Config is the mirror: section: rules that copy requests to candidate
// pools, a canary split, and where the pairs of answers go. The zero
// value mirrors nothing.
type Config struct {
	Rules []Rule `yaml:"rules"`
	// Split sends a share of live traffic to a candidate pool instead
	// of the primary (a canary), each request recorded as one arm.
	Split *Split `yaml:"split"`
	// Record is where each pair is written.
	Record Record `yaml:"record"`
}

// Rule copies a sample of the requests it matches to a candidate pool.
// The first rule that matches and samples a request takes it.
type Rule struct {
	// Name labels the rule's pairs and counts; default "mirror-N".
	Name string `yaml:"name"`
	// Pool is the candidate pool, a key of pools (with its own
	// connections and health).
	Pool string `yaml:"pool"`
	// Sample is the share of matching requests copied, 0 to 1, decided
	// by the request id (a replay with the same ids copies the same
	// requests). Default 1.
	Sample float64 `yaml:"sample"`
	// Match narrows the rule; an empty list matches everything.
	Match Match `yaml:"match"`
	// Overrides change the copy, never the primary.
	Overrides Overrides `yaml:"overrides"`
	// MaxInFlight caps the rule's copies in flight; a copy past it is
	// dropped and counted. Default 64.
	MaxInFlight int `yaml:"max_in_flight"`
	// AA also sends each sampled request, unchanged, once more to the
	// primary's own pool (the A/A arm): ab report shows how far two
	// answers of the same build differ, the noise floor a real
	// difference must clear. It counts against MaxInFlight.
	AA bool `yaml:"aa"`
}

// Split is a canary: a weighted share of the matching requests is served
// by the candidate pool instead of the primary, sticky by tenant or by a
// header's value, and every split request (both arms) is recorded for ab
// report, which compares the arms as independent samples.
type Split struct {
	// Pool is the candidate pool.
	Pool string `yaml:"pool"`
	// Weight is the candidate's share, 0 to 1.
	Weight float64 `yaml:"weight"`
	// Sticky keeps a client on one arm: "tenant", "header:NAME", or ""
	// (each request by its id).
	Sticky string `yaml:"sticky"`
	// Model, when set, is the model name the candidate gets.
	Model string `yaml:"model"`
	Match Match  `yaml:"match"`
}

// Match selects requests by model, tenant, path and header values. Only
// the completion routes (chat, completions, Responses) are ever copied,
// whatever Paths says: nothing else has an answer to compare.
type Match struct {
	Models  []string          `yaml:"models"`
	Tenants []string          `yaml:"tenants"`
	Paths   []string          `yaml:"paths"`
	Headers map[string]string `yaml:"headers"`
}

// Overrides are applied to the copy: its model name and any top-level
// JSON member (temperature, max_tokens, ...).
type Overrides struct {
	Model  string         `yaml:"model"`
	Fields map[string]any `yaml:"fields"`
}

// Record is where pairs go: a JSONL file, rotated, and the admin API's
// /admin/pairs (the most recent).
type Record struct {
	// Path of the JSONL file (0600: it holds prompts and answers); empty:
	// only the admin API.
	Path string `yaml:"path"`
	// MaxBytes rotates the file past this size (to PATH.1, PATH.2, ...).
	// Default 64 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxFiles is how many rotated files are kept, as request_log's
	// max_files. Default 3.
	MaxFiles int `yaml:"max_files"`
	// Keep is MaxFiles' old name, still read (with a warning).
	Keep int `yaml:"keep"`
	// Output is what of each answer's text is kept: "full" (up to
	// max_output_bytes), "hash" (its SHA-256 and length) or "none".
	// Default full.
	Output string `yaml:"output"`
	// MaxOutputBytes caps a kept answer. Default 16 KiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// Recent is how many pairs /admin/pairs holds. Default 1000.
	Recent int `yaml:"recent"`
	// RefusalPatterns are regular expressions of a refusal, matched
	// case-insensitively against an answer's opening (package quality,
	// the judge bench uses too). Default: quality.DefaultRefusals.
	RefusalPatterns []string `yaml:"refusal_patterns"`
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Defaults fills every zero field with its default.
func (c *Config) Defaults() {
	for i := range c.Rules {
		r := &c.Rules[i]
		setDefault(&r.Name, fmt.Sprintf("mirror-%d", i))
		setDefault(&r.Sample, 1)
		setDefault(&r.MaxInFlight, 64)
	}
	rec := &c.Record
	setDefault(&rec.MaxBytes, 64<<20)
	if rec.MaxFiles == 0 && rec.Keep != 0 {
		rec.MaxFiles = rec.Keep
	}
	setDefault(&rec.MaxFiles, 3)
	setDefault(&rec.Output, "full")
	setDefault(&rec.MaxOutputBytes, 16<<10)
	setDefault(&rec.Recent, 1000)
}

// Deprecated lists what the section says in a way that still works but
// will not for ever, for the gateway to warn of.
func (c *Config) Deprecated() []string {
	if c.Record.Keep != 0 {
		return []string{"mirror.record.keep is deprecated: it is mirror.record.max_files now, as in request_log"}
	}
	return nil
}

// Validate reports the first invalid field, named by its path in the
// file. hasPool tells whether a pool of that name exists.
func (c *Config) Validate(hasPool func(string) bool) error {
	names := map[string]bool{}
	for i, r := range c.Rules {
		at := fmt.Sprintf("mirror.rules[%d]", i)
		if !hasPool(r.Pool) {
			return fmt.Errorf("%s.pool: no pool named %q", at, r.Pool)
		}
		if r.Sample < 0 || r.Sample > 1 || math.IsNaN(r.Sample) {
			return fmt.Errorf("%s.sample: %v is not in [0, 1]", at, r.Sample)
		}
		if r.MaxInFlight < 1 {
			return fmt.Errorf("%s.max_in_flight: must be positive", at)
		}
		if names[r.Name] {
			return fmt.Errorf("%s.name: %q is used twice", at, r.Name)
		}
		names[r.Name] = true
		for k, v := range r.Overrides.Fields {
			if k == "model" {
				return fmt.Errorf("%s.overrides.fields.model: use overrides.model", at)
			}
			if _, err := json.Marshal(v); err != nil {
				return fmt.Errorf("%s.overrides.fields.%s: %w", at, k, err)
			}
		}
	}
	if sp := c.Split; sp != nil {
		if !hasPool(sp.Pool) {
			return fmt.Errorf("mirror.split.pool: no pool named %q", sp.Pool)
		}
		if sp.Weight < 0 || sp.Weight > 1 || math.IsNaN(sp.Weight) {
			return fmt.Errorf("mirror.split.weight: %v is not in [0, 1]", sp.Weight)
		}
		if h, ok := strings.CutPrefix(sp.Sticky, "header:"); sp.Sticky != "" && sp.Sticky != "tenant" && (!ok || h == "") {
			return fmt.Errorf("mirror.split.sticky: %q is not tenant or header:NAME", sp.Sticky)
		}
	}
	rec := c.Record
	switch rec.Output {
	case "full", "hash", "none":
	default:
		return fmt.Errorf("mirror.record.output: %q is not full, hash or none", rec.Output)
	}
	if rec.MaxBytes < 1 || rec.MaxFiles < 0 || rec.Keep < 0 || rec.MaxOutputBytes < 0 || rec.Recent < 0 {
		return errors.New("mirror.record: max_bytes must be positive; max_files, max_output_bytes and recent not negative")
	}
	if _, err := quality.NewJudge(rec.RefusalPatterns); err != nil {
		return fmt.Errorf("mirror.record.refusal_patterns: %w", err)
	}
	return nil
}

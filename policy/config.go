// Package policy decides who may call the gateway and what a request may
// cost: it names the tenant of an API key, refuses unknown keys and models
// a tenant may not use, counts a chat request's tokens the way the model's
// chat template counts them, trims the context to a ceiling, and caps the
// output. It knows no HTTP library: the gateway hands it a header value and
// a body, and gets back a Decision (pass the exact bytes, or a rewritten
// body) or an error with the status it deserves.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Strategy is what happens to a request whose input exceeds its
// max_input_tokens.
type Strategy string

// The strategies. The zero value is Reject.
const (
	// Reject answers 400 context_length_exceeded, saying how many tokens
	// were sent and how many are allowed.
	Reject Strategy = "reject"
	// DropOldest keeps every system (and developer) message and the newest
	// turns, and drops whole older turns: an assistant message that called
	// tools goes with all of its tool results, and no tool result is left
	// without its call.
	DropOldest Strategy = "drop_oldest"
	// TruncateMiddle shortens the longest message, keeping its head and
	// tail and putting a marker where the middle was.
	TruncateMiddle Strategy = "truncate_middle"
)

func (s Strategy) valid() bool {
	return s == "" || s == Reject || s == DropOldest || s == TruncateMiddle
}

// Limits are the token ceilings of a request. A zero field sets nothing.
// Where a tenant, a model and the policy section all set one, the lowest
// ceiling holds, and the first strategy set (tenant, then model, then the
// section's) applies.
type Limits struct {
	// MaxInputTokens caps the prompt: messages, as the chat template
	// counts them.
	MaxInputTokens int `yaml:"max_input_tokens"`
	// Trim is what to do above MaxInputTokens: reject (the default),
	// drop_oldest or truncate_middle.
	Trim Strategy `yaml:"trim"`
	// MaxOutputTokens clamps max_tokens and max_completion_tokens.
	MaxOutputTokens int `yaml:"max_output_tokens"`
	// DefaultOutputTokens is set as max_tokens on a request that sends
	// neither field. With MaxOutputTokens and no default, the ceiling is
	// set: a request without a limit would otherwise run past it.
	DefaultOutputTokens int `yaml:"default_output_tokens"`
}

func (l Limits) validate(field string) error {
	if l.MaxInputTokens < 0 || l.MaxOutputTokens < 0 || l.DefaultOutputTokens < 0 {
		return fmt.Errorf("%s: token limits cannot be negative", field)
	}
	if !l.Trim.valid() {
		return fmt.Errorf("%s.trim: %q is not reject, drop_oldest or truncate_middle", field, l.Trim)
	}
	return nil
}

// merge returns l with every ceiling lowered to o's where o sets a lower
// one, and o's strategy and default where l has none.
func (l Limits) merge(o Limits) Limits {
	l.MaxInputTokens = minSet(l.MaxInputTokens, o.MaxInputTokens)
	l.MaxOutputTokens = minSet(l.MaxOutputTokens, o.MaxOutputTokens)
	if l.Trim == "" {
		l.Trim = o.Trim
	}
	if l.DefaultOutputTokens == 0 {
		l.DefaultOutputTokens = o.DefaultOutputTokens
	}
	return l
}

// minSet is the lower of two limits where 0 means none.
func minSet(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// Tenant is who calls: the keys that identify it, the models it may use
// and its own limits.
type Tenant struct {
	// APIKeys are the bearer tokens of the tenant, each either the key
	// itself or "sha256:" and the 64 hex digits of its SHA-256, so that
	// the file holds no secret (`printf %s KEY | sha256sum`).
	APIKeys []string `yaml:"api_keys"`
	// Models limits the tenant to these model names (as the client sends
	// them); empty allows every model. Others get 403 model_not_allowed.
	Models []string `yaml:"models"`
	Limits `yaml:",inline"`
}

// Model is the policy of one model name: how its tokens are counted and
// its limits.
type Model struct {
	// Tokenizer counts the model's tokens: "cl100k_base" or "o200k_base"
	// (tiktoken, offline), "hf:PATH" (a Hugging Face tokenizer.json of a
	// byte-level BPE model: Llama 3, Qwen 2 and later, GPT-2), "backend"
	// (the backend's own count: vLLM's /tokenize, llama.cpp's
	// input_tokens; exact, at the cost of a round trip), or "estimate" (the documented byte estimate). Default: the
	// section's tokenizer.
	Tokenizer string `yaml:"tokenizer"`
	// Template is the chat template's framing: "openai" (3 tokens a
	// message, 1 for a name, 3 to prime the reply, as OpenAI documents
	// for its chat models), "chatml" (Qwen, Yi and others: <|im_start|>
	// role\n ... <|im_end|>\n), "llama3", or "none". Default: the
	// section's.
	Template string `yaml:"template"`
	Limits   `yaml:",inline"`
}

// Auth is the top-level auth section.
type Auth struct {
	// Required refuses a request without a key of a configured tenant
	// with 401 invalid_api_key. Without it, a request with an unknown key
	// or none is served, as a tenant named by a hash of its key (or
	// "anonymous").
	Required bool `yaml:"required"`
}

// Config is the policy: the top-level auth and tenants sections (set by
// the gateway's configuration, not read from the policy section) and the
// policy section itself. Its zero value lets every request through
// unchanged.
type Config struct {
	Auth    Auth              `yaml:"-"`
	Tenants map[string]Tenant `yaml:"-"`
	// Limits hold for every request, beneath any tenant's and model's.
	Limits `yaml:",inline"`
	// Tokenizer and Template are the defaults of every model (Model).
	// Default tokenizer "estimate", template "openai".
	Tokenizer string `yaml:"tokenizer"`
	Template  string `yaml:"template"`
	// Models are keyed by the model name clients send.
	Models map[string]Model `yaml:"models"`
	// StreamUsage asks the backend for the usage of every stream
	// (stream_options.include_usage), so that output tokens are counted
	// exactly, and removes that usage chunk before it reaches a client
	// that did not ask for it. Default false.
	StreamUsage bool `yaml:"stream_usage"`
}

// Validate reports the first invalid field, named by its path.
func (c *Config) Validate() error {
	if err := c.Limits.validate("policy"); err != nil {
		return err
	}
	if err := validTokenizer("policy.tokenizer", c.Tokenizer); err != nil {
		return err
	}
	if err := validTemplate("policy.template", c.Template); err != nil {
		return err
	}
	for name, m := range c.Models {
		f := "policy.models." + name
		if err := m.Limits.validate(f); err != nil {
			return err
		}
		if err := validTokenizer(f+".tokenizer", m.Tokenizer); err != nil {
			return err
		}
		if err := validTemplate(f+".template", m.Template); err != nil {
			return err
		}
	}
	owner := map[[32]byte]string{}
	for _, name := range sortedKeys(c.Tenants) {
		t := c.Tenants[name]
		f := "tenants." + name
		if err := t.Limits.validate(f); err != nil {
			return err
		}
		for i, k := range t.APIKeys {
			d, err := keyDigest(k)
			if err != nil {
				// The error names the position, never the key.
				return fmt.Errorf("%s.api_keys[%d]: %w", f, i, err)
			}
			if other, dup := owner[d]; dup {
				return fmt.Errorf("%s.api_keys[%d]: a key of tenant %s too", f, i, other)
			}
			owner[d] = name
		}
	}
	if c.Auth.Required && len(owner) == 0 {
		return fmt.Errorf("auth.required: no tenant has an api key, so every request would be refused")
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// maxKeyBytes bounds a key, configured or presented.
const maxKeyBytes = 512

// ParseKey checks a configured key, written as the key or as sha256:HEX,
// and returns its SHA-256. Its errors never repeat the key.
func ParseKey(k string) ([32]byte, error) { return keyDigest(k) }

// keyDigest is the SHA-256 of a configured key, written as the key or as
// sha256:HEX.
func keyDigest(k string) ([32]byte, error) {
	var d [32]byte
	if h, ok := strings.CutPrefix(k, "sha256:"); ok {
		if len(h) != 64 {
			return d, fmt.Errorf("sha256: wants 64 hex digits, has %d characters", len(h))
		}
		if _, err := hex.Decode(d[:], []byte(h)); err != nil {
			return d, fmt.Errorf("sha256: not hex")
		}
		return d, nil
	}
	if k == "" {
		return d, fmt.Errorf("an empty key")
	}
	if len(k) > maxKeyBytes {
		return d, fmt.Errorf("a key of %d bytes; at most %d", len(k), maxKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return d, fmt.Errorf("a key must be printable ASCII without spaces")
		}
	}
	return sha256.Sum256([]byte(k)), nil
}

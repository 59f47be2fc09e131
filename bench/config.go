package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/verdict"
)

// Config is one benchmark: where, what, how hard, and where the
// per-request rows go.
type Config struct {
	// URL is the server's base URL (http://host:8000, or .../v1), or the
	// full endpoint (.../v1/chat/completions or .../v1/completions, which
	// then sets Workload.Endpoint).
	URL      string
	Workload WorkloadSpec
	Load     LoadSpec
	// Sweep runs one stage per value: concurrencies in closed loop, rates
	// in open loop. Empty runs one stage at Load's level.
	Sweep []float64
	SLOs  []verdict.SLO
	// SLOPercentile is the share of requests that must meet each SLO for
	// it to be met (0.9 when zero); compare judges by it.
	SLOPercentile float64
	// Headers go with every request (-H and --api-key).
	Headers [][2]string
	// Refusals are regular expressions of a refusal, matched
	// case-insensitively against an answer's opening; nil uses
	// quality.DefaultRefusals, the mirror's too.
	Refusals []string
	// CSV and Events receive per-request rows as they finish; either may
	// be nil.
	CSV, Events io.Writer
	// Progress receives a live progress bar; nil shows none.
	Progress io.Writer
	// InsecureSkipVerify accepts any TLS certificate.
	InsecureSkipVerify bool
	// DirectURL, when set, is the backend behind the gateway at URL:
	// after the stages, Pairs requests go through the gateway and
	// straight to it, paired (Paired). Pairs defaults to 50.
	DirectURL string
	Pairs     int
	// NoSweepStop runs every level of a sweep, past over-saturation too
	// (overSaturated).
	NoSweepStop bool
	// GatewayAdmin is the admin listener of the infergate gateway at URL
	// (and GatewayAdminKey its server.admin_auth key): the record then
	// carries the gateway's settings, so compare can say what changed.
	GatewayAdmin, GatewayAdminKey string
	// Overrides are top-level fields set in every request body (a
	// provider's own parameters, temperature, ...), replacing the
	// workload's.
	Overrides map[string]json.RawMessage
	// HonorRetryAfter holds every user back, after an answer with
	// Retry-After (a 429 or 503), until the time it names has passed
	// (at most MaxRetryAfter); the hold carries from stage to stage.
	HonorRetryAfter bool
	// OnResult, when set, sees every finished request (warm-up
	// included), one at a time.
	OnResult func(*Result)
	// Tokenizer counts prompt and answer tokens (cl100k_base); nil loads
	// one. Benches side by side share one: each costs ~14 MB.
	Tokenizer *tokens.Tokenizer
	// Cache is the server's prefix-cache state the run asks for: "cold"
	// (prompts the server has not seen: a fresh seed, drawn when
	// Workload.Seed is 0, and refused with a given seed) or "warm" (each
	// stage sends one unmeasured pass of its prompts first, then the
	// same prompts measured). Empty is cold without a seed; with a seed
	// the run repeats that seed's prompts, which the server may hold
	// (Conditions.Cache "seeded"). See CacheModes.
	Cache string
	// Log receives what the run says while it runs (the seed it drew,
	// a warm pass, the paired requests' plan and progress); nil says
	// nothing.
	Log io.Writer
}

// The cache modes a record names (Conditions.Cache).
const (
	CacheCold   = "cold"
	CacheWarm   = "warm"
	CacheSeeded = "seeded"
)

// Endpoint resolves the request URL and sets the workload's endpoint
// when the URL names one.
func (c *Config) Endpoint() (string, error) {
	u, err := httpurl.Parse(c.URL)
	if err != nil {
		return "", fmt.Errorf("bench: --url %w", err)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		c.Workload.Endpoint = "chat"
	case strings.HasSuffix(p, "/responses"):
		c.Workload.Endpoint = "responses"
	case strings.HasSuffix(p, "/completions"):
		c.Workload.Endpoint = "completions"
	case strings.HasSuffix(p, "/v1"):
		p += strings.TrimPrefix(c.Workload.Path(), "/v1")
	default:
		p += c.Workload.Path()
	}
	u.Path = p
	return u.String(), nil
}

// Defaults fills in what was left unset, in one place (Run applies it;
// calling it again changes nothing): the chat endpoint; for a synthetic
// workload, prompts of 256 tokens and max_tokens 128 (OutputTokens "none"
// leaves max_tokens unset); a replay at its recorded speed; the load's
// defaults (LoadSpec.Defaults), its first stage at the sweep's first
// level; and 50 request pairs with a DirectURL.
func (c *Config) Defaults() {
	w := &c.Workload
	if w.Endpoint == "" {
		w.Endpoint = "chat"
	}
	if w.Dataset == "" && !w.Replays() {
		if w.InputTokens == "" {
			w.InputTokens = "256"
		}
		if w.OutputTokens == "" {
			w.OutputTokens = "128"
		}
	}
	if w.Replays() && w.Speedup == 0 {
		w.Speedup = 1
	} else if !w.Replays() {
		w.Speedup = 0
	}
	if w.SessionKey == SessionKeyNone {
		w.SessionKey = ""
	}
	if c.Load.Mode == "sessions" {
		w.Sessions = true
		if w.Turns == 0 && w.Dataset == "" {
			w.Turns = 3
		}
		if c.Load.Requests == 0 && c.Load.Duration == 0 && w.Dataset == "" {
			// Each user holds one session.
			c.Load.Requests = max(c.Load.Concurrency, 1) * w.Turns
		}
	}
	c.Load.Defaults(w.Replays())
	if len(c.Sweep) > 0 {
		switch c.Load.Mode {
		case "closed", "sessions":
			c.Load.Concurrency = int(c.Sweep[0])
		case "open":
			c.Load.Rate = c.Sweep[0]
		}
	}
	if c.DirectURL != "" && c.Pairs == 0 {
		c.Pairs = 50
	}
}

// Validate reports the first setting that cannot run, by its field path
// (and its flag). It expects Defaults to have run.
func (c *Config) Validate() error {
	if _, err := httpurl.Parse(c.URL); err != nil {
		return fmt.Errorf("bench: url (--url) %w", err)
	}
	if c.DirectURL != "" {
		if _, err := httpurl.Parse(c.DirectURL); err != nil {
			return fmt.Errorf("bench: direct_url (--direct-url) %w", err)
		}
	}
	if e := c.Workload.Endpoint; !validEndpoint(e) {
		return fmt.Errorf("bench: workload.endpoint (--api) %q: want chat, completions or responses", e)
	}
	if n := btoi(c.Workload.Dataset != "") + btoi(c.Workload.Replay != "") + btoi(c.Workload.Trace != ""); n > 1 {
		return errors.New("bench: workload.dataset, workload.replay, workload.trace (--dataset, --replay, --trace): give one")
	}
	if f := c.Workload.TraceFormat; f != "" && f != traceMooncake && f != traceAzure && f != traceBurstGPT {
		return fmt.Errorf("bench: workload.trace_format (--trace-format) %q: want mooncake, azure or burstgpt", f)
	}
	if _, _, err := parseTraceWindow(c.Workload.TraceWindow); err != nil {
		return fmt.Errorf("bench: workload.trace_window (--trace-window) %w", err)
	}
	if _, err := parseSessionKey(c.Workload.SessionKey); err != nil {
		return fmt.Errorf("bench: workload.session_key (--session-key) %w", err)
	}
	if c.Workload.SessionKey != "" && c.Load.Mode != "sessions" {
		return fmt.Errorf("bench: workload.session_key (--session-key) %s: only sessions (--sessions) have a key", c.Workload.SessionKey)
	}
	if _, err := parseClassMix(c.Workload.ClassMix); err != nil {
		return fmt.Errorf("bench: workload.class_mix (--class-mix) %w", err)
	}
	if c.Workload.Speedup < 0 {
		return errors.New("bench: workload.speedup (--speedup): must not be negative")
	}
	if c.Pairs < 0 {
		return errors.New("bench: pairs (--pairs): must not be negative")
	}
	switch {
	case c.Cache != "" && c.Cache != CacheCold && c.Cache != CacheWarm:
		return fmt.Errorf("bench: cache (--cache) %q: want cold or warm", c.Cache)
	case c.Cache == CacheCold && c.Workload.Seed != 0:
		return fmt.Errorf("bench: cache (--cache) cold with seed (--seed) %d: a given seed repeats its prompts, which the server may hold; drop --seed (a fresh one is drawn and recorded) or --cache cold", c.Workload.Seed)
	}
	for i, v := range c.Sweep {
		if v <= 0 {
			return fmt.Errorf("bench: sweep[%d] (--sweep): %v is not a positive level", i, v)
		}
	}
	return c.Load.Validate()
}

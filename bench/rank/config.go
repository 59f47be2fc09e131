// Package rank orders endpoints (hosted providers, relays, self-hosted
// servers) by speed, steadiness and cost on one workload: each endpoint is
// probed and benched in interleaved rounds under identical conditions, its
// figures carry intervals so that a tie is called a tie, every run is a
// record, and a history of records flags the endpoint whose figures moved
// beyond noise.
package rank

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/internal/yamlconf"
	"github.com/infergate/infergate/verdict"
	"golang.org/x/net/http/httpguts"
)

// File is an endpoints file.
type File struct {
	Endpoints []Endpoint `yaml:"endpoints" json:"endpoints"`
	// Workload is what every endpoint is sent; flags override it.
	Workload Workload `yaml:"workload" json:"workload"`
}

// Endpoint is one server to rank.
type Endpoint struct {
	Name string `yaml:"name" json:"name"`
	// URL is the base URL, as an SDK's base_url (https://host/v1).
	URL   string `yaml:"url" json:"url"`
	Model string `yaml:"model" json:"model"`
	// APIKeyEnv or APIKeyFile is where the key is read from; it is never
	// written in the file or in a record.
	APIKeyEnv  string `yaml:"api_key_env" json:"api_key_env,omitempty"`
	APIKeyFile string `yaml:"api_key_file" json:"api_key_file,omitempty"`
	// APIKeyHeader is the header the key goes in: Authorization (as
	// "Bearer KEY", the default) or a provider's own (api-key, x-api-key:
	// the bare key).
	APIKeyHeader string `yaml:"api_key_header" json:"api_key_header,omitempty"`
	Price        Price  `yaml:"price" json:"price"`
	// Headers go with every request to this endpoint (no credentials).
	Headers map[string]string `yaml:"headers" json:"-"`
	// Overrides are top-level request fields set for this endpoint only
	// (a provider's parameters: reasoning_effort, top_k, ...).
	Overrides map[string]any `yaml:"overrides" json:"overrides,omitempty"`
}

// Price is what an endpoint charges, in dollars (or any one currency)
// per million tokens. CachedInput unset is Input: no discount is assumed.
type Price struct {
	Input       float64  `yaml:"input" json:"input"`
	CachedInput *float64 `yaml:"cached_input" json:"cached_input,omitempty"`
	Output      float64  `yaml:"output" json:"output"`
}

// Cached is the price of a cached prompt token.
func (p Price) Cached() float64 {
	if p.CachedInput == nil {
		return p.Input
	}
	return *p.CachedInput
}

// Equal reports whether two prices charge the same.
func (p Price) Equal(q Price) bool {
	return p.Input == q.Input && p.Output == q.Output && p.Cached() == q.Cached()
}

func (p Price) String() string {
	return fmt.Sprintf("input %g, cached %g, output %g per M", p.Input, p.Cached(), p.Output)
}

// Workload is what every endpoint is sent, the same for all.
type Workload struct {
	// API is chat (default), completions or responses.
	API string `yaml:"api" json:"api"`
	// InputTokens and OutputTokens are length distributions as bench's
	// flags take them (default 256 and 128).
	InputTokens  string `yaml:"input_tokens" json:"input_tokens"`
	OutputTokens string `yaml:"output_tokens" json:"output_tokens"`
	// SharedPrefix is the tokens every prompt shares (a provider's
	// prompt cache then shows in cached_input).
	SharedPrefix int    `yaml:"shared_prefix" json:"shared_prefix,omitempty"`
	Dataset      string `yaml:"dataset" json:"dataset,omitempty"`
	// Seed, when set, repeats the same prompts in every round and run,
	// which a server (or a provider's prompt cache) may then hold. 0 (the
	// default) draws fresh prompts for each endpoint's round, of the same
	// shape, so that no endpoint is measured on prompts a server has
	// already seen: one sharing a backend with another, a later round,
	// a later run (issue 41).
	Seed uint64 `yaml:"seed" json:"seed,omitempty"`
	// Concurrency is the bench's users (default 4); Requests the
	// measured requests of each endpoint's round (default 16); Probes
	// the one-at-a-time requests before it (default 2); Rounds the
	// rounds (default 3).
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	Requests    int `yaml:"requests" json:"requests"`
	Probes      int `yaml:"probes" json:"probes"`
	Rounds      int `yaml:"rounds" json:"rounds"`
	// Timeout bounds one request (default 60s).
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// SLO is "ttft=2s,tpot=50ms"; SLOPercentile the share that must meet
	// it (default p90).
	SLO           string `yaml:"slo" json:"slo,omitempty"`
	SLOPercentile string `yaml:"slo_percentile" json:"slo_percentile,omitempty"`
	// Order is the ranking's keys, first decides first (default
	// slo,errors,cost,ttft): slo, errors, cost, ttft, ttft_p90, speed.
	// The default weighs failed requests twice over: an SLO's attainment
	// counts each as a miss, and errors, before cost and TTFT (figures of
	// answers only), ranks the endpoint that fails more below.
	Order string `yaml:"order" json:"order"`
	// Rate is the load the cost per hour is of, in requests/s; 0 prices
	// an hour at the request rate measured at Concurrency.
	Rate float64 `yaml:"rate" json:"rate,omitempty"`
}

// HourlyLoad says what load the cost per hour is of.
func (w *Workload) HourlyLoad() string {
	if w.Rate > 0 {
		return fmt.Sprintf("%g requests/s", w.Rate)
	}
	return fmt.Sprintf("%d in flight at the measured rate", w.Concurrency)
}

// Comparable reports whether runs under w and v measured the same thing,
// and if not, the first setting that differs: the requests and how many
// at once (rounds, probes and the ranking's settings only change how much
// is known).
func (w *Workload) Comparable(v *Workload) (bool, string) {
	for _, c := range []struct {
		name string
		a, b any
	}{{"api", w.API, v.API}, {"input_tokens", w.InputTokens, v.InputTokens}, {"output_tokens", w.OutputTokens, v.OutputTokens},
		{"shared_prefix", w.SharedPrefix, v.SharedPrefix}, {"dataset", w.Dataset, v.Dataset}, {"seed", w.Seed, v.Seed},
		{"concurrency", w.Concurrency, v.Concurrency}} {
		if c.a != c.b {
			return false, fmt.Sprintf("workload.%s %#v → %#v", c.name, c.a, c.b)
		}
	}
	return true, ""
}

// Bounds of a file: what one run may send.
const (
	maxEndpoints = 64
	maxRounds    = 100
	maxRequests  = 10000
	maxProbes    = 100
)

// orderNames are the figures a ranking may order by.
var orderNames = []string{"slo", "errors", "cost", "ttft", "ttft_p90", "speed"}

// defaultOrder is workload.order's default: the SLO (whose attainment
// counts a failed request as a miss), then the error rate, then cost and
// TTFT, which are figures of answers only and blind to failures.
const defaultOrder = "slo,errors,cost,ttft"

// Load reads an endpoints file strictly (an unknown key is an error
// naming its field) and checks it.
func Load(path string) (*File, error) {
	var f File
	if err := yamlconf.Load(path, &f); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// Defaults fills what the workload left unset.
func (w *Workload) Defaults() {
	if w.API == "" {
		w.API = "chat"
	}
	if w.Dataset == "" {
		if w.InputTokens == "" {
			w.InputTokens = "256"
		}
		if w.OutputTokens == "" {
			w.OutputTokens = "128"
		}
	}
	if w.Concurrency == 0 {
		w.Concurrency = 4
	}
	if w.Requests == 0 {
		w.Requests = 16
	}
	if w.Probes == 0 {
		w.Probes = 2
	}
	if w.Rounds == 0 {
		w.Rounds = 3
	}
	if w.Timeout == 0 {
		w.Timeout = time.Minute
	}
	if w.SLOPercentile == "" {
		w.SLOPercentile = "p90"
	}
	if w.Order == "" {
		w.Order = defaultOrder
	}
}

// Validate reports the first setting that cannot run, by its field path.
func (f *File) Validate() error {
	if len(f.Endpoints) == 0 {
		return fmt.Errorf("endpoints: none listed")
	}
	if len(f.Endpoints) > maxEndpoints {
		return fmt.Errorf("endpoints: %d listed, at most %d", len(f.Endpoints), maxEndpoints)
	}
	seen := map[string]int{}
	for i := range f.Endpoints {
		e := &f.Endpoints[i]
		at := fmt.Sprintf("endpoints[%d]", i)
		if e.Name == "" {
			return fmt.Errorf("%s.name: empty", at)
		}
		if len(e.Name) > 64 || strings.ContainsAny(e.Name, ",\n\r\t") {
			return fmt.Errorf("%s.name %q: at most 64 characters, no commas or control characters", at, e.Name)
		}
		if j, ok := seen[e.Name]; ok {
			return fmt.Errorf("%s.name %q: also endpoints[%d]'s", at, e.Name, j)
		}
		seen[e.Name] = i
		u, err := httpurl.Parse(e.URL)
		if err != nil {
			return fmt.Errorf("%s.url: %w", at, err)
		}
		if u.User != nil {
			return fmt.Errorf("%s.url: holds a user or password; put the key in api_key_env or api_key_file", at)
		}
		if e.Model == "" {
			return fmt.Errorf("%s.model: empty", at)
		}
		if e.APIKeyEnv != "" && e.APIKeyFile != "" {
			return fmt.Errorf("%s: api_key_env and api_key_file both set; give one", at)
		}
		if h := e.APIKeyHeader; h != "" && !validHeaderName(h) {
			return fmt.Errorf("%s.api_key_header %q: not a header name", at, h)
		}
		// In the file's order; cached_input only when it is set (unset, it
		// is input's price, already checked).
		prices := []struct {
			name string
			p    *float64
		}{{"input", &e.Price.Input}, {"cached_input", e.Price.CachedInput}, {"output", &e.Price.Output}}
		for _, c := range prices {
			if c.p != nil && (*c.p < 0 || *c.p > 1e6) {
				return fmt.Errorf("%s.price.%s: %g is not a price per million tokens", at, c.name, *c.p)
			}
		}
		for k, v := range e.Headers {
			if !validHeaderName(k) || !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%s.headers.%s: not a header", at, k)
			}
			if safehttp.IsCredential(k) {
				return fmt.Errorf("%s.headers.%s: a credential goes in api_key_env or api_key_file, never in the file", at, k)
			}
		}
		for k, v := range e.Overrides {
			if k == "model" || k == "stream" || k == "messages" || k == "prompt" || k == "input" {
				return fmt.Errorf("%s.overrides.%s: set by the workload, the same for every endpoint", at, k)
			}
			if _, err := json.Marshal(v); err != nil {
				return fmt.Errorf("%s.overrides.%s: %w", at, k, err)
			}
		}
	}
	return f.Workload.check()
}

func (w *Workload) check() error {
	switch w.API {
	case "", "chat", "completions", "responses":
	default:
		return fmt.Errorf("workload.api %q: want chat, completions or responses", w.API)
	}
	for _, c := range []struct {
		name   string
		v, max int
	}{{"concurrency", w.Concurrency, 1024}, {"requests", w.Requests, maxRequests}, {"probes", w.Probes, maxProbes}, {"rounds", w.Rounds, maxRounds}, {"shared_prefix", w.SharedPrefix, 1 << 20}} {
		if c.v < 0 || c.v > c.max {
			return fmt.Errorf("workload.%s: %d, want 0 to %d", c.name, c.v, c.max)
		}
	}
	if w.Timeout < 0 {
		return fmt.Errorf("workload.timeout: negative")
	}
	if _, err := verdict.ParseSLOs(w.SLO); err != nil {
		return fmt.Errorf("workload.slo: %w", err)
	}
	if w.SLOPercentile != "" {
		if _, err := verdict.ParsePercentile(w.SLOPercentile); err != nil {
			return fmt.Errorf("workload.slo_percentile: %w", err)
		}
	}
	if w.Rate < 0 || w.Rate > 1e6 {
		return fmt.Errorf("workload.rate: %g, want 0 to 1e6 requests/s", w.Rate)
	}
	for k := range strings.SplitSeq(w.Order, ",") {
		if k = strings.TrimSpace(k); k != "" && !slices.Contains(orderNames, k) {
			return fmt.Errorf("workload.order: %q is not one of %s", k, strings.Join(orderNames, ", "))
		}
	}
	return nil
}

// validHeaderName is RFC 9110's token, at most 256 bytes.
func validHeaderName(s string) bool { return len(s) <= 256 && httpguts.ValidHeaderFieldName(s) }

// Keys reads each endpoint's key ("" for one without a key source):
// from the environment through getenv, or from a file through
// readFile. An error names the endpoint.
func (f *File) Keys(getenv func(string) (string, bool), readFile func(string) ([]byte, error)) ([]string, error) {
	keys := make([]string, len(f.Endpoints))
	for i, e := range f.Endpoints {
		switch {
		case e.APIKeyEnv != "":
			v, ok := getenv(e.APIKeyEnv)
			if !ok || strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("endpoint %q (endpoints[%d]): api_key_env %s is not set", e.Name, i, e.APIKeyEnv)
			}
			keys[i] = strings.TrimSpace(v)
		case e.APIKeyFile != "":
			b, err := readFile(e.APIKeyFile)
			if err != nil {
				return nil, fmt.Errorf("endpoint %q (endpoints[%d]): api_key_file: %w", e.Name, i, err)
			}
			if keys[i] = strings.TrimSpace(string(b)); keys[i] == "" {
				return nil, fmt.Errorf("endpoint %q (endpoints[%d]): api_key_file %s is empty", e.Name, i, e.APIKeyFile)
			}
		}
		if strings.ContainsAny(keys[i], "\r\n\x00") {
			return nil, fmt.Errorf("endpoint %q (endpoints[%d]): the key holds a line break", e.Name, i)
		}
	}
	return keys, nil
}

// OSKeys reads keys from the process's environment and files.
func (f *File) OSKeys() ([]string, error) { return f.Keys(os.LookupEnv, os.ReadFile) }

// headers is what goes with each of e's requests: its own headers and its
// key, in the header it names.
func (e *Endpoint) headers(key string) [][2]string {
	var out [][2]string
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		out = append(out, [2]string{http.CanonicalHeaderKey(k), e.Headers[k]})
	}
	if key != "" {
		switch h := e.APIKeyHeader; {
		case h == "" || strings.EqualFold(h, "Authorization"):
			out = append(out, [2]string{"Authorization", "Bearer " + key})
		default:
			out = append(out, [2]string{h, key})
		}
	}
	return out
}

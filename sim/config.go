package sim

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/yamlconf"
)

// Scheduling policies, as vLLM's --scheduling-policy names them.
const (
	PolicyFCFS     = "fcfs"
	PolicyPriority = "priority"
)

// Modes of the simulator.
const (
	ModeEngine = "engine" // the continuous-batching engine
	ModeFixed  = "fixed"  // fixed TTFT and ITL, no load effects
)

// Config is every parameter of the simulator. The zero value works: New
// fills it in with Defaults, which make it the balanced preset.
type Config struct {
	// Listen is the address to serve on. Default 127.0.0.1:9001.
	Listen string `yaml:"listen"`
	// Model is the served model name. Default "sim-model".
	Model string `yaml:"model"`
	// Seed makes output text deterministic together with the prompt.
	Seed int64 `yaml:"seed"`
	// Mode is "engine" (default) or "fixed".
	Mode string `yaml:"mode"`

	// TTFT and ITL are the fixed mode's time to first token and time
	// between tokens.
	TTFT time.Duration `yaml:"ttft"`
	ITL  time.Duration `yaml:"itl"`

	// PerRequestMetrics adds vLLM's per-request "metrics" object
	// (queue_time_ms, time_to_first_token_ms from scheduling, and
	// generation_time_ms) to the usage chunk, or to the finishing chunk
	// without usage, and to plain bodies, as vllm serve
	// --enable-per-request-metrics does.
	PerRequestMetrics bool `yaml:"per_request_metrics"`

	// SchedulingPolicy is vLLM's --scheduling-policy: "fcfs" (the
	// default) serves the queue in arrival order and refuses a request
	// whose body sets a nonzero "priority" with 400, as vLLM does;
	// "priority" orders it by that field (lower first, ties by arrival)
	// and preempts the running request latest in that order first.
	SchedulingPolicy string `yaml:"scheduling_policy"`

	// RoleFirst sends a chat stream's role chunk ({"role":"assistant"})
	// as soon as the stream starts, before the first token is due, as
	// the mock backends of public gateway boards do; off, it leaves with
	// the first token. The overhead harness's stream suite sets it.
	RoleFirst bool `yaml:"role_first"`

	Engine EngineConfig `yaml:"engine"`
	// Admission refuses requests beyond vLLM's queue limits, with vLLM's
	// 503 (admission.go); off by default.
	Admission AdmissionConfig `yaml:"admission"`
	Output    OutputConfig    `yaml:"output"`
	Quality   QualityConfig   `yaml:"quality"`
	Faults    Faults          `yaml:"faults"`
	// KVEvents publishes the prefix cache's events as vLLM's
	// --kv-events-config does (kvevents.go); off by default.
	KVEvents KVEventsConfig `yaml:"kv_events"`
}

// EngineConfig shapes the continuous-batching engine.
type EngineConfig struct {
	// MaxNumSeqs bounds the running batch (vLLM's max_num_seqs).
	MaxNumSeqs int `yaml:"max_num_seqs"`
	// KVCacheTokens is the KV cache size, in tokens.
	KVCacheTokens int `yaml:"kv_cache_tokens"`
	// BlockSize is the KV cache block size, in tokens.
	BlockSize int `yaml:"block_size"`
	// PrefillTokensPerS is the prefill speed, in prompt tokens per second.
	PrefillTokensPerS float64 `yaml:"prefill_tokens_per_s"`
	// MaxBatchedTokens is the per-step token budget for chunked prefill
	// (vLLM's max_num_batched_tokens); 0 prefills whole prompts in one step.
	MaxBatchedTokens int `yaml:"max_batched_tokens"`
	// DecodeBaseMs is the fixed cost of one forward step, in milliseconds.
	DecodeBaseMs float64 `yaml:"decode_base_ms"`
	// DecodePerSeqMs is the added step cost per decoding sequence, in ms.
	DecodePerSeqMs float64 `yaml:"decode_per_seq_ms"`
	// DecodePerKVTokenUs is the added step cost per cached token of the
	// decoding sequences (attention reads), in microseconds.
	DecodePerKVTokenUs float64 `yaml:"decode_per_kv_token_us"`
	// SaturationBatch is the number of tokens per step at which the
	// simulated GPU is fully busy; it scales the utilisation gauge.
	SaturationBatch int `yaml:"saturation_batch"`
	// PrefixCaching keeps computed prompt blocks in the KV cache for later
	// prompts that start with the same tokens, as vLLM's automatic prefix
	// caching does (on by default in vLLM's V1 engine, and in every
	// preset). Responses then report usage.prompt_tokens_details.
	// cached_tokens, and /metrics vllm:prefix_cache_queries_total and
	// vllm:prefix_cache_hits_total, in tokens.
	PrefixCaching bool `yaml:"prefix_caching"`
}

// OutputConfig shapes how long answers are.
type OutputConfig struct {
	// MeanTokens is the mean natural answer length, in tokens, when the
	// request does not force one with ignore_eos.
	MeanTokens int `yaml:"mean_tokens"`
	// MaxModelLen is the context window, in tokens: prompt plus output.
	MaxModelLen int `yaml:"max_model_len"`
	// ReasoningTokens makes the simulator a reasoning model: every answer
	// starts with this many tokens of thinking (within the request's
	// output limit; at least one answer token follows), sent as
	// ReasoningField deltas in a chat stream and as reasoning items in the
	// Responses API, counted in usage's reasoning_tokens. 0: none.
	ReasoningTokens int `yaml:"reasoning_tokens"`
	// ReasoningField names a chat delta's thinking: "reasoning_content"
	// (the default; DeepSeek, SGLang, vLLM before 0.10) or "reasoning"
	// (newer vLLM).
	ReasoningField string `yaml:"reasoning_field"`
}

// QualityConfig models a cheaper build's failure rates, each a fraction in
// [0,1] of requests, and its speed relative to the base build.
type QualityConfig struct {
	// Variant names the build (informational: "int4", "fp8", or empty).
	Variant string `yaml:"variant"`
	// DecodeSpeedup divides decode step costs; 1 is the base build.
	DecodeSpeedup float64 `yaml:"decode_speedup"`
	// MalformedJSONRate is the share of json_object answers that are not
	// valid JSON.
	MalformedJSONRate float64 `yaml:"malformed_json_rate"`
	// TruncationRate is the share of answers cut short (finish "length").
	TruncationRate float64 `yaml:"truncation_rate"`
	// RefusalRate is the share of answers that are a refusal.
	RefusalRate float64 `yaml:"refusal_rate"`
}

// Faults injects failures. The process-wide set comes from config and
// flags; a request adds its own with the X-Sim-Fault header.
type Faults struct {
	// ErrorRate is the share of requests answered with ErrorStatus.
	ErrorRate float64 `yaml:"error_rate"`
	// ErrorStatus is the status of injected errors: 500, 503 or 429.
	// Default 500.
	ErrorStatus int `yaml:"error_status"`
	// RetryAfter is sent with injected 429 and 503 errors when set.
	RetryAfter time.Duration `yaml:"retry_after"`
	// ResetAfter resets the connection after this many tokens; 0 is off.
	ResetAfter int `yaml:"reset_after"`
	// StallAfter stops sending after this many tokens, for StallFor; 0 is off.
	StallAfter int `yaml:"stall_after"`
	// StallFor is how long a stall lasts. Default 60s.
	StallFor time.Duration `yaml:"stall_for"`
	// HeaderDelay holds the response headers back this long.
	HeaderDelay time.Duration `yaml:"header_delay"`
	// NetDelay and NetJitter are added before every write: a uniform
	// delay in [NetDelay-NetJitter, NetDelay+NetJitter].
	NetDelay  time.Duration `yaml:"net_delay"`
	NetJitter time.Duration `yaml:"net_jitter"`
}

// presetDoc documents each preset with the symptom it shows.
var presetDoc = map[string]string{
	"balanced":      "a healthy server: TTFT and ITL rise gently with load",
	"memory-bound":  "a small KV cache: speed falls as concurrency rises and preemptions climb",
	"batch-starved": "max_num_seqs far below what the GPU could batch: low utilisation while the queue grows",
	"compute-bound": "costly steps: utilisation pinned near 100% and the queue full under load",
	"candidate":     "balanced with the int4 variant: faster decode, more malformed JSON, truncation and refusals",
}

// Presets lists the preset names with what each shows.
func Presets() []string {
	names := make([]string, 0, len(presetDoc))
	for n := range presetDoc {
		names = append(names, n+": "+presetDoc[n])
	}
	sort.Strings(names)
	return names
}

// DefaultConfig is the balanced preset.
func DefaultConfig() Config {
	c, _ := Preset("balanced")
	return c
}

// balancedEngine is the engine of the balanced preset.
var balancedEngine = EngineConfig{
	MaxNumSeqs: 64, KVCacheTokens: 131072, BlockSize: 16,
	PrefillTokensPerS: 10000, MaxBatchedTokens: 2048,
	DecodeBaseMs: 8, DecodePerSeqMs: 0.15, SaturationBatch: 64,
	PrefixCaching: true,
}

// Defaults fills in what was left unset, in one place: the address, the
// model name and the mode; an engine section left out entirely is the
// balanced preset's (some of its zeros are settings: no chunked prefill,
// free decode steps); answer lengths, the decode speed-up, the injected
// error status and the stall length.
func (c *Config) Defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:9001"
	}
	if c.Model == "" {
		c.Model = "sim-model"
	}
	if c.Mode == "" {
		c.Mode = ModeEngine
	}
	if c.SchedulingPolicy == "" {
		c.SchedulingPolicy = PolicyFCFS
	}
	if c.Engine == (EngineConfig{}) {
		c.Engine = balancedEngine
	}
	if c.Output.MeanTokens == 0 {
		c.Output.MeanTokens = 128
	}
	if c.Output.ReasoningField == "" {
		c.Output.ReasoningField = "reasoning_content"
	}
	if c.Output.MaxModelLen == 0 {
		c.Output.MaxModelLen = 8192
	}
	if c.Quality.DecodeSpeedup == 0 {
		c.Quality.DecodeSpeedup = 1
	}
	if c.Faults.ErrorStatus == 0 {
		c.Faults.ErrorStatus = 500
	}
	if c.Faults.StallFor == 0 {
		c.Faults.StallFor = 60 * time.Second
	}
}

// Preset returns the named preset's configuration.
func Preset(name string) (Config, error) {
	var c Config
	c.Defaults()
	switch name {
	case "", "balanced":
	case "memory-bound":
		c.Engine.MaxNumSeqs = 128
		c.Engine.KVCacheTokens = 8192
		c.Engine.DecodePerKVTokenUs = 0.5
	case "batch-starved":
		c.Engine.MaxNumSeqs = 4
		c.Engine.DecodePerSeqMs = 0.05
		c.Engine.SaturationBatch = 128
	case "compute-bound":
		c.Engine.MaxNumSeqs = 256
		c.Engine.PrefillTokensPerS = 4000
		c.Engine.DecodeBaseMs = 12
		c.Engine.DecodePerSeqMs = 0.5
		c.Engine.SaturationBatch = 16
	case "candidate":
		if err := c.ApplyVariant("int4"); err != nil {
			return c, err
		}
	default:
		return c, fmt.Errorf("sim: unknown preset %q (have %s)", name, strings.Join(presetNames(), ", "))
	}
	return c, nil
}

func presetNames() []string {
	names := make([]string, 0, len(presetDoc))
	for n := range presetDoc {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ApplyVariant sets the quality model of a candidate build: "int4" (much
// faster decode, most format errors), "fp8" (faster, few errors), or "" /
// "base" (the reference build).
func (c *Config) ApplyVariant(v string) error {
	switch v {
	case "", "base":
		c.Quality = QualityConfig{DecodeSpeedup: 1}
	case "int4":
		c.Quality = QualityConfig{Variant: v, DecodeSpeedup: 1.6, MalformedJSONRate: 0.08, TruncationRate: 0.05, RefusalRate: 0.03}
	case "fp8":
		c.Quality = QualityConfig{Variant: v, DecodeSpeedup: 1.25, MalformedJSONRate: 0.02, TruncationRate: 0.01, RefusalRate: 0.01}
	default:
		return fmt.Errorf("sim: unknown variant %q (have int4, fp8, base)", v)
	}
	return nil
}

// Validate reports the first invalid field by its config name.
func (c *Config) Validate() error {
	e := &c.Engine
	if err := c.KVEvents.validate(); err != nil {
		return err
	}
	switch {
	case c.Listen == "":
		return errors.New("sim: listen: must be set")
	case c.Model == "":
		return errors.New("sim: model: must be set")
	case c.Mode != ModeEngine && c.Mode != ModeFixed:
		return fmt.Errorf("sim: mode: %q is not engine or fixed", c.Mode)
	case c.SchedulingPolicy != PolicyFCFS && c.SchedulingPolicy != PolicyPriority:
		return fmt.Errorf("sim: scheduling_policy: %q is not fcfs or priority", c.SchedulingPolicy)
	case c.TTFT < 0 || c.ITL < 0:
		return errors.New("sim: ttft, itl: must not be negative")
	case e.MaxNumSeqs < 1:
		return errors.New("sim: engine.max_num_seqs: must be at least 1")
	case e.BlockSize < 1:
		return errors.New("sim: engine.block_size: must be at least 1")
	case e.KVCacheTokens < e.BlockSize:
		return errors.New("sim: engine.kv_cache_tokens: must hold at least one block")
	case e.PrefillTokensPerS <= 0:
		return errors.New("sim: engine.prefill_tokens_per_s: must be positive")
	case e.MaxBatchedTokens < 0:
		return errors.New("sim: engine.max_batched_tokens: must not be negative")
	case e.DecodeBaseMs < 0 || e.DecodePerSeqMs < 0 || e.DecodePerKVTokenUs < 0:
		return errors.New("sim: engine.decode_*: must not be negative")
	case e.SaturationBatch < 1:
		return errors.New("sim: engine.saturation_batch: must be at least 1")
	case c.Output.MeanTokens < 1:
		return errors.New("sim: output.mean_tokens: must be at least 1")
	case c.Output.MaxModelLen < 2:
		return errors.New("sim: output.max_model_len: must be at least 2")
	case c.Output.ReasoningTokens < 0:
		return errors.New("sim: output.reasoning_tokens: must not be negative")
	case c.Output.ReasoningField != "reasoning_content" && c.Output.ReasoningField != "reasoning":
		return fmt.Errorf("sim: output.reasoning_field: %q is neither reasoning_content nor reasoning", c.Output.ReasoningField)
	case c.Admission.MaxNumQueuedReqs < 0 || c.Admission.MaxNumQueuedTokens < 0:
		return errors.New("sim: admission.max_num_queued_reqs, max_num_queued_tokens: must not be negative")
	case c.Quality.DecodeSpeedup <= 0:
		return errors.New("sim: quality.decode_speedup: must be positive")
	}
	for name, r := range map[string]float64{
		"quality.malformed_json_rate": c.Quality.MalformedJSONRate, "quality.truncation_rate": c.Quality.TruncationRate,
		"quality.refusal_rate": c.Quality.RefusalRate, "faults.error_rate": c.Faults.ErrorRate,
	} {
		if r < 0 || r > 1 {
			return fmt.Errorf("sim: %s: %v is not in [0,1]", name, r)
		}
	}
	return c.Faults.validate("faults.")
}

// maxFaultDuration bounds every injected delay: longer ones cannot be
// honoured by a test that ends, and twice one must fit in an int64.
const maxFaultDuration = 24 * time.Hour

func (f *Faults) validate(prefix string) error {
	switch f.ErrorStatus {
	case 0, 500, 502, 503, 429:
	default:
		return fmt.Errorf("sim: %serror_status: %d is not one of 500, 502, 503, 429", prefix, f.ErrorStatus)
	}
	if f.ErrorRate < 0 || f.ErrorRate > 1 || math.IsNaN(f.ErrorRate) {
		return fmt.Errorf("sim: %serror_rate: %v is not in [0,1]", prefix, f.ErrorRate)
	}
	if f.ResetAfter < 0 || f.StallAfter < 0 {
		return fmt.Errorf("sim: %sreset_after, stall_after: must not be negative", prefix)
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"retry_after", f.RetryAfter}, {"stall_for", f.StallFor}, {"header_delay", f.HeaderDelay}, {"net_delay", f.NetDelay}, {"net_jitter", f.NetJitter}} {
		if d.v < 0 || d.v > maxFaultDuration {
			return fmt.Errorf("sim: %s%s: %v is not between 0 and %v", prefix, d.name, d.v, maxFaultDuration)
		}
	}
	if f.NetJitter > f.NetDelay {
		return fmt.Errorf("sim: %snet_jitter: must not exceed net_delay", prefix)
	}
	return nil
}

// LoadFile overlays the YAML file at path on c. Unknown fields are errors.
func (c *Config) LoadFile(path string) error {
	if err := yamlconf.Load(path, c); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// RegisterFlags binds every parameter to a flag of fs, writing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve on (host:port)")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the output text")
	fs.StringVar(&c.Mode, "mode", c.Mode, "engine (continuous batching) or fixed (constant TTFT and ITL); --ttft or --itl imply fixed")
	fs.DurationVar(&c.TTFT, "ttft", c.TTFT, "fixed mode: time to first token (duration, e.g. 50ms)")
	fs.DurationVar(&c.ITL, "itl", c.ITL, "fixed mode: time between tokens (duration, e.g. 10ms)")
	fs.BoolVar(&c.RoleFirst, "role-first", c.RoleFirst, "send a chat stream's role chunk at once, before the first token is due")
	fs.BoolVar(&c.PerRequestMetrics, "enable-per-request-metrics", c.PerRequestMetrics, "report each request's queue, prefill and decode times in a vLLM-style metrics object")
	fs.StringVar(&c.SchedulingPolicy, "scheduling-policy", c.SchedulingPolicy, "fcfs (arrival order; a nonzero request priority is refused) or priority (the body's priority, lower first; the latest in that order is preempted first)")
	e := &c.Engine
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "most sequences in the running batch")
	fs.IntVar(&e.KVCacheTokens, "kv-cache-tokens", e.KVCacheTokens, "KV cache size (tokens)")
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "KV cache block size (tokens)")
	fs.Float64Var(&e.PrefillTokensPerS, "prefill-tokens-per-s", e.PrefillTokensPerS, "prefill speed (prompt tokens per second)")
	fs.IntVar(&e.MaxBatchedTokens, "max-batched-tokens", e.MaxBatchedTokens, "chunked-prefill token budget per step (tokens; 0 = whole prompts)")
	fs.Float64Var(&e.DecodeBaseMs, "decode-base-ms", e.DecodeBaseMs, "fixed cost of one step (milliseconds)")
	fs.Float64Var(&e.DecodePerSeqMs, "decode-per-seq-ms", e.DecodePerSeqMs, "step cost per decoding sequence (milliseconds)")
	fs.Float64Var(&e.DecodePerKVTokenUs, "decode-per-kv-token-us", e.DecodePerKVTokenUs, "step cost per cached token of decoding sequences (microseconds)")
	fs.IntVar(&e.SaturationBatch, "saturation-batch", e.SaturationBatch, "tokens per step at which the simulated GPU is fully busy")
	fs.BoolVar(&e.PrefixCaching, "enable-prefix-caching", e.PrefixCaching, "keep computed prompt blocks for prompts that share their start, as vLLM does")
	fs.BoolFunc("no-enable-prefix-caching", "turn prefix caching off (vLLM's spelling)", func(string) error {
		e.PrefixCaching = false
		return nil
	})
	fs.IntVar(&c.Admission.MaxNumQueuedReqs, "max-num-queued-reqs", c.Admission.MaxNumQueuedReqs, "refuse with vLLM's 503 beyond this many unfinished requests, waiting or running (0 = no bound)")
	fs.IntVar(&c.Admission.MaxNumQueuedTokens, "max-num-queued-tokens", c.Admission.MaxNumQueuedTokens, "refuse with vLLM's 503 while the prompts not yet answered hold this many tokens (0 = no bound)")
	fs.IntVar(&c.Output.MeanTokens, "mean-output-tokens", c.Output.MeanTokens, "mean natural answer length (tokens)")
	fs.IntVar(&c.Output.MaxModelLen, "max-model-len", c.Output.MaxModelLen, "context window, prompt plus output (tokens)")
	fs.IntVar(&c.Output.ReasoningTokens, "reasoning-tokens", c.Output.ReasoningTokens, "pose as a reasoning model: this many tokens of thinking before each answer")
	fs.StringVar(&c.Output.ReasoningField, "reasoning-field", c.Output.ReasoningField, "a chat delta's thinking field: reasoning_content or reasoning (newer vLLM)")
	q := &c.Quality
	fs.Float64Var(&q.DecodeSpeedup, "decode-speedup", q.DecodeSpeedup, "divides decode step costs (1 = base build)")
	fs.Float64Var(&q.MalformedJSONRate, "malformed-json-rate", q.MalformedJSONRate, "share of json_object answers that are invalid JSON (0..1)")
	fs.Float64Var(&q.TruncationRate, "truncation-rate", q.TruncationRate, "share of answers cut short (0..1)")
	fs.Float64Var(&q.RefusalRate, "refusal-rate", q.RefusalRate, "share of answers that refuse (0..1)")
	c.KVEvents.registerFlags(fs)
	f := &c.Faults
	fs.Float64Var(&f.ErrorRate, "error-rate", f.ErrorRate, "share of requests answered with --error-status (0..1)")
	fs.IntVar(&f.ErrorStatus, "error-status", f.ErrorStatus, "status of injected errors: 500, 502, 503 or 429")
	fs.DurationVar(&f.RetryAfter, "retry-after", f.RetryAfter, "Retry-After sent with injected 429/503 (duration)")
	fs.IntVar(&f.ResetAfter, "reset-after", f.ResetAfter, "reset the connection after this many tokens (0 = off)")
	fs.IntVar(&f.StallAfter, "stall-after", f.StallAfter, "stop sending after this many tokens (0 = off)")
	fs.DurationVar(&f.StallFor, "stall-for", f.StallFor, "how long a stall lasts (duration)")
	fs.DurationVar(&f.HeaderDelay, "header-delay", f.HeaderDelay, "hold response headers back (duration)")
	fs.DurationVar(&f.NetDelay, "net-delay", f.NetDelay, "delay before every write (duration)")
	fs.DurationVar(&f.NetJitter, "net-jitter", f.NetJitter, "uniform jitter around --net-delay (duration)")
}

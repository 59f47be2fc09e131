package tracing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/bgqueue"
	"github.com/infergate/infergate/internal/jsonl"
	"github.com/infergate/infergate/openai"
)

// LogConfig is the request log: one JSON line per request, which
// `infergate bench --replay` reads back. The zero value is off.
type LogConfig struct {
	// Path is the file; empty turns the log off. A reload cannot change it.
	Path string `yaml:"path"`
	// SampleRate is the share of requests logged, 0 to 1. Default 1.
	SampleRate float64 `yaml:"sample_rate"`
	// MaxBytes rotates the file past this size (path.1, path.2, ...).
	// Default 100 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxFiles is how many rotated files are kept. Default 5.
	MaxFiles int `yaml:"max_files"`
	// BodyBytes keeps request bodies up to this size in the log (larger
	// ones are left out, not cut); 0 keeps none.
	BodyBytes int `yaml:"body_bytes"`
	// Buffer is how many lines may wait for the writer; past it lines are
	// dropped and counted, never waited for. Default 4096.
	Buffer int `yaml:"buffer"`
}

// Defaults fills in zero values.
func (c *LogConfig) Defaults() {
	if c.SampleRate == 0 {
		c.SampleRate = 1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 100 << 20
	}
	if c.MaxFiles == 0 {
		c.MaxFiles = 5
	}
	if c.Buffer == 0 {
		c.Buffer = 4096
	}
}

// Validate names the first invalid field.
func (c *LogConfig) Validate() error {
	switch {
	case c.SampleRate < 0 || c.SampleRate > 1:
		return errors.New("request_log.sample_rate: must be within 0 and 1")
	case c.MaxBytes < 0 || c.MaxFiles < 0 || c.BodyBytes < 0 || c.Buffer < 0:
		return errors.New("request_log: sizes cannot be negative")
	}
	return nil
}

// Entry is one request's line. Durations are milliseconds; the field
// names time, model, input_tokens, output_tokens and body are what
// bench's replay reads.
type Entry struct {
	Time    time.Time `json:"time"`
	ID      string    `json:"id"`
	Path    string    `json:"path,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Model   string    `json:"model,omitempty"`
	Backend string    `json:"backend,omitempty"`
	// Route is why the backend was chosen, for selection load and prefix.
	Route        string `json:"route,omitempty"`
	Stream       bool   `json:"stream"`
	Status       int    `json:"status"`
	Outcome      string `json:"outcome"`
	InputTokens  int    `json:"input_tokens,omitempty"`
	OutputTokens int    `json:"output_tokens,omitempty"`
	// CachedTokens is the prompt tokens the backend found cached, when it
	// said.
	CachedTokens *int `json:"cached_tokens,omitempty"`
	// ReasoningTokens is the output tokens that were a reasoning model's
	// thinking, as the backend's usage says.
	ReasoningTokens int     `json:"reasoning_tokens,omitempty"`
	Events          int     `json:"events,omitempty"`
	Attempts        int     `json:"attempts,omitempty"`
	TTFT            float64 `json:"ttft_ms,omitempty"`
	FinishReason    string  `json:"finish_reason,omitempty"`
	// LengthByPolicy is set when a finish_reason "length" came from the
	// output limit the gateway's policy set, not the model's own.
	LengthByPolicy bool `json:"length_by_policy,omitempty"`
	// Policy is what the policy did, nil when it left the request alone.
	Policy *PolicyNote     `json:"policy,omitempty"`
	Timing *openai.Timing  `json:"timing,omitempty"`
	Error  string          `json:"error,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	// Class is the service class the request was served in (with
	// classes on); ClassRequested the one it asked for when that was
	// above its tenant's ceiling and it was lowered.
	Class          string `json:"class,omitempty"`
	ClassRequested string `json:"class_requested,omitempty"`
	// Refusal is why admission refused it: queue_full, queue_timeout,
	// tenant_cap, class_cap, redis_down, shed or preempted.
	Refusal string `json:"refusal,omitempty"`
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// NewTiming converts an attribution and the gateway's TTFT to the wire form.
func NewTiming(a Attribution, ttft time.Duration) *openai.Timing {
	t := &openai.Timing{TTFT: msOf(ttft), Queue: msOf(a.Queue), Gateway: msOf(a.Gateway), Connect: msOf(a.Connect), Network: msOf(a.Network),
		ModelTTFT: msOf(a.ModelTTFT), Decode: msOf(a.Decode), Total: msOf(a.Total), Relay: msOf(a.Relay), RelayMax: msOf(a.RelayMax)}
	if a.Reasoning > 0 {
		t.TTFO, t.Reasoning = msOf(a.TTFO), msOf(a.Reasoning)
	}
	if b := a.Backend; b.Source != "" {
		opt := func(d time.Duration) *float64 {
			if d < 0 {
				return nil
			}
			v := msOf(d)
			return &v
		}
		t.Backend = &openai.BackendTiming{Source: b.Source, Queue: opt(b.Queue), Prefill: opt(b.Prefill), Decode: opt(b.Decode), Inference: opt(b.Inference)}
	}
	return t
}

// RequestLog writes entries from one goroutine of its own, so the request
// path only hands them over (Sample, then Log), to a rotating file
// (internal/jsonl: 0600, reopened after a write error, lost lines
// counted). It is safe for concurrent use; Close flushes and stops it.
type RequestLog struct {
	cfg     LogConfig
	q       *bgqueue.Queue[Entry]
	dropped atomic.Int64
	rate    atomic.Uint64 // float64 bits, changed on reload

	w    *jsonl.Writer
	line []byte // the writer's buffer for one line
}

// OpenRequestLog opens cfg.Path for appending and starts the writer.
func OpenRequestLog(cfg LogConfig) (*RequestLog, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &RequestLog{cfg: cfg}
	l.SetSampleRate(cfg.SampleRate)
	w, err := jsonl.Open(jsonl.Config{Path: cfg.Path, MaxBytes: cfg.MaxBytes, MaxFiles: cfg.MaxFiles})
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	l.w = w
	l.q = bgqueue.Start(bgqueue.Config[Entry]{Size: cfg.Buffer, Handle: l.write, Flush: w.Flush, Tick: time.Second, Linger: 2 * time.Millisecond})
	return l, nil
}

// SetSampleRate changes the share of requests logged (a reload).
func (l *RequestLog) SetSampleRate(r float64) {
	l.rate.Store(math.Float64bits(r))
}

// Sample decides whether this request is logged; the caller builds the
// entry only then.
func (l *RequestLog) Sample() bool {
	r := math.Float64frombits(l.rate.Load())
	return r >= 1 || rand.Float64() < r
}

// Log hands e to the writer without waiting; a full buffer drops it.
func (l *RequestLog) Log(e Entry) {
	if !l.q.Offer(e) {
		l.dropped.Add(1)
	}
}

// BodyBytes is the most body the log keeps.
func (l *RequestLog) BodyBytes() int { return l.cfg.BodyBytes }

// Lost counts lines that could not be written (write errors; the log
// reopens its file and carries on).
func (l *RequestLog) Lost() int64 { return l.w.Lost() }

// Dropped and Written count lines since the log was opened.
func (l *RequestLog) Dropped() int64 { return l.dropped.Load() }
func (l *RequestLog) Written() int64 { return l.w.Written() }

func (l *RequestLog) write(e Entry) {
	l.line = e.AppendJSON(l.line[:0])
	l.w.Write(l.line)
}

// Close writes out what is queued and closes the file. It is safe to
// call twice.
func (l *RequestLog) Close() error {
	l.q.Close()
	return l.w.Close()
}

package bench

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/infergate/infergate/openai"
)

// maxRows bounds the per-request rows a stage keeps in memory (about 90
// bytes each); beyond it a uniform reservoir is kept, while every count
// and total stays exact.
const maxRows = 1 << 20

// row is what a stage keeps of one measured request.
type row struct {
	sent, lag                       int64 // sent: ns from the stage's begin; lag: send lag
	ttfb, first, ttft, last, end    int64 // ns from sent; 0: did not happen
	server                          int64 // the server's own TTFT; 0: not reported
	ttfo                            int64 // ns from sent to the first output token; 0 when the model did not think first
	reasoning                       int32 // usage's reasoning tokens; -1: not reported
	cached                          int32 // usage's cached prompt tokens; -1: not reported
	turn                            int16 // a session's turn, from 1; 0 outside sessions
	out, usage, counted, prompt     int32
	input                           int32 // the prompt length asked for (cl100k_base), 0 unknown
	events                          int32
	gw                              *openai.Timing
	ok, invalidJSON, empty, refusal bool
	finishLength, lengthByPolicy    bool
	jsonAsked, schemaAsked          bool
	schemaInvalid                   bool
	// class and served are the class sent and the class the gateway said
	// it served, each 1 + its index in Classes (served: 1+len(Classes)
	// for another value), 0 for none; shed is 1 + the index of a 429 or
	// 503's reason in the collector's reasons.
	class, served, shed uint8
	requeued            bool // the gateway preempted and requeued it
}

// Collector gathers the results of a run, stage by stage. It is safe for
// concurrent use.
type Collector struct {
	mu     sync.Mutex
	stages map[int]*stageData
	rng    *rand.Rand
	// Each is called with every result under the collector's lock, in
	// completion order (the CSV and events writers).
	Each func(*Result)
	// live figures for the progress display
	done, failed int64
	liveTTFT     *Dist
	// reasons are the refusal reasons seen (Result.ShedReason), at most
	// maxReasons; rows name them by index.
	reasons []string
}

// maxReasons bounds the distinct refusal reasons a run tells apart;
// later ones count as "other".
const maxReasons = 32

// stageData is one stage's raw material.
type stageData struct {
	begin     time.Time
	rows      []row
	seen      int64 // measured results, for the reservoir
	itl       *Dist
	errors    map[string]int
	errSample map[string]string
	cancelled int
	warmup    int
	primed    int
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{stages: map[int]*stageData{}, rng: rand.New(rand.NewPCG(1, 2)), liveTTFT: NewDist()}
}

func (c *Collector) stage(n int) *stageData {
	sd := c.stages[n]
	if sd == nil {
		sd = &stageData{itl: NewDist(), errors: map[string]int{}, errSample: map[string]string{}}
		c.stages[n] = sd
	}
	return sd
}

// Begin marks the start of stage n: row times count from it.
func (c *Collector) Begin(n int, t time.Time) {
	c.mu.Lock()
	c.stage(n).begin = t
	c.liveTTFT = NewDist()
	c.mu.Unlock()
}

// Gaps records inter-token gaps of a measured request of stage n.
func (c *Collector) Gaps(n int, warm bool, gaps []time.Duration) {
	if warm {
		return
	}
	c.mu.Lock()
	sd := c.stage(n)
	for _, g := range gaps {
		sd.itl.Add(g)
	}
	c.mu.Unlock()
}

// Add records one result.
func (c *Collector) Add(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Each != nil {
		c.Each(r)
	}
	sd := c.stage(r.Stage)
	switch {
	case r.Prime:
		sd.primed++
		c.done++ // the warm pass's bar counts it
		if !r.OK() {
			c.failed++
		}
		return
	case r.Warmup:
		sd.warmup++
		return
	case r.ErrClass == ErrCancelled:
		sd.cancelled++
		return
	}
	c.done++
	if !r.OK() {
		c.failed++
		sd.errors[r.ErrClass]++
		if _, ok := sd.errSample[r.ErrClass]; !ok {
			sd.errSample[r.ErrClass] = r.Err
		}
	} else if r.TTFT > 0 {
		c.liveTTFT.Add(r.TTFT)
	}
	w := row{
		sent: r.Sent.Sub(sd.begin).Nanoseconds(), lag: r.SendLag().Nanoseconds(),
		gw: r.Gateway, server: int64(r.ServerTTFT), ttfb: int64(r.TTFB), first: int64(r.FirstEvent), ttft: int64(r.TTFT), last: int64(r.LastToken), end: int64(r.End),
		out: int32(r.OutputTokens), usage: int32(r.UsageTokens), counted: int32(r.CountedTokens), prompt: int32(r.PromptTokens), input: int32(min(r.InputTokens, math.MaxInt32)),
		events: int32(r.ContentEvents), ok: r.OK(), invalidJSON: r.InvalidJSON, empty: r.Empty, refusal: r.Refusal,
		jsonAsked: r.Ask.JSON, schemaAsked: r.Ask.Schema != nil && r.OK() && !r.InvalidJSON, schemaInvalid: r.SchemaInvalid,
		finishLength: r.Truncated && !r.LengthByPolicy, lengthByPolicy: r.LengthByPolicy,
		reasoning: int32(r.ReasoningTokens), cached: int32(r.CachedTokens), turn: int16(min(r.Turn, math.MaxInt16)),
	}
	if r.ReasoningEvents > 0 || r.ReasoningTokens > 0 {
		w.ttfo = int64(r.TTFO)
	}
	w.class, w.served, w.requeued = classTag(r.Class), classTag(r.ServedClass), r.Requeued
	if r.ShedReason != "" {
		w.shed = c.reason(r.ShedReason)
	}
	sd.seen++
	if len(sd.rows) < maxRows {
		sd.rows = append(sd.rows, w)
	} else if j := c.rng.Int64N(sd.seen); j < maxRows {
		sd.rows[j] = w
	}
}

// Live returns finished and failed requests so far (measured, and a warm
// pass's) and the TTFT median of the measured successes.
func (c *Collector) Live() (done, failed int64, ttftP50 time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done, c.failed, c.liveTTFT.Quantile(50)
}

func (w *row) metric(name string) int64 {
	switch name {
	case "ttft":
		return w.ttft
	case "ttft_sched":
		return w.ttft + w.lag
	case "tpot":
		if w.out < 2 {
			return 0
		}
		return (w.last - w.ttft) / int64(w.out-1)
	case "e2e":
		return w.e2e()
	}
	return 0
}

func (w *row) e2e() int64 {
	if w.last > 0 {
		return w.last
	}
	return w.end
}

// tokensIn is the share of the row's output tokens produced inside
// [from, to] (ns from the stage's begin), taking them as evenly spread
// between its first and last content event.
func (w *row) tokensIn(from, to int64) float64 {
	if !w.ok || w.out == 0 || w.ttft == 0 {
		return 0
	}
	a, b := w.sent+w.ttft, w.sent+w.last
	if b <= a {
		if a >= from && a <= to {
			return float64(w.out)
		}
		return 0
	}
	lo, hi := max(a, from), min(b, to)
	if hi <= lo {
		return 0
	}
	return float64(w.out) * float64(hi-lo) / float64(b-a)
}

// classTag is a row's tag of class c: 1 + its index in Classes,
// 1+len(Classes) for another value, 0 for none.
func classTag(c string) uint8 {
	if c == "" {
		return 0
	}
	if i := classIndex(c); i >= 0 {
		return uint8(i + 1)
	}
	return uint8(len(Classes) + 1)
}

// reason is the tag of refusal reason s (1 + its index in c.reasons),
// adding it while there is room; beyond maxReasons distinct ones, the
// last tag stands for "other". Call with c.mu held.
func (c *Collector) reason(s string) uint8 {
	for i, r := range c.reasons {
		if r == s {
			return uint8(i + 1)
		}
	}
	if len(c.reasons) < maxReasons-1 {
		c.reasons = append(c.reasons, s)
		return uint8(len(c.reasons))
	}
	if len(c.reasons) == maxReasons-1 {
		c.reasons = append(c.reasons, "other")
	}
	return maxReasons
}

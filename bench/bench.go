package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/internal/tokens"

	"github.com/infergate/infergate/quality"
)

// Run runs the benchmark and returns its record. An interrupted run (ctx
// ended) returns the record of what finished, marked interrupted, with
// the error.
func Run(ctx context.Context, cfg Config) (*Record, error) {
	b, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	cfg = b.cfg
	levels := cfg.Sweep
	if len(levels) == 0 {
		levels = []float64{cfg.Load.Level()}
	}
	rec := b.rec
	var runErr error
	for i, level := range levels {
		s, err := b.Stage(ctx, i, level)
		var af *AllFailed
		if errors.As(err, &af) {
			// Nothing was measured but errors: no record, the reason.
			_ = b.rows.Flush()
			return nil, af
		}
		rec.Stages = append(rec.Stages, s)
		if err != nil {
			runErr = err
			rec.Interrupted = true
			break
		}
		if len(levels) > 1 && !cfg.NoSweepStop && i < len(levels)-1 {
			if stop, why := overSaturated(rec.Stages); stop {
				rec.StopReason = fmt.Sprintf("%s: levels %v not run", why, levels[i+1:])
				break
			}
		}
	}
	if cfg.DirectURL != "" && runErr == nil {
		dc := cfg
		dc.URL = cfg.DirectURL
		dEndpoint, err := dc.Endpoint()
		if err != nil {
			return rec, fmt.Errorf("--direct-url: %w", err)
		}
		var hdr [][2]string
		for _, h := range cfg.Headers {
			if !strings.EqualFold(h[0], "X-Infergate-Timing") {
				hdr = append(hdr, h)
			}
		}
		tokens := pairedTokens(&cfg.Workload)
		held := heldTo(cfg.Overrides, cfg.Workload.Endpoint, tokens)
		direct, err := NewClient(dEndpoint, ClientOptions{Headers: hdr, InsecureSkipVerify: cfg.InsecureSkipVerify, Overrides: held})
		if err != nil {
			return rec, fmt.Errorf("--direct-url: %w", err)
		}
		defer direct.Close()
		gw, err := NewClient(b.endpoint, ClientOptions{Headers: cfg.Headers, InsecureSkipVerify: cfg.InsecureSkipVerify, Overrides: held})
		if err != nil {
			return rec, fmt.Errorf("--direct-url: %w", err)
		}
		defer gw.Close()
		rec.Paired = b.runPaired(ctx, gw, direct, int(b.rn.next.Load()), cfg.Pairs, tokens, dEndpoint)
	}
	rec.Knee = knee(rec.Stages)
	rec.Warnings = append(rec.Warnings, b.warnings()...)
	if err := b.rows.Flush(); err != nil && runErr == nil {
		runErr = err
	}
	return rec, runErr
}

// Bench is a benchmark made ready to run stages one at a time, on one
// client, workload and collector: Run's sweep, rank's rounds. A Runner's
// state (the request index, a Retry-After hold) carries from one stage to
// the next.
type Bench struct {
	cfg      Config
	endpoint string
	rec      *Record
	client   *Client
	wl       Workload
	count    func(string) int
	rn       *Runner
	col      *Collector
	rows     *rowWriter
	ff       failFast
	// stopStage ends the stage under way with a cause (failFast).
	stopStage         context.CancelCauseFunc
	offLength, forced atomic.Int64
}

// Open checks cfg (after its Defaults), builds the workload and the
// client, and reads the gateway's settings when cfg names its admin
// listener. Close releases the client's connections.
func Open(ctx context.Context, cfg Config) (*Bench, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	endpoint, err := cfg.Endpoint()
	if err != nil {
		return nil, err
	}
	mode := cfg.Cache
	switch {
	case cfg.Workload.Seed == 0:
		// A fresh seed: prompts no earlier run sent (CacheCold).
		cfg.Workload.Seed = freshSeed()
		if mode == "" {
			mode = CacheCold
		}
		cfg.Workload.Salt = saltOf(&cfg.Workload)
		say(cfg.Log, "prompts: seed %d, drawn for this run (--seed %d repeats them)", cfg.Workload.Seed, cfg.Workload.Seed)
	case mode == "":
		mode = CacheSeeded
		say(cfg.Log, "prompts: seed %d given: the same prompts as every run with it, which the server may still hold (the report shows the cached share)", cfg.Workload.Seed)
	}
	cfg.Cache = mode
	tok := cfg.Tokenizer
	if tok == nil {
		var err error
		if tok, err = tokens.New(); err != nil {
			return nil, err
		}
	}
	wl, err := newWorkload(&cfg.Workload, tok)
	if err != nil {
		return nil, err
	}
	q, err := quality.NewJudge(cfg.Refusals)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	client, err := NewClient(endpoint, ClientOptions{Headers: cfg.Headers, InsecureSkipVerify: cfg.InsecureSkipVerify, Overrides: cfg.Overrides})
	if err != nil {
		return nil, err
	}
	b := &Bench{cfg: cfg, endpoint: endpoint, client: client, wl: wl, count: tok.Count}
	rec := &Record{Schema: schema, Conditions: NewConditions(), Knee: -1, Formulas: formulas}
	rec.Conditions.URL = endpoint
	rec.Conditions.Workload = cfg.Workload
	rec.Conditions.Load = cfg.Load
	rec.Conditions.Cache = cfg.Cache
	rec.Conditions.Sweep = cfg.Sweep
	rec.Conditions.SLOs = cfg.SLOs
	rec.Conditions.SLOPercentile = cfg.SLOPercentile
	for _, h := range cfg.Headers {
		rec.Conditions.Headers = append(rec.Conditions.Headers, h[0])
	}
	rec.Conditions.GatewayConfigHash = gatewayConfigHash(endpoint)
	if cfg.GatewayAdmin != "" {
		st, err := gatewaySettings(ctx, cfg.GatewayAdmin, cfg.GatewayAdminKey, rec.Conditions.GatewayConfigHash)
		if err != nil {
			client.Close()
			return nil, err
		}
		rec.Conditions.GatewaySettings = st
	}
	b.rec = rec
	b.col = NewCollector()
	b.rows = newRowWriter(cfg.CSV, cfg.Events)
	b.col.Each = b.each
	b.rn = &Runner{Client: client, Workload: wl, Stream: cfg.Workload.Stream, Count: tok.Count, Quality: q,
		Sink: b.col.Add, Gaps: b.col.Gaps, KeepEvents: cfg.Events != nil, Seed: cfg.Workload.Seed,
		HonorRetryAfter: cfg.HonorRetryAfter}
	return b, nil
}

// each sees every result, under the collector's lock.
func (b *Bench) each(r *Result) {
	if err := b.ff.see(r); err != nil && b.stopStage != nil {
		b.stopStage(err)
	}
	b.rows.Write(r)
	if b.cfg.Workload.ForceOutputLength && r.OK() && !r.Warmup && r.MaxTokens > 0 {
		b.forced.Add(1)
		if r.OutputTokens != r.MaxTokens {
			b.offLength.Add(1)
		}
	}
	if b.cfg.OnResult != nil {
		b.cfg.OnResult(r)
	}
}

// Headers are the headers every request carries (its key among them).
func (b *Bench) Headers() [][2]string { return b.cfg.Headers }

// Endpoint is the URL the requests go to.
func (b *Bench) Endpoint() string { return b.endpoint }

// Stage runs stage i at level (a concurrency, or a rate in open loop)
// and returns its summary. When the run's first requests all failed
// alike the error is an *AllFailed (with the server's models for a 404),
// and no later stage is worth running; when ctx ended, the summary is of
// what finished.
func (b *Bench) Stage(ctx context.Context, i int, level float64) (*Summary, error) {
	l := b.cfg.Load
	switch l.Mode {
	case "closed", "sessions":
		l.Concurrency = int(level)
	case "open":
		l.Rate = level
	}
	if b.cfg.Cache == CacheWarm {
		if err := b.warmPass(ctx, i, l); err != nil {
			return b.col.Summarize(i, l, Window{Start: time.Now()}, b.cfg.SLOs), err
		}
		defer b.endCycle()
	}
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b.stopStage = stop
	begin := time.Now()
	b.col.Begin(i, begin)
	stopProgress := startProgress(b.cfg.Progress, b.col, b.rn, &l, i, max(len(b.cfg.Sweep), 1), begin)
	win, err := b.rn.Run(sctx, i, l)
	stopProgress()
	b.stopStage = nil
	s := b.col.Summarize(i, l, win, b.cfg.SLOs)
	if af := stoppedEarly(sctx, context.Cause(sctx), b.endpoint, b.cfg.Headers); af != nil {
		return s, af
	}
	return s, err
}

// warmPass sends stage i's prompts once, unmeasured, and sets the
// runner to send the same prompts again, from the first, for the
// measured pass (Config.Cache warm). A measured pass that sends more
// requests than the warm pass did starts over from its first prompt.
func (b *Bench) warmPass(ctx context.Context, i int, l LoadSpec) error {
	rn := b.rn
	start, sessions := int(rn.next.Load()), int(rn.nextSession.Load())
	say(b.cfg.Log, "stage %d: warm pass: the stage's prompts once, unmeasured, before they are measured", i)
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b.stopStage = stop
	rn.prime = true
	begin := time.Now()
	b.col.Begin(i, begin)
	stopProgress := startProgress(b.cfg.Progress, b.col, rn, &l, i, max(len(b.cfg.Sweep), 1), begin)
	_, err := rn.Run(sctx, i, l)
	stopProgress()
	rn.prime = false
	b.stopStage = nil
	if af := stoppedEarly(sctx, context.Cause(sctx), b.endpoint, b.cfg.Headers); af != nil {
		return af
	}
	if err != nil {
		return err
	}
	rn.cycle = cycle{start: start, n: int(rn.next.Load()) - start}
	rn.session = cycle{start: sessions, n: int(rn.nextSession.Load()) - sessions}
	rn.next.Store(int64(start))
	rn.nextSession.Store(int64(sessions))
	return nil
}

// endCycle ends a warm stage's mapping: the next stage's prompts are
// past every prompt either pass sent.
func (b *Bench) endCycle() {
	rn := b.rn
	rn.next.Store(max(rn.next.Load(), int64(rn.cycle.start+rn.cycle.n)))
	rn.nextSession.Store(max(rn.nextSession.Load(), int64(rn.session.start+rn.session.n)))
	rn.cycle, rn.session = cycle{}, cycle{}
}

// warnings are what the stages so far showed that a reader of their
// figures should know: answers of another length than forced, usage
// that disagrees with the counted tokens, stages that measured nothing.
func (b *Bench) warnings() []string {
	var out []string
	if n := b.offLength.Load(); n > 0 {
		out = append(out, fmt.Sprintf("--force-output-length: %d of %d answers came back with another length than max_tokens: the server may ignore ignore_eos/min_tokens", n, b.forced.Load()))
	}
	for _, s := range b.rec.Stages {
		if s.UsageMismatch > 0 {
			out = append(out, fmt.Sprintf("stage %d: %d of %d answers report fewer completion tokens than the content events they came in: the server's usage is wrong, and so are token figures drawn from it", s.Stage, s.UsageMismatch, s.UsageChecked))
		}
		// A chat template adds its own few tokens to every prompt: a
		// miss within 16 tokens is that, not the length.
		if a, v := s.InputTokensAsked, s.InputTokensServer; v > 0 && math.Abs(v-a) > max(0.1*a, 16) {
			out = append(out, fmt.Sprintf("stage %d: the prompts arrived as %.1f tokens on average by the server's own count (usage.prompt_tokens), for %.1f asked in cl100k_base tokens (%+.0f%%): its tokenizer and chat template are not cl100k_base; to hold the server to a length, set --input-tokens by its count", s.Stage, v, a, 100*(v/a-1)))
		}
		if s.Requests == 0 {
			out = append(out, fmt.Sprintf("stage %d measured no request: lengthen --duration or lower the warm-up", s.Stage))
		}
	}
	return out
}

// WaitHold waits out a Retry-After hold (Config.HonorRetryAfter), or
// until ctx ends.
func (b *Bench) WaitHold(ctx context.Context) { b.rn.waitHold(ctx) }

// Hold holds the stages' requests back for d from now, as an answer with
// Retry-After d would (another client's answer, a probe's).
func (b *Bench) Hold(d time.Duration) { b.rn.hold(d) }

// Held is how long requests were held back for Retry-After, in all.
func (b *Bench) Held() time.Duration { return b.rn.Held() }

// Close releases the client's idle connections.
func (b *Bench) Close() { b.client.Close() }

// gatewayConfigHash asks an infergate gateway for the hash of its
// configuration (header X-Infergate-Config-Hash on /healthz); other
// servers answer without it.
func gatewayConfigHash(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	u.Path, u.RawQuery = "/healthz", ""
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(u.String())
	if err != nil {
		return ""
	}
	resp.Body.Close()
	return resp.Header.Get("X-Infergate-Config-Hash")
}

// gatewaySettings reads the settings of the gateway's configuration
// whose hash is hash (the current one when hash is empty) from its admin
// listener's configuration history.
func gatewaySettings(ctx context.Context, admin, key, hash string) (map[string]string, error) {
	c := &adminapi.Client{URL: admin, Key: key, HTTP: safehttp.Client(5 * time.Second)}
	vs, err := c.Versions(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: --admin: %w", err)
	}
	v, ok := vs.Find(hash)
	if !ok {
		return nil, fmt.Errorf("bench: --admin: %s does not know the configuration %q the gateway at the URL reports", admin, hash)
	}
	return v.Settings, nil
}

// freshSeed draws a seed no earlier run is likely to have used (never 0,
// which asks for one).
func freshSeed() uint64 {
	for {
		if s := rand.Uint64(); s != 0 {
			return s
		}
	}
}

// saltOf is the tag a run's fixed-text prompts (a dataset's, a request
// log's bodies) start with, so that a fresh seed makes them unseen too:
// their text does not come from the seed. Synthetic prompts and traces
// draw their text from the seed and need none.
func saltOf(w *WorkloadSpec) string {
	if w.Dataset == "" && w.Replay == "" {
		return ""
	}
	return fmt.Sprintf("[run %016x] ", w.Seed)
}

// say writes one line of what the run is doing to w, when there is one.
func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

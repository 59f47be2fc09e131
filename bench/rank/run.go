package rank

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/verdict"
)

// cost is what price charges for the usage: uncached prompt tokens at
// the input price, cached ones at the cached price, output at the output
// price. Usage not returned (-1) counts nothing.
func cost(p Price, prompt, cached, output int) float64 {
	prompt, cached, output = max(prompt, 0), max(cached, 0), max(output, 0)
	cached = min(cached, prompt)
	return (float64(prompt-cached)*p.Input + float64(cached)*p.Cached() + float64(output)*p.Output) / 1e6
}

// Options are what a run needs besides the file.
type Options struct {
	// Keys are the endpoints' keys, in the file's order (File.Keys).
	Keys []string
	// Plan receives the plan (planOf) before anything is sent; nil
	// shows none.
	Plan io.Writer
	// Progress receives a line per endpoint and round; nil shows none.
	Progress           io.Writer
	InsecureSkipVerify bool
	// HoldBudget bounds the Retry-After holds of one endpoint in one
	// round (default 2 minutes): past it the endpoint is stopped,
	// rate-limited, and its later rounds are not run.
	HoldBudget time.Duration
}

// defaultHoldBudget is Options.HoldBudget's default.
const defaultHoldBudget = 2 * time.Minute

// errHoldBudget ends a round whose Retry-After holds ran past the budget.
var errHoldBudget = errors.New("rate limited past the round's Retry-After budget")

// bound states what a run of f sends at most.
func bound(f *File) string {
	w := f.Workload
	per := w.Probes + w.Concurrency + w.Requests
	return fmt.Sprintf("%d endpoints × %d rounds × (%d probes + %d warm-up + %d measured requests, %d at once, input %s / output %s tokens) = at most %d requests, each bounded by %v; Retry-After honoured up to %v a time and %v an endpoint a round",
		len(f.Endpoints), w.Rounds, w.Probes, w.Concurrency, w.Requests, w.Concurrency, orDataset(w.InputTokens, w.Dataset), orDataset(w.OutputTokens, w.Dataset), len(f.Endpoints)*w.Rounds*per, w.Timeout,
		bench.MaxRetryAfter, defaultHoldBudget)
}

func orDataset(v, dataset string) string {
	if dataset != "" {
		return "from " + dataset
	}
	return v
}

// Run ranks f's endpoints: Rounds rounds, each probing then benching
// every endpoint in turn (one endpoint at a time, the order turning each
// round), then the figures and the order. f's workload must have its
// defaults. An interrupted run (ctx ended) returns what finished, marked
// interrupted, ranked, with the error.
func Run(ctx context.Context, f *File, o Options) (*Record, error) {
	w := f.Workload
	slos, err := verdict.ParseSLOs(w.SLO)
	if err != nil {
		return nil, fmt.Errorf("workload.slo: %w", err)
	}
	pct, err := verdict.ParsePercentile(w.SLOPercentile)
	if err != nil {
		return nil, fmt.Errorf("workload.slo_percentile: %w", err)
	}
	if len(o.Keys) != len(f.Endpoints) {
		return nil, errors.New("rank: one key (or none) per endpoint")
	}
	plan := planOf(f)
	if o.Plan != nil {
		plan.Write(o.Plan, "rank: ")
	}
	cond := bench.NewConditions()
	rec := &Record{Schema: schema, Start: cond.Start, Tool: cond.ToolVersion, Host: cond.Host, Workload: w, Bound: plan.Bound, Plan: &plan, Formulas: formulas}
	budget := cmp.Or(o.HoldBudget, defaultHoldBudget)
	// One tokenizer for all the endpoints' benches (~14 MB each).
	tok, err := tokens.New()
	if err != nil {
		return nil, err
	}
	lives := make([]*live, len(f.Endpoints))
	defer func() {
		for _, l := range lives {
			if l != nil && l.b != nil {
				l.b.Close()
			}
		}
	}()
	for i := range f.Endpoints {
		e := &f.Endpoints[i]
		l := &live{res: &Result{Name: e.Name, URL: e.URL, Model: e.Model, Price: e.Price, Overrides: e.Overrides}}
		hdr := e.headers(o.Keys[i])
		for _, h := range hdr {
			if o.Keys[i] != "" && strings.HasSuffix(h[1], o.Keys[i]) {
				l.res.Keyed = h[0]
			} else {
				l.res.Headers = append(l.res.Headers, h[0])
			}
		}
		overrides := map[string]json.RawMessage{}
		for k, v := range e.Overrides {
			b, _ := json.Marshal(v) // checked by Validate
			overrides[k] = b
		}
		cfg := bench.Config{
			URL: e.URL,
			Workload: bench.WorkloadSpec{Endpoint: w.API, Model: e.Model, Stream: true, InputTokens: w.InputTokens, OutputTokens: w.OutputTokens,
				SharedPrefix: w.SharedPrefix, Dataset: w.Dataset, Seed: w.Seed},
			Load:               bench.LoadSpec{Mode: "closed", Concurrency: w.Concurrency, Requests: w.Requests, WarmupPerUser: true, Timeout: w.Timeout},
			SLOs:               slos,
			SLOPercentile:      pct,
			Headers:            hdr,
			InsecureSkipVerify: o.InsecureSkipVerify,
			Overrides:          overrides,
			HonorRetryAfter:    true,
			Tokenizer:          tok,
		}
		cfg.OnResult = func(r *bench.Result) {
			if r.Warmup || r.ErrClass == bench.ErrCancelled {
				return
			}
			row := requestOf(r, e.Price, slos)
			l.mu.Lock()
			row.Round = l.round
			l.res.Requests = append(l.res.Requests, row)
			l.checkHolds(budget)
			l.mu.Unlock()
		}
		b, err := bench.Open(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q (endpoints[%d]): %w", e.Name, i, err)
		}
		l.b = b
		lives[i] = l
		rec.Endpoints = append(rec.Endpoints, l.res)
	}
	probeBody := func(e *Endpoint) []byte {
		m, _ := json.Marshal(e.Model)
		switch w.API {
		case "completions":
			return fmt.Appendf(nil, `{"model":%s,"prompt":"Say hello.","max_tokens":16,"stream":true}`, m)
		case "responses":
			return fmt.Appendf(nil, `{"model":%s,"input":"Say hello.","max_output_tokens":16,"stream":true}`, m)
		}
		return fmt.Appendf(nil, `{"model":%s,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"stream":true}`, m)
	}
	var runErr error
rounds:
	for r := range w.Rounds {
		for k := range lives {
			i := (k + r) % len(lives)
			l, e := lives[i], &f.Endpoints[i]
			if l.res.Stopped != "" {
				continue
			}
			if ctx.Err() != nil {
				runErr = context.Cause(ctx)
				break rounds
			}
			round := Round{Round: r, Start: time.Now(), Position: k}
			held := l.b.Held()
			sctx, stop := context.WithCancelCause(ctx)
			l.mu.Lock()
			l.round, l.stop, l.heldAt = r, stop, held
			l.mu.Unlock()
			l.probe(sctx, o, probeBody(e), budget, w)
			var s *bench.Summary
			var err error
			if sctx.Err() == nil {
				s, err = l.b.Stage(sctx, r, float64(w.Concurrency))
			}
			var af *bench.AllFailed
			switch {
			case errors.Is(context.Cause(sctx), errHoldBudget) && ctx.Err() == nil:
				l.res.Stopped = fmt.Sprintf("round %d: %v (%v); its later rounds not run", r, errHoldBudget, budget)
			case errors.As(err, &af):
				l.res.Stopped = fmt.Sprintf("round %d: %v", r, af)
			case err != nil:
				runErr = err
			case ctx.Err() != nil:
				runErr = context.Cause(ctx)
			}
			stop(nil)
			l.mu.Lock()
			l.stop = nil
			l.mu.Unlock()
			round.HeldS = (l.b.Held() - held).Seconds()
			round.Probe = l.probes
			if s != nil {
				round.Throughput, round.RequestRate = s.OutputTokenThroughput, s.RequestThroughput
			}
			l.mu.Lock()
			fillRound(&round, l.res.Requests, r)
			l.res.Rounds = append(l.res.Rounds, round)
			l.mu.Unlock()
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "round %d/%d  %-20s  %d/%d ok  TTFT p50 %.1f ms  %.1f tokens/s a request  $%.6f a request%s\n",
					r+1, w.Rounds, e.Name, round.OK, round.Requests, round.TTFTP50, round.SpeedP50, round.CostPerRequest, stoppedNote(l.res.Stopped))
			}
			if runErr != nil {
				break rounds
			}
		}
	}
	for _, l := range lives {
		l.res.Figures = figures(l.res, w, slos, pct)
	}
	rec.Ranking = Order(rec.Endpoints, w)
	rec.Warnings = warnings(rec.Endpoints)
	for _, k := range plan.Keys {
		if k.TooSmall {
			rec.Warnings = append(rec.Warnings, "the workload was too small to tell endpoints apart on "+k.Says)
		}
	}
	rec.End = time.Now().UTC()
	if runErr != nil {
		rec.Interrupted = true
		return rec, fmt.Errorf("interrupted (the record holds what finished): %w", runErr)
	}
	return rec, nil
}

// live is an endpoint during a run.
type live struct {
	b   *bench.Bench
	res *Result
	mu  sync.Mutex
	// round is the round under way, for OnResult; stop ends it, once
	// its holds since heldAt pass the budget.
	round  int
	stop   context.CancelCauseFunc
	heldAt time.Duration
	// probes is the medians of the round's probes.
	probes Probe
}

// checkHolds ends the round under way once its Retry-After holds have
// passed budget.
func (l *live) checkHolds(budget time.Duration) {
	if l.stop != nil && l.b.Held()-l.heldAt > budget {
		l.stop(errHoldBudget)
	}
}

// probe sends the round's probes one at a time, so a Retry-After holds
// the next one too, and records them; past the hold budget it ends the
// round (l.stop).
func (l *live) probe(ctx context.Context, o Options, body []byte, budget time.Duration, w Workload) {
	var ps []bench.ProbeResult
	for range w.Probes {
		l.b.WaitHold(ctx)
		if ctx.Err() != nil {
			break
		}
		p, _ := bench.Probe(ctx, bench.ProbeConfig{URL: l.b.Endpoint(), Body: body, Stream: true, N: 1,
			Headers: l.b.Headers(), InsecureSkipVerify: o.InsecureSkipVerify, Timeout: w.Timeout})
		for _, q := range p {
			if q.RetryAfter > 0 {
				l.b.Hold(q.RetryAfter)
			}
		}
		l.checkHolds(budget)
		ps = append(ps, p...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.round
	for _, p := range ps {
		row := Request{Round: r, Probe: true, OK: p.Err == nil, Status: p.Status, PromptTokens: -1, CachedTokens: -1, OutputTokens: -1,
			RetryAfterS: p.RetryAfter.Seconds()}
		switch {
		case p.Err == nil:
			row.TTFT = ms(p.TTFT)
		case p.Status == 0:
			row.Class = ClassConnect
		default:
			row.Class = classOf("", p.Status)
		}
		l.res.Requests = append(l.res.Requests, row)
	}
	l.probes = probeOf(ps)
}

func stoppedNote(s string) string {
	if s == "" {
		return ""
	}
	return "  (stopped: " + s + ")"
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// requestOf is the row of one finished bench request.
func requestOf(r *bench.Result, p Price, slos []verdict.SLO) Request {
	row := Request{OK: r.OK(), Status: r.Status, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens, OutputTokens: r.UsageTokens,
		RetryAfterS: r.RetryAfter.Seconds()}
	if !r.OK() {
		row.Class = classOf(r.ErrClass, r.Status)
		return row
	}
	if r.UsageTokens < 0 {
		row.Counted, row.PromptTokens, row.CachedTokens, row.OutputTokens = true, r.InputTokens, -1, r.OutputTokens
	}
	row.TTFT, row.TPOT, row.E2E = ms(r.TTFT), ms(r.TPOT()), ms(r.E2E())
	// A speed needs a span of events: with fewer than three (or all in
	// one read) it is one gap's accident, not a decode rate.
	if r.ContentEvents >= 3 {
		row.Speed = r.Speed()
	}
	row.Cost = cost(p, row.PromptTokens, row.CachedTokens, row.OutputTokens)
	row.Met = verdict.Met(slos, func(m string) float64 {
		switch m {
		case "ttft", "ttft_sched":
			return row.TTFT
		case "tpot":
			return row.TPOT
		}
		return row.E2E
	})
	return row
}

// probeOf is the medians of a round's probes that succeeded.
func probeOf(ps []bench.ProbeResult) Probe {
	var ok []Probe
	for _, r := range ps {
		if r.Err == nil {
			ok = append(ok, Probe{DNS: ms(r.DNS), Connect: ms(r.Connect), TLS: ms(r.TLS), Wait: ms(r.Wait), FirstToken: ms(r.FirstToken), TTFT: ms(r.TTFT)})
		}
	}
	p := medianProbe(ok)
	p.N = len(ps)
	return p
}

// medianProbe is the median of each phase of ps, all answered.
func medianProbe(ps []Probe) Probe {
	med := func(phase func(Probe) float64) float64 {
		xs := make([]float64, len(ps))
		for i, p := range ps {
			xs[i] = phase(p)
		}
		return verdict.Median(xs)
	}
	return Probe{N: len(ps), OK: len(ps),
		DNS:        med(func(p Probe) float64 { return p.DNS }),
		Connect:    med(func(p Probe) float64 { return p.Connect }),
		TLS:        med(func(p Probe) float64 { return p.TLS }),
		Wait:       med(func(p Probe) float64 { return p.Wait }),
		FirstToken: med(func(p Probe) float64 { return p.FirstToken }),
		TTFT:       med(func(p Probe) float64 { return p.TTFT })}
}

// fillRound sets the round's request figures from its bench rows.
func fillRound(rd *Round, rows []Request, r int) {
	var ttft, speed []float64
	var spent float64
	for _, q := range rows {
		if q.Round != r || q.Probe {
			continue
		}
		rd.Requests++
		if q.OK {
			rd.OK++
			ttft = append(ttft, q.TTFT)
			if q.Speed > 0 {
				speed = append(speed, q.Speed)
			}
			spent += q.Cost
		}
	}
	rd.TTFTP50, rd.SpeedP50 = verdict.Median(ttft), verdict.Median(speed)
	if rd.OK > 0 {
		rd.CostPerRequest = spent / float64(rd.OK)
	}
}

// warnings says when the endpoints' costs compare different work: answers
// of another length (one stops early, or ignores max_tokens), or counted
// tokens where the server returned no usage.
func warnings(rs []*Result) []string {
	var out []string
	lo, hi := math.Inf(1), 0.0
	var short, long string
	for _, r := range rs {
		f := r.Figures
		if f.OK == 0 {
			continue
		}
		n := float64(f.OutputTokens) / float64(f.OK)
		if n < lo {
			lo, short = n, r.Name
		}
		if n > hi {
			hi, long = n, r.Name
		}
		if f.UsageMissing > 0 {
			out = append(out, fmt.Sprintf("%s returned no usage in %d of %d answers: its tokens and cost are cl100k_base counts, an estimate", r.Name, f.UsageMissing, f.OK))
		}
	}
	if lo > 0 && hi > 1.2*lo {
		out = append(out, fmt.Sprintf("answers differ in length (%s %.1f output tokens a request, %s %.1f): cost per request compares different work; see the cost per M output tokens, or ask for a fixed length", short, lo, long, hi))
	}
	return out
}

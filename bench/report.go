package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteText prints the record as the terminal report: conditions, a
// table per stage, and the sweep curve with its knee.
func (r *Record) WriteText(w io.Writer) {
	c := r.Conditions
	fmt.Fprintf(w, "infergate bench: %s\n", c.URL)
	wl := c.Workload
	what := fmt.Sprintf("%s, model %q, stream=%v", wl.Endpoint, wl.Model, wl.Stream)
	switch {
	case wl.Dataset != "":
		what += ", dataset " + wl.Dataset
	case wl.Replay != "":
		what += fmt.Sprintf(", replay %s ×%g", wl.Replay, wl.Speedup)
	case wl.Trace != "":
		what += fmt.Sprintf(", %s trace %s ×%g", wl.TraceFormat, wl.Trace, wl.Speedup)
		if wl.TraceWindow != "" {
			what += ", window " + wl.TraceWindow
		}
		if wl.TraceSkipped > 0 {
			what += fmt.Sprintf(" (%d failed rows skipped)", wl.TraceSkipped)
		}
	default:
		what += fmt.Sprintf(", input %s tokens", wl.InputTokens)
	}
	if wl.OutputTokens != "" {
		what += fmt.Sprintf(", output %s tokens", wl.OutputTokens)
		if wl.ForceOutputLength {
			what += " (forced)"
		}
	}
	fmt.Fprintf(w, "workload: %s, seed %d\n", what, wl.Seed)
	fmt.Fprintf(w, "load: %s\n", c.LoadText())
	if cache := c.CacheText(); cache != "" {
		fmt.Fprintf(w, "cache: %s\n", cache)
	}
	for _, s := range r.Stages {
		fmt.Fprintln(w)
		s.writeText(w, c.Load.Mode, len(r.Stages) > 1)
	}
	if len(r.Stages) > 1 {
		r.writeSweep(w)
	}
	if r.Paired != nil {
		r.Paired.writeText(w)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warn)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "\nthe run was interrupted: figures cover what finished")
	}
}

func (s *Summary) writeText(w io.Writer, mode string, sweep bool) {
	if sweep {
		fmt.Fprintf(w, "stage %d (level %g)\n", s.Stage, s.Level)
	}
	fmt.Fprintf(w, "requests %d: %d ok, %d failed", s.Requests, s.OK, s.Failed)
	if s.Warmup > 0 {
		fmt.Fprintf(w, " (+%d warm-up, not counted)", s.Warmup)
	}
	if s.Cancelled > 0 {
		fmt.Fprintf(w, " (+%d cancelled)", s.Cancelled)
	}
	fmt.Fprintf(w, " in %.2fs\n", s.Window)
	if s.Primed > 0 {
		fmt.Fprintf(w, "warm pass: %d requests of the same prompts sent first, not counted\n", s.Primed)
	}
	fmt.Fprintf(w, "cached: %s\n", s.CachedText())
	if s.InputTokensServer > 0 {
		fmt.Fprintf(w, "input: %.1f tokens asked (cl100k_base), %.1f by the server's count (%+.1f%%)\n", s.InputTokensAsked, s.InputTokensServer, 100*(s.InputTokensServer/s.InputTokensAsked-1))
	}
	fmt.Fprintf(w, "throughput: %.2f req/s, %.1f output tok/s", s.RequestThroughput, s.OutputTokenThroughput)
	if s.SteadyWindow > 0 {
		fmt.Fprintf(w, " (steady %.1f tok/s over %.1fs)", s.SteadyOutputTokenThroughput, s.SteadyWindow)
	}
	fmt.Fprintln(w)
	if s.RequestedRate > 0 {
		fmt.Fprintf(w, "rate: %.2f req/s sent of %.2f requested\n", s.AchievedRate, s.RequestedRate)
	}
	if len(s.SLOs) > 0 {
		var parts []string
		for _, o := range s.SLOs {
			parts = append(parts, fmt.Sprintf("%s≤%v", o.Metric, time.Duration(o.MaxMs*1e6)))
		}
		fmt.Fprintf(w, "goodput (%s): %.1f%% of requests, %.2f req/s\n", strings.Join(parts, ", "), s.GoodputShare*100, s.Goodput)
	}
	fmt.Fprintf(w, "\n%-18s %8s %10s %10s %10s %10s %10s %10s %10s\n", "metric", "n", "mean", "min", "p50", "p90", "p95", "p99", "max")
	order := []string{"ttft", "ttfo", "reasoning", "reasoning_tokens", "ttft_sched", "send_lag", "ttfb", "first_event", "tpot", "itl", "e2e", "stream_end", "speed", "output_tokens", "tokens_per_event", "server_ttft", "client_added"}
	for _, name := range order {
		p := s.Metrics[name]
		if p == nil || (mode == "closed" && (name == "ttft_sched" || name == "send_lag")) {
			continue
		}
		unit := " ms"
		switch name {
		case "speed":
			unit = " tok/s"
		case "output_tokens", "tokens_per_event", "reasoning_tokens":
			unit = ""
		}
		opt := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f", *v)
		}
		fmt.Fprintf(w, "%-18s %8d %10.2f %10.2f %10.2f %10s %10s %10s %10.2f\n", name+unit, p.N, p.Mean, p.Min, p.P50, opt(p.P90), opt(p.P95), opt(p.P99), p.Max)
	}
	if s.Metrics["gw_ttft"] != nil {
		s.writeAttribution(w)
	}
	if len(s.Turns) > 0 {
		fmt.Fprintf(w, "\nby turn (the context grows by each answer):\n%-6s %6s %8s %12s %12s %12s %14s %8s\n", "turn", "n", "failed", "ttft p50 ms", "ttft p90 ms", "e2e p50 ms", "prompt tokens", "cached")
		turns := s.Turns
		if s.FollowUps != nil {
			turns = append(slices.Clip(turns), *s.FollowUps)
		}
		for _, t := range turns {
			p90, cached := t.optional("%.2f")
			fmt.Fprintf(w, "%-6s %6d %8d %12.2f %12s %12.2f %14.0f %8s\n", t.label(), t.N, t.Failed, t.TTFTP50, p90, t.E2EP50, t.PromptTokensP50, cached)
		}
		if s.FollowUps != nil {
			fmt.Fprintln(w, "(2+: turns 2 and later pooled)")
		}
	}
	s.writeClasses(w)
	if len(s.Errors) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		keys := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-18s %6d  e.g. %.160s\n", k, s.Errors[k], s.ErrorSamples[k])
		}
	}
	q := s.Quality
	fmt.Fprintf(w, "\nquality of %d answers: cut at the output limit %d, empty %d, refusals %d", s.OK, q.FinishLength, q.Empty, q.Refusal)
	if q.LengthByPolicy > 0 {
		fmt.Fprintf(w, ", length at the gateway's output cap %d", q.LengthByPolicy)
	}
	if q.JSONChecked {
		fmt.Fprintf(w, ", invalid JSON %d", q.InvalidJSON)
	}
	if q.SchemaChecked > 0 {
		fmt.Fprintf(w, ", off the schema %d of %d", q.SchemaInvalid, q.SchemaChecked)
	}
	fmt.Fprintln(w)
	if s.UsageMissing > 0 {
		fmt.Fprintf(w, "usage: %d answers came without usage; their tokens were counted with cl100k_base\n", s.UsageMissing)
	}
	if s.UsageMismatch > 0 {
		fmt.Fprintf(w, "usage: %d of %d answers report fewer completion tokens than the content events they came in: the server's usage is wrong\n", s.UsageMismatch, s.UsageChecked)
	}
}

// CachedText says what share of the stage's prompt tokens the server
// reported cached, and over how many answers.
func (s *Summary) CachedText() string {
	if s.CachedShare == nil {
		return "the server reported no cached prompt tokens (no usage.prompt_tokens_details.cached_tokens, no timings.cache_n): the cache state is unknown"
	}
	return fmt.Sprintf("%.1f%% of prompt tokens, by the server's usage (%d answers)", *s.CachedShare*100, s.CachedAnswers)
}

// CacheText says what cache state the run asked for, "" in a record
// made before it was recorded.
func (c *Conditions) CacheText() string {
	switch c.Cache {
	case CacheCold:
		return fmt.Sprintf("cold: seed %d drawn for this run, so the server had seen none of its prompts", c.Workload.Seed)
	case CacheWarm:
		return "warm: each stage's prompts sent once, unmeasured, before the same prompts were measured"
	case CacheSeeded:
		return fmt.Sprintf("seed %d given: the prompts of every run with that seed, which the server may hold (see the cached share)", c.Workload.Seed)
	}
	return ""
}

func (r *Record) writeSweep(w io.Writer) {
	if nk := r.NoKnee(); nk != "" {
		defer fmt.Fprintln(w, nk)
	}
	if r.StopReason != "" {
		defer fmt.Fprintf(w, "sweep stopped: %s\n", r.StopReason)
	}
	fmt.Fprintf(w, "\nsweep (%s)\n%10s %12s %12s %12s %12s %10s\n", r.Conditions.Load.Mode, "level", "req/s", "tok/s", "TTFT p50", "TTFT p99", "failed")
	for i, s := range r.Stages {
		p50, p99 := "-", "-"
		if t := s.Metrics["ttft"]; t != nil {
			p50 = fmt.Sprintf("%.1f ms", t.P50)
			if t.P99 != nil {
				p99 = fmt.Sprintf("%.1f ms", *t.P99)
			}
		}
		mark := ""
		if i == r.Knee {
			mark = "  ← knee: 90% of peak throughput; more load mostly adds latency"
		}
		fmt.Fprintf(w, "%10g %12.2f %12.1f %12s %12s %10d%s\n", s.Level, s.RequestThroughput, s.OutputTokenThroughput, p50, p99, s.Failed, mark)
	}
}

// writeAttribution prints where each request's time went, from the
// gateway's own account: p50 and p90 of each part. The first six make up
// the time to first token; processing and decode run to the end.
func (s *Summary) writeAttribution(w io.Writer) {
	fmt.Fprintf(w, "\nwhere the time went, by the gateway's account (%d requests):\n", s.Metrics["gw_ttft"].N)
	fmt.Fprintf(w, "  %-34s %10s %10s\n", "", "p50", "p90")
	for _, row := range []struct{ key, label string }{
		{"client_network", "client ↔ gateway network"},
		{"gw_queue", "gateway queue"},
		{"gw_processing", "gateway processing (whole request)"},
		{"gw_relay", "  of which relaying events"},
		{"gw_relay_max", "  slowest event read → flush"},
		{"gw_connect", "backend connect"},
		{"gw_network", "gateway ↔ backend network"},
		{"gw_model_ttft", "model: time to first token"},
		{"gw_backend_queue", "  of which backend queue"},
		{"gw_prefill", "  of which prefill"},
		{"gw_decode", "model: decode (first → last token)"},
	} {
		p := s.Metrics[row.key]
		if p == nil {
			continue
		}
		p90 := "-"
		if p.P90 != nil {
			p90 = fmt.Sprintf("%.3f ms", *p.P90)
		}
		fmt.Fprintf(w, "  %-34s %10s %10s\n", row.label, fmt.Sprintf("%.3f ms", p.P50), p90)
	}
}

// LoadText says how the load was offered, in one line: the mode, its
// level or, for a sweep, every level it swept (a sweep's first level is
// in Load too, but no stage ran only that), and how long each stage ran.
func (c *Conditions) LoadText() string {
	l, sweep := c.Load, levelsText(c.Sweep)
	load := l.Mode
	switch {
	case l.Mode == "closed" && sweep != "":
		load += ", concurrency swept over " + sweep
	case l.Mode == "closed":
		load += fmt.Sprintf(", concurrency %d", l.Concurrency)
	case l.Mode == "sessions":
		load += fmt.Sprintf(", %d users in session at once, %d turns each, think time %v", l.Concurrency, c.Workload.Turns, l.ThinkTime)
	case l.Mode == "open" && sweep != "":
		load += fmt.Sprintf(", rate swept over %s req/s %s", sweep, l.Arrival)
	case l.Mode == "open":
		load += fmt.Sprintf(", %g req/s %s", l.Rate, l.Arrival)
	case l.Mode == "replay" && c.Workload.Trace != "":
		load += fmt.Sprintf(", %s trace %s ×%g %s", c.Workload.TraceFormat, c.Workload.Trace, c.Workload.Speedup, c.Workload.TraceWindow)
	case l.Mode == "replay":
		load += fmt.Sprintf(" ×%g", c.Workload.Speedup)
	}
	if l.Mode == "open" && l.MaxConcurrency > 0 {
		load += fmt.Sprintf(", max %d in flight", l.MaxConcurrency)
	}
	if sweep != "" && l.Mode != "closed" && l.Mode != "open" {
		load += ", sweep " + sweep
	}
	if l.Duration > 0 {
		load += fmt.Sprintf(", %v per stage", l.Duration)
	}
	if l.Requests > 0 {
		load += fmt.Sprintf(", %d requests per stage", l.Requests)
	}
	if l.WarmupRequests > 0 || l.WarmupTime > 0 {
		load += fmt.Sprintf(", warm-up %d requests / %v", l.WarmupRequests, l.WarmupTime)
	}
	return load
}

// levelsText is a sweep's levels as "1, 2, 4 … 64 (7 levels)", "" for none.
func levelsText(levels []float64) string {
	if len(levels) == 0 {
		return ""
	}
	s := make([]string, len(levels))
	for i, v := range levels {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprintf("%s (%d levels)", strings.Join(s, ", "), len(levels))
}

package bench

import (
	"math"
	"slices"

	"github.com/infergate/infergate/internal/quantile"
	"github.com/infergate/infergate/verdict"
)

// formulas name how each figure of a Summary is computed; a record
// carries them so its numbers need no outside explanation.
var formulas = map[string]string{
	"ttft":                           "first SSE event whose delta carries non-empty content, reasoning_content, reasoning or tool_calls (a Responses stream: a text, reasoning or function-call delta) − send (a role-only chunk does not count); non-streaming: the whole body",
	"ttfo":                           "reasoning models: first content event that is not thinking (not reasoning_content, reasoning or a Responses reasoning delta) − send; only requests whose model thought first",
	"reasoning":                      "reasoning models: ttfo − ttft, the model's thinking before its first output token",
	"reasoning_tokens":               "usage's completion_tokens_details.reasoning_tokens (the Responses API's output_tokens_details), per request that reports it",
	"ttft_sched":                     "ttft measured from the intended send time (open loop and replay): includes the client's own queueing",
	"ttfb":                           "response headers − send",
	"first_event":                    "first SSE event of any kind − send",
	"tpot":                           "(last content event − first content event) / (output tokens − 1), per request with ≥ 2 tokens",
	"itl":                            "every gap between consecutive content events, pooled over requests",
	"e2e":                            "last content event − send",
	"stream_end":                     "end of the response ([DONE], usage chunk and body end) − send",
	"send_lag":                       "actual send − intended send",
	"speed":                          "per-request output speed: (output tokens − 1) / (last content − first content), tokens/s",
	"output_tokens":                  "usage.completion_tokens when reported, else the answer counted with cl100k_base",
	"prompt_tokens":                  "usage.prompt_tokens, per request that reports it",
	"input_tokens_server":            "mean usage.prompt_tokens (the server's count) of the requests that report it, beside input_tokens_asked, the mean length they asked for in cl100k_base tokens; session turns left out",
	"cached_share":                   "Σ cached prompt tokens / Σ prompt tokens over the answers that report them: usage.prompt_tokens_details.cached_tokens (the Responses API's input_tokens_details), else llama.cpp's timings.cache_n",
	"usage_mismatch":                 "answers whose usage.completion_tokens is below the content events they came in (wrong usage: a server streams at least one token per event)",
	"tokens_per_event":               "output tokens / content events, per request",
	"request_throughput":             "successful requests / (last end − first send), measured requests only",
	"output_token_throughput":        "Σ output tokens / (last end − first send), measured requests only",
	"steady_output_token_throughput": "output tokens produced inside [first send + median e2e, end of sending] / its length; each request's tokens spread evenly between its first and last content event (no ramp, no drain)",
	"goodput":                        "successful requests meeting every SLO (a TPOT not measured, one token, cannot miss; any other latency not measured does), per second of the window; goodput_share (attainment): the same as a share of measured requests",
	"achieved_rate":                  "measured requests sent / (last send − first send)",
	"percentiles":                    quantile.Rule + " (itl: from an HdrHistogram at 3 significant digits)",
}

// Summary is the figures of one stage. Latencies are in milliseconds.
type Summary struct {
	Stage int     `json:"stage"`
	Level float64 `json:"level"` // concurrency or rate
	// Requests counts measured requests that finished (succeeded or
	// failed); Cancelled those cut off by an interrupted run; Warmup the
	// warm-up requests left out.
	Requests  int `json:"requests"`
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled,omitempty"`
	Warmup    int `json:"warmup,omitempty"`
	// Errors counts failures by class (http_503, timeout, ...), with the
	// first message of each class.
	Errors       map[string]int    `json:"errors,omitempty"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Quality      QualityCounts     `json:"quality"`
	// Usage: answers whose usage.completion_tokens is below the number
	// of content events they came in (a server cannot stream more pieces
	// of text than tokens: the usage is wrong), of those checked (every
	// answer with usage and content); and answers without usage.
	UsageChecked  int `json:"usage_checked"`
	UsageMismatch int `json:"usage_mismatch"`
	UsageMissing  int `json:"usage_missing"`
	// InputTokensAsked is the mean prompt length the requests asked for
	// (cl100k_base tokens: --input-tokens, a dataset's counted prompts),
	// InputTokensServer the mean of the same requests' usage.prompt_tokens,
	// the server's own count (its tokenizer, its chat template); both 0
	// when the server reported none. Session turns are left out: their
	// prompt is the whole conversation.
	InputTokensAsked  float64 `json:"input_tokens_asked,omitempty"`
	InputTokensServer float64 `json:"input_tokens_server,omitempty"`
	// CachedShare is the share of prompt tokens the server reported it
	// found cached (usage.prompt_tokens_details.cached_tokens, or
	// llama.cpp's timings.cache_n), over the CachedAnswers answers that
	// reported it; nil when none did. A run's cache state is a condition
	// (CacheDifferences).
	CachedShare   *float64 `json:"cached_share,omitempty"`
	CachedAnswers int      `json:"cached_answers,omitempty"`
	// Primed counts the warm pass's requests (Config.Cache warm), sent
	// before the measured ones and in no figure.
	Primed int `json:"primed,omitempty"`

	OutputTokens int64 `json:"output_tokens"`
	PromptTokens int64 `json:"prompt_tokens,omitempty"`

	Metrics map[string]*Percentiles `json:"metrics"`

	// The measured window, seconds from the stage's start.
	WindowStart float64 `json:"window_start_s"`
	WindowEnd   float64 `json:"window_end_s"`
	Window      float64 `json:"window_s"`

	RequestThroughput           float64 `json:"request_throughput"`
	OutputTokenThroughput       float64 `json:"output_token_throughput"`
	SteadyOutputTokenThroughput float64 `json:"steady_output_token_throughput,omitempty"`
	SteadyWindow                float64 `json:"steady_window_s,omitempty"`

	RequestedRate float64 `json:"requested_rate,omitempty"`
	AchievedRate  float64 `json:"achieved_rate,omitempty"`

	SLOs         SLOs    `json:"slos,omitempty"`
	GoodputShare float64 `json:"goodput_share,omitempty"`
	Goodput      float64 `json:"goodput,omitempty"`

	// Turns is the figures by turn index of a session run (TTFT by turn,
	// the context each turn sent), nil outside sessions.
	Turns []TurnSummary `json:"turns,omitempty"`
	// FollowUps pools turns 2 and later (Turn 0): the turns a prefix
	// cache, or a router that keeps a session where its cache is, should
	// find mostly cached, beside turn 1 in Turns. Nil without them.
	FollowUps *TurnSummary `json:"follow_ups,omitempty"`
	// Classes is the figures by service class of a run with a class mix
	// (Config.Workload.ClassMix), in Classes order, nil without one.
	Classes []ClassSummary `json:"classes,omitempty"`
	// Timeline is one bucket per second of the stage.
	Timeline []Bucket `json:"timeline,omitempty"`
	// Samples are per-request values for comparisons (at most maxSamples
	// each, evenly thinned).
	Samples map[string][]float64 `json:"samples,omitempty"`
	// PerRequest is each successful measured request's latencies (ms) by
	// metric (ttft, ttft_sched in open loop, tpot, e2e), aligned by index,
	// 0 where not measured, so SLOs can be judged after the run (at most
	// maxSamples, evenly thinned at the same indices).
	PerRequest map[string][]float64 `json:"per_request,omitempty"`
}

// QualityCounts are the answers that showed each quality signal, of the
// successful ones.
type QualityCounts struct {
	// JSONChecked is set when some answers were asked for JSON; JSONAsked
	// counts those answers, InvalidJSON the ones that did not parse.
	JSONChecked bool `json:"json_checked,omitempty"`
	JSONAsked   int  `json:"json_asked,omitempty"`
	InvalidJSON int  `json:"invalid_json"`
	// SchemaChecked counts the answers that were JSON and checked against
	// the request's schema, SchemaInvalid those off it.
	SchemaChecked int `json:"schema_checked,omitempty"`
	SchemaInvalid int `json:"schema_invalid,omitempty"`
	// FinishLength counts answers cut at their output limit
	// (quality.Truncated: finish_reason "length", or a Responses answer
	// whose output tokens reached max_output_tokens, which llama.cpp
	// calls completed); LengthByPolicy those cut at a limit a gateway's
	// policy set.
	FinishLength   int `json:"finish_length"`
	LengthByPolicy int `json:"length_by_policy,omitempty"`
	Empty          int `json:"empty"`
	Refusal        int `json:"refusal"`
}

// Bucket is one second of a stage: what ended in it, and the output
// tokens produced in it.
type Bucket struct {
	T float64 `json:"t"`
	// Sent counts the requests sent in the second: beside Completed, the
	// slices show a queue building (more sent than completed) or draining.
	Sent         int     `json:"sent"`
	Completed    int     `json:"completed"`
	Failed       int     `json:"failed"`
	OutputTokens float64 `json:"output_tokens"`
	TTFTP50      float64 `json:"ttft_p50,omitempty"`
	TTFTP90      float64 `json:"ttft_p90,omitempty"`
}

const maxSamples = 100000

// Summarize computes stage n's summary. level is its concurrency or rate;
// win the window the runner reported.
func (c *Collector) Summarize(n int, l LoadSpec, win Window, slos []verdict.SLO) *Summary {
	c.mu.Lock()
	sd := c.stage(n)
	rows := slices.Clone(sd.rows)
	itl := distPercentiles(sd.itl)
	s := &Summary{Stage: n, Level: l.Level(), Errors: map[string]int{}, ErrorSamples: map[string]string{}, Metrics: map[string]*Percentiles{},
		Cancelled: sd.cancelled, Warmup: sd.warmup, SLOs: slos}
	for k, v := range sd.errors {
		s.Errors[k] = v
	}
	for k, v := range sd.errSample {
		s.ErrorSamples[k] = v
	}
	s.Primed = sd.primed
	exact := sd.seen // rows may be a reservoir of it
	begin := sd.begin
	reasons := slices.Clone(c.reasons)
	c.mu.Unlock()

	s.Quality.JSONChecked = false
	vals := map[string][]float64{}
	add := func(k string, v float64) { vals[k] = append(vals[k], v) }
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	var first, lastEnd, lastSend int64 = math.MaxInt64, 0, 0
	met, vslos, perReq := 0, slos, map[string][]float64{}
	var asked, served float64
	var cache verdict.CacheTally
	inputs := 0
	for i := range rows {
		w := &rows[i]
		s.Requests++
		first = min(first, w.sent)
		lastSend = max(lastSend, w.sent)
		lastEnd = max(lastEnd, w.sent+w.end)
		if l.Mode != "closed" {
			add("send_lag", ms(w.lag))
		}
		if !w.ok {
			s.Failed++
			continue
		}
		s.OK++
		s.OutputTokens += int64(w.out)
		if w.prompt > 0 {
			s.PromptTokens += int64(w.prompt)
			add("prompt_tokens", float64(w.prompt))
		}
		if w.jsonAsked {
			s.Quality.JSONChecked = true
			s.Quality.JSONAsked++
		}
		if w.invalidJSON {
			s.Quality.InvalidJSON++
		}
		if w.schemaAsked {
			s.Quality.SchemaChecked++
		}
		if w.schemaInvalid {
			s.Quality.SchemaInvalid++
		}
		if w.finishLength {
			s.Quality.FinishLength++
		}
		if w.lengthByPolicy {
			s.Quality.LengthByPolicy++
		}
		if w.empty {
			s.Quality.Empty++
		}
		if w.refusal {
			s.Quality.Refusal++
		}
		if w.usage < 0 {
			s.UsageMissing++
		} else if w.events > 0 {
			s.UsageChecked++
			if w.usage < w.events {
				s.UsageMismatch++
			}
		}
		if w.prompt > 0 && w.turn == 0 && w.input > 0 {
			asked += float64(w.input)
			served += float64(w.prompt)
			inputs++
		}
		cache.Add(int(w.prompt), int(w.cached))
		add("ttfb", ms(w.ttfb))
		add("e2e", ms(w.e2e()))
		add("stream_end", ms(w.end))
		add("output_tokens", float64(w.out))
		if w.first > 0 {
			add("first_event", ms(w.first))
		}
		if w.ttft > 0 {
			add("ttft", ms(w.ttft))
			add("ttft_sched", ms(w.ttft+w.lag))
		}
		if w.ttfo > 0 && w.ttft > 0 {
			add("ttfo", ms(w.ttfo))
			add("reasoning", ms(w.ttfo-w.ttft))
		}
		if w.reasoning >= 0 {
			add("reasoning_tokens", float64(w.reasoning))
		}
		if g := w.gw; g != nil && w.ttft > 0 {
			if g.Reasoning > 0 {
				add("gw_ttfo", g.TTFO)
				add("gw_reasoning", g.Reasoning)
			}
			add("gw_ttft", g.TTFT)
			add("client_network", max(0, ms(w.ttft)-g.TTFT))
			add("gw_queue", g.Queue)
			add("gw_processing", g.Gateway)
			add("gw_relay", g.Relay)
			add("gw_relay_max", g.RelayMax)
			add("gw_connect", g.Connect)
			add("gw_network", g.Network)
			add("gw_model_ttft", g.ModelTTFT)
			add("gw_decode", g.Decode)
			if b := g.Backend; b != nil {
				if b.Queue != nil {
					add("gw_backend_queue", *b.Queue)
				}
				if b.Prefill != nil {
					add("gw_prefill", *b.Prefill)
				}
			}
		}
		if w.server > 0 && w.ttft > 0 {
			add("server_ttft", ms(w.server))
			add("client_added", ms(w.ttft-w.server))
		}
		if w.out >= 2 && w.last > w.ttft {
			add("tpot", ms(w.metric("tpot")))
			add("speed", float64(w.out-1)/(float64(w.last-w.ttft)/1e9))
		}
		if w.events > 0 {
			add("tokens_per_event", float64(w.out)/float64(w.events))
		}
		if len(vslos) > 0 && w.met(vslos) {
			met++
		}
		for _, m := range verdict.SLOMetrics {
			if m != "ttft_sched" || l.Mode != "closed" {
				perReq[m] = append(perReq[m], ms(w.metric(m)))
			}
		}
	}
	for k, v := range vals {
		s.Metrics[k] = percentiles(v)
	}
	if inputs > 0 {
		s.InputTokensAsked, s.InputTokensServer = asked/float64(inputs), served/float64(inputs)
	}
	s.CachedShare, s.CachedAnswers = cache.Share(), cache.Answers()
	if itl != nil {
		s.Metrics["itl"] = itl
	}
	// Counts scale from the reservoir to the exact total.
	scale := 1.0
	if exact > int64(len(rows)) && len(rows) > 0 {
		scale = float64(exact) / float64(len(rows))
	}
	if s.Requests == 0 {
		return s
	}
	s.WindowStart, s.WindowEnd = float64(first)/1e9, float64(lastEnd)/1e9
	s.Window = s.WindowEnd - s.WindowStart
	if s.Window > 0 {
		s.RequestThroughput = float64(s.OK) * scale / s.Window
		s.OutputTokenThroughput = float64(s.OutputTokens) * scale / s.Window
	}
	if len(slos) > 0 {
		s.GoodputShare = float64(met) / float64(s.Requests)
		if s.Window > 0 {
			s.Goodput = float64(met) * scale / s.Window
		}
	}
	if l.Mode != "closed" && lastSend > first {
		s.RequestedRate = l.Rate
		s.AchievedRate = float64(s.Requests-1) / (float64(lastSend-first) / 1e9)
	}
	// Steady state: from one median request after the first send (the
	// pipeline is full) to the end of sending (the drain begins).
	if e2e := s.Metrics["e2e"]; e2e != nil && !win.Stop.IsZero() {
		from := first + int64(e2e.P50*1e6)
		to := win.Stop.Sub(begin).Nanoseconds()
		if to > from {
			tok := 0.0
			for i := range rows {
				tok += rows[i].tokensIn(from, to)
			}
			s.SteadyWindow = float64(to-from) / 1e9
			s.SteadyOutputTokenThroughput = tok * scale / s.SteadyWindow
		}
	}
	s.Timeline = timeline(rows, scale)
	s.Turns, s.FollowUps = turnSummaries(rows)
	s.Classes = classSummaries(rows, reasons, slos)
	s.Samples = map[string][]float64{}
	for _, k := range []string{"ttft", "ttft_sched", "tpot", "e2e", "speed"} {
		s.Samples[k] = verdict.Thin(vals[k], maxSamples)
	}
	if v := vals["ttfo"]; len(v) > 0 { // a reasoning model's, for a later comparison
		s.Samples["ttfo"] = verdict.Thin(v, maxSamples)
	}
	s.PerRequest = map[string][]float64{}
	for k, v := range perReq {
		s.PerRequest[k] = verdict.Thin(v, maxSamples) // the same indices in every column
	}
	if len(s.Errors) == 0 {
		s.Errors, s.ErrorSamples = nil, nil
	}
	return s
}

// timeline buckets the stage by second.
func timeline(rows []row, scale float64) []Bucket {
	var last int64
	for i := range rows {
		last = max(last, rows[i].sent+rows[i].end)
	}
	n := int(last/1e9) + 1
	if n > 24*3600 {
		return nil
	}
	out := make([]Bucket, n)
	ttfts := make([][]float64, n)
	for i := range out {
		out[i].T = float64(i)
	}
	for i := range rows {
		w := &rows[i]
		if k := int(w.sent / 1e9); k >= 0 && k < n {
			out[k].Sent++
		}
		b := int((w.sent + w.end) / 1e9)
		if !w.ok {
			out[b].Failed++
			continue
		}
		out[b].Completed++
		if w.ttft > 0 {
			tb := int((w.sent + w.ttft) / 1e9)
			ttfts[tb] = append(ttfts[tb], float64(w.ttft)/1e6)
		}
		for k := int((w.sent + w.ttft) / 1e9); k <= b && k < n; k++ {
			out[k].OutputTokens += w.tokensIn(int64(k)*1e9, int64(k+1)*1e9) * scale
		}
	}
	for i, t := range ttfts {
		if p := percentiles(t); p != nil {
			out[i].TTFTP50 = p.P50
			if p.P90 != nil {
				out[i].TTFTP90 = *p.P90
			}
		}
	}
	return out
}

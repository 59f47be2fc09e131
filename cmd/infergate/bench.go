package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/httpurl"
	"github.com/infergate/infergate/verdict"
	"golang.org/x/term"
)

const benchSynopsis = `bench --url URL [--model M] [workload] [load] [--out run.json] [--html run.html] [--csv requests.csv]

Measures an OpenAI-compatible server under fixed conditions and saves a
record that 'infergate compare' can judge a later run against.

Workload: synthetic prompts of an exact length in cl100k_base tokens
(--input-tokens, --output-tokens: N, uniform:MIN-MAX or normal:MEAN,SD),
unique per request unless --shared-prefix (one prefix for all) or
--prefix-groups G --prefix-tokens P (G tenants' system prompts); or --dataset FILE.jsonl (OpenAI
requests or ShareGPT conversations, sampled with --seed); or --replay
LOG.jsonl (a request log, sent at its original times / --speedup); or
--trace FILE (a public trace: Mooncake, Azure or BurstGPT, on its own
timestamps / --trace-speedup, within --trace-window).

Load: closed loop with --concurrency N users (default), or open loop with
--rate R requests/s (--arrival poisson|constant|gamma, --burstiness,
--max-concurrency), or --sessions N users in multi-turn conversations
(--turns T, --think-time D: each turn carries the conversation so far;
figures by turn and for turns 2+ pooled; --session-key prompt_cache_key
or header:x-session-id names each session to a router; --prefix-groups
gives sessions system prompts, --tools a tool list: an agent's shape). --sweep 1,2,4,8 runs one stage per level and marks the
knee. Every stage is bounded by --duration and/or --requests; --warmup
(a count, or a duration such as 5s) is left out of every figure.

Cache: a server with a prefix cache answers prompts it has seen faster.
Each run draws a fresh --seed (recorded), so its prompts are ones the
server has not seen (a dataset's or a request log's text is tagged with
it); --seed N repeats a run's prompts exactly, and the server may hold
them; --cache warm sends each stage's prompts once, unmeasured, before
measuring them. Every stage reports the share of prompt tokens the server
reported cached; compare refuses runs whose shares differ.

Latency in open loop is reported from the intended send time too
(ttft_sched) with the send lag, so client-side queueing cannot hide.`

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// benchFlags are the flags bench shares with demo.
type benchFlags struct {
	url, model, endpoint               *string
	noStream, force, json              *bool
	input, output                      *string
	shared, prefixGroups, prefixTokens *int
	seed                               *uint64
	cache                              *string
	dataset, replay                    *string
	trace, traceFormat, traceWindow    *string
	sessions, turns, tools             *int
	sessionKey                         *string
	classMix                           *string
	noSweepStop                        *bool
	thinkTime                          *time.Duration
	speedup                            *float64
	load                               *string
	concurrency                        *int
	rate, burstiness                   *float64
	arrival                            *string
	maxConc                            *int
	sweep                              *string
	duration                           *time.Duration
	requests                           *int
	warmup                             *string
	rampUp, timeout                    *time.Duration
	slo, sloPct                        *string
	headers, refusals                  stringList
	apiKey                             *string
	allowPlainKey                      *bool
	insecure, quiet, gwTiming          *bool
	out, html, csv, events             *string
	cpuprofile, memprofile             *string
	directURL                          *string
	gwAdmin, gwAdminKey                *string
	pairs                              *int
}

func registerBenchFlags(fs *flag.FlagSet) *benchFlags {
	f := &benchFlags{}
	f.url = fs.String("url", "", "server base URL (http://host:8000, .../v1) or full endpoint (.../v1/chat/completions)")
	f.model = fs.String("model", "", "model name (default: the first of GET /v1/models)")
	f.endpoint = fs.String("api", "", "the API to send: chat, completions or responses (the Responses API) (default chat)")
	fs.Var(aliasFlag{fs.Lookup("api")}, "endpoint", "the same as --api")
	f.noStream = fs.Bool("no-stream", false, "send stream:false (TTFT is then the whole answer)")
	f.input = fs.String("input-tokens", "", "prompt length in tokens: N, uniform:MIN-MAX or normal:MEAN,SD (default 256)")
	f.output = fs.String("output-tokens", "", "max_tokens: N, uniform:MIN-MAX, normal:MEAN,SD, or none to leave it unset (default 128; with --dataset or --replay, as each request has it)")
	f.shared = fs.Int("shared-prefix", 0, "tokens every prompt shares at its start (tests a prefix cache); 0: unique prompts")
	f.prefixGroups = fs.Int("prefix-groups", 0, "split requests among G tenants, each with its own system prompt of --prefix-tokens tokens before --input-tokens of question (tests prefix-aware routing)")
	f.prefixTokens = fs.Int("prefix-tokens", 0, "with --prefix-groups: tokens of each group's system prompt")
	f.force = fs.Bool("force-output-length", false, "send ignore_eos and min_tokens = max_tokens (vLLM) and warn when lengths differ")
	f.json = fs.Bool("json-workload", false, "ask for response_format json_object and count answers that are not JSON")
	f.seed = fs.Uint64("seed", 0, "seed of prompts, sampling and arrivals; repeats a run's prompts exactly, which the server may hold (default: a fresh one per run, recorded)")
	f.cache = fs.String("cache", "", "the server's prefix cache as the run finds it: cold (prompts it has not seen: a fresh seed; not with --seed) or warm (each stage's prompts sent once, unmeasured, first) (default cold, or as --seed leaves it)")
	f.dataset = fs.String("dataset", "", "JSONL of OpenAI requests or ShareGPT conversations")
	f.replay = fs.String("replay", "", "request log (JSONL with time, and body or input_tokens/output_tokens) to replay")
	f.speedup = fs.Float64("speedup", 0, "replay (or --trace) this many times faster than recorded (default 1)")
	fs.Var(aliasFlag{fs.Lookup("speedup")}, "trace-speedup", "the same as --speedup")
	f.trace = fs.String("trace", "", "public trace to replay on its own timestamps: Mooncake JSONL, an Azure LLM inference CSV or BurstGPT's CSV")
	f.traceFormat = fs.String("trace-format", "", "mooncake, azure or burstgpt (default: sniffed from the file)")
	f.traceWindow = fs.String("trace-window", "", "FROM:TO of the trace to send, from its first request (e.g. 60s:120s, or seconds; either side may be empty)")
	f.load = fs.String("load", "", "closed, open or sessions (default: open when --rate is given, sessions with --sessions)")
	f.sessions = fs.Int("sessions", 0, "multi-turn sessions: this many users in conversation at once (each keeps its history, appends the answers)")
	f.turns = fs.Int("turns", 0, "user turns per session (default 3; with a ShareGPT --dataset, its conversations' turns)")
	f.thinkTime = fs.Duration("think-time", 0, "a session user's pause between an answer and its next turn")
	f.sessionKey = fs.String("session-key", "", "how each session names itself to a router, the same key every turn, fresh keys each run: none, prompt_cache_key (in the body) or header:NAME (e.g. header:x-session-id) (default none)")
	f.classMix = fs.String("class-mix", "", "send OpenAI's service_tier on each request, drawn by the seed from these shares, and report each class: e.g. priority=0.2,default=0.5,flex=0.3 (classes priority, default, flex, auto; weights normalised)")
	f.tools = fs.Int("tools", 0, "send this many function definitions in every request's tools array, the same for the whole run (an agent's tool list, ~100 tokens each)")
	f.concurrency = fs.Int("concurrency", 0, "closed loop: virtual users (default 1)")
	f.rate = fs.Float64("rate", 0, "open loop: requests per second")
	f.arrival = fs.String("arrival", "", "open loop arrivals: poisson, constant or gamma (default poisson)")
	f.burstiness = fs.Float64("burstiness", 0, "gamma arrivals: shape (<1 burstier, >1 more regular; default 1)")
	f.maxConc = fs.Int("max-concurrency", 0, "open loop: cap on requests in flight (0: none)")
	f.sweep = fs.String("sweep", "", "levels, one stage each: concurrencies (closed) or rates (open), e.g. 1,2,4,8,16; it stops itself once over-saturated (throughput flat, TTFT growing)")
	f.noSweepStop = fs.Bool("no-sweep-stop", false, "run every --sweep level, past over-saturation too")
	f.duration = fs.Duration("duration", 0, "measured time per stage (default 30s when --requests is not given)")
	f.requests = fs.Int("requests", 0, "measured requests per stage")
	f.warmup = fs.String("warmup", "auto", "warm-up per stage, left out: a request count, a duration (5s), or auto (closed: one per user; open: 2s)")
	f.rampUp = fs.Duration("ramp-up", 0, "closed loop and sessions: spread the users' first requests over this span")
	f.timeout = fs.Duration("timeout", 0, "bound on one request (default 10m)")
	f.slo = fs.String("slo", "", "objectives for goodput and attainment, e.g. ttft=2s,tpot=50ms (ttft, ttft_sched, tpot, e2e); the record carries them and compare judges by them")
	f.sloPct = fs.String("slo-percentile", "p90", "with --slo: the share of requests that must meet each SLO")
	fs.Var(&f.headers, "H", "extra header 'Name: value' (repeatable)")
	fs.Var(&f.refusals, "refusal", "regular expression of a refusal (repeatable; default: common English refusals)")
	f.apiKey = fs.String("api-key", "", "bearer token (default $OPENAI_API_KEY), sent to --url and --direct-url only")
	f.allowPlainKey = fs.Bool("allow-plaintext-key", false, "send the API key over plain HTTP to a host off this machine")
	f.insecure = fs.Bool("insecure", false, "accept any TLS certificate")
	f.quiet = fs.Bool("quiet", false, "no progress bar (it is off anyway when stderr is not a terminal)")
	f.directURL = fs.String("direct-url", "", "the backend behind the gateway at --url: after the run, send --pairs requests through both, paired, and print the gateway's added TTFT and end-to-end time")
	f.pairs = fs.Int("pairs", 0, "with --direct-url: request pairs, one at a time (default 50)")
	f.gwAdmin = fs.String("admin", "", "the admin listener of the infergate gateway at --url (serve --admin-listen): the record carries the gateway's settings, so compare says what changed")
	f.gwAdminKey = fs.String("admin-key", "", "with --admin: its server.admin_auth key")
	f.gwTiming = fs.Bool("gateway-timing", false, "ask an infergate gateway for its timeline (X-Infergate-Timing) and print where the TTFT went")
	f.out = fs.String("out", "", "write the run record (JSON) here")
	f.html = fs.String("html", "", "write an HTML report with charts here")
	f.csv = fs.String("csv", "", "write one CSV row per request here, as they finish")
	f.events = fs.String("events", "", "write one JSON line per request with every content event's time here")
	f.cpuprofile = fs.String("cpuprofile", "", "write a CPU profile (pprof) of the load generator here")
	f.memprofile = fs.String("memprofile", "", "write an allocation profile (pprof) here at exit")
	return f
}

// config turns the flags into a bench.Config; set says which flags were given.
func (f *benchFlags) config(set map[string]bool, stderr io.Writer) (bench.Config, error) {
	cfg := bench.Config{URL: *f.url, Refusals: f.refusals, InsecureSkipVerify: *f.insecure, Cache: *f.cache, Log: stderr}
	cfg.Workload = bench.WorkloadSpec{Endpoint: *f.endpoint, Model: *f.model, Stream: !*f.noStream, InputTokens: *f.input, OutputTokens: *f.output,
		SharedPrefix: *f.shared, PrefixGroups: *f.prefixGroups, PrefixTokens: *f.prefixTokens, ForceOutputLength: *f.force, JSON: *f.json, Seed: *f.seed, Dataset: *f.dataset, Replay: *f.replay, Speedup: *f.speedup,
		Trace: *f.trace, TraceFormat: *f.traceFormat, TraceWindow: *f.traceWindow, Turns: *f.turns,
		SessionKey: *f.sessionKey, Tools: *f.tools, ClassMix: *f.classMix}
	if set["output-tokens"] && *f.output == "" {
		cfg.Workload.OutputTokens = "none" // --output-tokens "": leave max_tokens unset, as before "none"
	}
	cfg.Load = bench.LoadSpec{Mode: *f.load, Concurrency: *f.concurrency, Rate: *f.rate, Arrival: *f.arrival, Burstiness: *f.burstiness,
		MaxConcurrency: *f.maxConc, Duration: *f.duration, Requests: *f.requests, RampUp: *f.rampUp, Timeout: *f.timeout, ThinkTime: *f.thinkTime}
	if *f.sessions > 0 {
		if cfg.Load.Mode != "" && cfg.Load.Mode != "sessions" {
			return cfg, fmt.Errorf("--sessions with --load %s: a session run is its own mode", cfg.Load.Mode)
		}
		cfg.Load.Mode, cfg.Load.Concurrency = "sessions", *f.sessions
	}
	if *f.sweep != "" {
		levels, err := bench.ParseSweep(*f.sweep)
		if err != nil {
			return cfg, err
		}
		cfg.Sweep = levels
	}
	cfg.DirectURL, cfg.Pairs = *f.directURL, *f.pairs
	cfg.NoSweepStop = *f.noSweepStop
	cfg.GatewayAdmin, cfg.GatewayAdminKey = withScheme(*f.gwAdmin), *f.gwAdminKey
	// The warm-up flag's "auto" depends on the mode the defaults decide.
	cfg.Defaults()
	if err := cfg.Load.SetWarmup(*f.warmup); err != nil {
		return cfg, err
	}
	slos, err := verdict.ParseSLOs(*f.slo)
	if err != nil {
		return cfg, err
	}
	cfg.SLOs = slos
	if len(slos) > 0 {
		if cfg.SLOPercentile, err = verdict.ParsePercentile(*f.sloPct); err != nil {
			return cfg, fmt.Errorf("--slo-percentile: %w", err)
		}
	}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return cfg, fmt.Errorf("-H %q: want 'Name: value'", h)
		}
		cfg.Headers = append(cfg.Headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	if *f.gwTiming {
		cfg.Headers = append(cfg.Headers, [2]string{"X-Infergate-Timing", "1"})
	}
	auth, err := apiKeyHeader(*f.apiKey, *f.allowPlainKey, stderr, cfg.URL, cfg.DirectURL)
	if err != nil {
		return cfg, err
	}
	cfg.Headers = append(cfg.Headers, auth...)
	return cfg, nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchSynopsis, stderr)
	f := registerBenchFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *f.url == "" {
		return errors.New("--url is required (try 'infergate demo' for a run against the built-in simulator)")
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	cfg, err := f.config(set, stderr)
	if err != nil {
		return err
	}
	if cfg.Workload.Model == "" && cfg.Workload.Dataset == "" && cfg.Workload.Replay == "" {
		m, err := firstModel(ctx, cfg.URL, cfg.Headers)
		if err != nil {
			return err
		}
		cfg.Workload.Model = m
	}
	_, err = benchRun(ctx, cfg, f, stdout, stderr)
	return err
}

// benchRun runs cfg, prints the report and writes the requested files.
func benchRun(ctx context.Context, cfg bench.Config, f *benchFlags, stdout, stderr io.Writer) (*bench.Record, error) {
	var closers []func() error
	open := func(path string) (io.Writer, error) {
		if path == "" {
			return nil, nil
		}
		fh, err := createPrivate(path)
		if err != nil {
			return nil, err
		}
		closers = append(closers, fh.Close)
		return fh, nil
	}
	var err error
	if cfg.CSV, err = open(*f.csv); err != nil {
		return nil, err
	}
	if cfg.Events, err = open(*f.events); err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	stopProfiles, err := startProfiles(*f.cpuprofile, *f.memprofile, stderr)
	if err != nil {
		return nil, err
	}
	defer stopProfiles()
	// With a thousand streams or more the heap is mostly open streams and
	// little garbage: collecting at +50% rather than +100% keeps the peak
	// per stream small at a CPU cost within noise (docs/benchmarks-log.md,
	// "2026-12-02: The load generator (issue 4)"). Below
	// that, CPU matters more. GOGC in the environment still decides.
	if os.Getenv("GOGC") == "" && maxInFlight(cfg) >= 1000 {
		debug.SetGCPercent(50)
	}
	if fh, ok := stderr.(*os.File); ok && !*f.quiet && term.IsTerminal(int(fh.Fd())) {
		cfg.Progress = stderr
	}
	rec, runErr := bench.Run(ctx, cfg)
	if rec == nil {
		return nil, runErr
	}
	rec.WriteText(stdout)
	if *f.out != "" {
		if err := rec.Save(*f.out); err != nil {
			return rec, err
		}
		fmt.Fprintf(stdout, "\nrecord: %s\n", *f.out)
	}
	if *f.html != "" {
		fh, err := createPrivate(*f.html)
		if err != nil {
			return rec, err
		}
		err = rec.WriteHTML(fh)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return rec, err
		}
		fmt.Fprintf(stdout, "report: %s\n", *f.html)
	}
	return rec, runErr
}

// firstModel asks the server for its models and returns the first, for
// a command run without --model; its error says why there is none.
func firstModel(ctx context.Context, base string, headers [][2]string) (string, error) {
	if _, err := httpurl.Parse(base); err != nil {
		return "", fmt.Errorf("--url %w", err)
	}
	ms, err := bench.ListModels(ctx, base, headers)
	if err != nil {
		return "", fmt.Errorf("--model not given and %w", err)
	}
	return ms[0], nil
}

// maxInFlight is the most requests a run may hold open at once, as far as
// its settings say (an open loop without a cap: its rate).
func maxInFlight(cfg bench.Config) int {
	n := 0
	levels := cfg.Sweep
	if len(levels) == 0 {
		levels = []float64{cfg.Load.Level()}
	}
	for _, l := range levels {
		n = max(n, int(l))
	}
	if cfg.Load.Mode != "closed" && cfg.Load.MaxConcurrency > 0 {
		n = cfg.Load.MaxConcurrency
	}
	return n
}

// aliasFlag is a second name for a flag: setting it sets the other.
type aliasFlag struct{ f *flag.Flag }

func (a aliasFlag) String() string {
	if a.f == nil {
		return ""
	}
	return a.f.Value.String()
}
func (a aliasFlag) Set(v string) error { return a.f.Value.Set(v) }

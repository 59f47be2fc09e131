package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/diagnose"
	"github.com/infergate/infergate/internal/svgchart"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/mirror/ab"
	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/tune"
	"github.com/infergate/infergate/verdict"
)

const demoSynopsis = `demo [--preset NAME] [--rate R] [--duration D] [--slo ttft=2s,tpot=50ms] [--quality-tolerance 2%] [--dir DIR] [--no-mirror]

The workflow in one command, with no setup, ending in decisions the
measurements support. It starts a simulator (a continuous-batching server
with vLLM's behaviour and metrics; by default the memory-bound preset, a
server whose KV cache is too small for its load) and the gateway in this
process on loopback ports, then:

  1. tune (infergate tune): a baseline through the gateway in open loop
     at --rate requests/s, above what the server can serve, judged at the
     SLOs (--slo, p90), sized so the 2-point quality tolerance can be
     settled from the answers (292 requests, unless --requests or
     --duration says more); a diagnosis of the gateway's and the server's
     metrics; then the concurrency cap the diagnosis proposes, re-measured
     at the same load and kept or rolled back through the gateway's
     configuration history as the verdict at the SLOs says;
  2. the next knob, which only the server owns: a shadow test of a
     quantized build (a second simulator posing as int4: faster decode,
     more malformed JSON, refusals and truncation), judged on the same
     requests (infergate ab report): quality is a veto;
  3. a shadow test of a build with a larger KV-cache share (the same
     model, four times the cache), judged on goodput at the SLOs.

Steps 2 and 3 run behind what step 1 left in force, and say so. The
output ends with one line per decision (== decisions), which
scripts/demo-repeat.sh tabulates over repeated runs.

Every record, the journal and a self-contained HTML report of each step
go to --dir (default: a new folder under the system's temporary folder,
named at the end). --no-mirror leaves steps 2 and 3 out. Bench's workload
and load flags apply to every measurement; the ones that name a server or
a file of bench's own (--url, --admin, --out, --html, --csv, --events) are
refused: the demo runs its own gateway and writes to --dir.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	preset := fs.String("preset", "memory-bound", "simulator preset: "+fmt.Sprint(sim.Presets()))
	noMirror := fs.Bool("no-mirror", false, "leave out the shadow tests of candidate builds")
	dir := fs.String("dir", "", "folder for the records and reports (default: a new one under the temporary folder)")
	qualityTol := fs.String("quality-tolerance", "2%", "accepted rise of a quality rate, in points; every measurement is sized to settle it")
	f := registerBenchFlags(fs)
	demoFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	qt, err := percent(*qualityTol)
	if err != nil {
		return fmt.Errorf("--quality-tolerance: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := notTheDemos(set); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	out := *dir
	if out == "" {
		d, err := os.MkdirTemp("", "infergate-demo-")
		if err != nil {
			return err
		}
		out = d
	} else if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}

	scfg, err := sim.Preset(*preset)
	if err != nil {
		return err
	}
	simURL, stopSim, err := startSim(scfg, log)
	if err != nil {
		return err
	}
	defer stopSim()
	gcfg := quickConfig("127.0.0.1:0", simURL, "/health")
	g, err := proxy.New(gcfg, log)
	if err != nil {
		return err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: gateway: %w", err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gln.Close()
		return fmt.Errorf("demo: gateway admin: %w", err)
	}
	go g.Serve(gln)
	go g.ServeAdmin(aln)
	defer shutdownWithin(g.Shutdown, 2*time.Second)
	gwURL, adminURL := "http://"+gln.Addr().String(), "http://"+aln.Addr().String()
	fmt.Fprintf(stdout, "demo: a simulated inference server (%s preset) at %s, the infergate gateway in front of it at %s (admin %s)\n\n",
		*preset, simURL, gwURL, adminURL)

	// The demo's own defaults, where the flags were not given: open loop
	// above what the memory-bound server serves, the SLOs an interactive
	// chat would set.
	if !set["url"] {
		*f.url = gwURL
	}
	if !set["concurrency"] && !set["rate"] && !set["sweep"] {
		*f.load, *f.rate = "open", 24
	}
	opts := verdict.Options{QualityTolerance: qt}
	opts.Defaults()
	if !set["duration"] && !set["requests"] {
		// As many requests as settle the quality tolerance from the
		// answers a judged run will have, refused ones left out (tune
		// says so as it starts).
		_, size := tune.SizeLoad(bench.LoadSpec{Mode: "open"}, opts.QualityTolerance)
		*f.requests = size.Requests
	}
	if !set["warmup"] {
		*f.warmup = "500ms"
	}
	if !set["output-tokens"] {
		*f.output = "64"
	}
	if !set["model"] {
		*f.model = scfg.Model
	}
	if !set["slo"] {
		*f.slo = "ttft=2s,tpot=50ms"
	}
	if !set["gateway-timing"] {
		*f.gwTiming = true
	}
	*f.quiet = true
	cfg, err := f.config(set, stderr)
	if err != nil {
		return err
	}
	rs, err := bench.Probe(ctx, bench.ProbeConfig{URL: gwURL + "/v1/chat/completions", Stream: true, N: 5,
		Body: fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"stream":true}`, scfg.Model)})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "one request at a time first, to see where a single request's time goes:")
	bench.WriteProbe(stdout, gwURL+"/v1/chat/completions", rs)

	// 1. The loop, walked by tune: baseline, diagnosis, the cap.
	obj := verdict.Objective{SLOs: cfg.SLOs, Percentile: cfg.SLOPercentile}
	step(stdout, 1, "tune: baseline, diagnosis and the gateway's own knob, judged at %s", obj.String())
	// The budget is generous: the plan is bounded by its two steps, and a
	// busy machine must not cut the second one short.
	pages := &pageSet{dir: out, title: "infergate demo (" + *preset + " preset)"}
	res, err := tune.Run(ctx, tune.Config{Admin: adminURL, Bench: cfg, Options: verdict.Options{Objective: obj, QualityTolerance: qt},
		Knobs: []string{tune.KnobCap}, Budget: 4 * time.Minute, MaxSteps: 2, Backends: []string{simURL + "/metrics"},
		Dir: out, Journal: filepath.Join(out, "tune-journal.jsonl"), Out: stdout})
	if res != nil {
		res.WriteSummary(stdout)
		if err := pages.tune(res, "1-tune.html", "1. tune: baseline, diagnosis and the gateway's cap", "2-diagnose.html"); err != nil {
			return err
		}
		if res.Report != nil {
			if err := saveDiagnosis(out, res.Report); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	decisions := tuneDecisions(res)
	if !*noMirror {
		// 2. The server's knobs, shadow-tested on live traffic, behind
		// whatever tune left in force.
		sh := shadow{g: g, log: log, f: f, set: set, stdout: stdout, stderr: stderr, pages: pages, obj: obj, tol: opts.QualityTolerance, inForce: inForce(res)}
		int4 := scfg
		if err := int4.ApplyVariant("int4"); err != nil {
			return err
		}
		v, err := sh.run(ctx, int4, "int4", 2, "a quantized build (int4)", true)
		if err != nil {
			return err
		}
		decisions = append(decisions, fmt.Sprintf("shadow int4: %s (behind %s)", v, sh.inForce))
		kv := scfg
		kv.Engine.KVCacheTokens *= 4
		v, err = sh.run(ctx, kv, "kv-share", 3, fmt.Sprintf("a larger KV-cache share (the same model, %d tokens of cache instead of %d)", kv.Engine.KVCacheTokens, scfg.Engine.KVCacheTokens), false)
		if err != nil {
			return err
		}
		decisions = append(decisions, fmt.Sprintf("shadow kv-share: %s (behind %s)", v, sh.inForce))
	}
	// One line per decision, in a fixed form (scripts/demo-repeat.sh
	// tabulates them over runs).
	fmt.Fprintf(stdout, "\n== decisions\n")
	for _, d := range decisions {
		fmt.Fprintf(stdout, "%s\n", d)
	}
	fmt.Fprintf(stdout, "\nrecords and reports: %s\nstart at %s\n", out, filepath.Join(out, "index.html"))
	return nil
}

// tuneDecisions are tune's steps and what each came to, one line each.
func tuneDecisions(res *tune.Result) []string {
	var out []string
	for _, e := range res.Steps {
		if e.Event == "keep" || e.Event == "roll back" {
			out = append(out, fmt.Sprintf("tune step %d: %s (%s; %s: %s)", e.Step, strings.ToUpper(e.Event), strings.Join(e.Diff, "; "), e.Verdict, e.Decided))
		}
	}
	return out
}

// inForce says what the gateway runs after tune: the configuration it
// started with, or the one a step kept and what that step changed.
func inForce(res *tune.Result) string {
	if res.Final.Hash == res.Start.Hash {
		return fmt.Sprintf("the configuration it started with (version %d): tune kept no change", res.Final.Version)
	}
	for _, e := range slices.Backward(res.Steps) {
		if e.Event == "keep" && e.Hash == res.Final.Hash {
			return fmt.Sprintf("configuration version %d, kept by tune's step %d (%s)", res.Final.Version, e.Step, strings.Join(e.Diff, "; "))
		}
	}
	return fmt.Sprintf("configuration version %d (%s)", res.Final.Version, res.Final.Hash)
}

// brief says in one line what decided a verdict: the quality signal
// that vetoed it, the figures not settled, or how the SLOs' percentiles
// and goodput moved.
func brief(changes []verdict.Change, v string) string {
	var slo, quality, unsure []string
	var goodput string
	gained := false
	for _, ch := range changes {
		switch {
		case ch.Quality && ch.Judgement == verdict.Regressed:
			quality = append(quality, fmt.Sprintf("%s %.1f%% → %.1f%%", strings.TrimSuffix(ch.Metric, "_rate"), ch.Base*100, ch.New*100))
		case ch.SLOCheck:
			slo = append(slo, fmt.Sprintf("%s %.0f → %.0f ms", strings.ReplaceAll(ch.Metric, "≤", " (SLO ")+")", ch.Base, ch.New))
		case ch.Metric == "goodput":
			goodput = fmt.Sprintf("goodput %.2f → %.2f req/s", ch.Base, ch.New)
			gained = ch.CILow > 0
		}
		if ch.Judgement == verdict.Unsure {
			unsure = append(unsure, ch.Metric)
		}
	}
	switch {
	case len(quality) > 0:
		return fmt.Sprintf("the candidate breaks answers (%s): quality is a veto, so %s whatever speed did", strings.Join(quality, ", "), v)
	case v == verdict.Inconclusive:
		return fmt.Sprintf("not settled: %s (the verdict names their counts and the pairs that would settle them); run the shadow test longer", strings.Join(unsure, ", "))
	case v == verdict.Keep && !gained:
		return fmt.Sprintf("%s; %s: nothing got worse and nothing better; at the load the gateway admits (the copy leaves after admission, so a cap in force bounds it) this change buys nothing, so it is not worth shipping for speed", strings.Join(slo, ", "), goodput)
	}
	return fmt.Sprintf("%s; %s: %s", strings.Join(slo, ", "), goodput, v)
}

func step(w io.Writer, n int, format string, args ...any) {
	fmt.Fprintf(w, "\n== %d. %s\n", n, fmt.Sprintf(format, args...))
}

// startSim serves a simulator on a loopback port.
func startSim(cfg sim.Config, log *slog.Logger) (string, func(), error) {
	s, err := sim.New(cfg, log)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("demo: sim: %w", err)
	}
	go s.Serve(ln)
	return "http://" + ln.Addr().String(), func() { shutdownWithin(s.Shutdown, 2*time.Second) }, nil
}

// saveDiagnosis writes the baseline's diagnosis as JSON beside its page.
func saveDiagnosis(dir string, rep *diagnose.Report) error {
	b, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "2-diagnose.json"), b, 0o600)
}

// shadow is what the demo's shadow tests share.
type shadow struct {
	g              *proxy.Gateway
	log            *slog.Logger
	f              *benchFlags
	set            map[string]bool
	stdout, stderr io.Writer
	pages          *pageSet
	obj            verdict.Objective
	// tol is the quality tolerance the pairs are sized for.
	tol float64
	// inForce says what the gateway runs while the copies are made.
	inForce string
}

// run mirrors the gateway's traffic to a candidate simulator and judges
// the pairs at the objective; it returns the verdict. With json, the
// traffic asks for JSON answers at a low closed-loop load (what a
// quantized build breaks first); without, it is the tuning load itself
// (what a build for throughput must carry). Each test sends twice the
// pairs that settle a quality rate at 0 in both arms: the copy leaves
// after admission, so requests the gateway refuses make no pair.
func (sh shadow) run(ctx context.Context, ccfg sim.Config, name string, n int, what string, json bool) (string, error) {
	candURL, stopCand, err := startSim(ccfg, sh.log)
	if err != nil {
		return "", err
	}
	defer stopCand()
	g, stdout := sh.g, sh.stdout
	step(stdout, n, "shadow test: mirror every request to %s at %s, judge it on the same requests", what, candURL)
	fmt.Fprintf(stdout, "in force at the gateway: %s; the copies leave after admission, so what it admits is what both arms see\n", sh.inForce)
	before := g.Config()
	next := g.Config()
	pools := maps.Clone(next.Pools)
	pools["candidate"] = proxy.PoolConfig{Backends: []proxy.BackendConfig{{URL: candURL}}}
	next.Pools = pools
	next.Mirror.Rules = []mirror.Rule{{Name: name, Pool: "candidate", Sample: 1, MaxInFlight: 1024}}
	if err := g.ReloadFrom("demo: mirror to the "+name+" candidate", next); err != nil {
		return "", err
	}
	defer g.ReloadFrom("demo: mirror off", before) //nolint:errcheck // the running configuration was accepted before
	settle := verdict.PairedSettlingSize(sh.tol)
	requests := 2 * settle
	fb := *sh.f
	var zero time.Duration
	if json {
		// JSON answers show what the candidate breaks; a JSON answer cut
		// at max_tokens is broken on both sides, so none is sent.
		j, out, c, load := true, "none", 24, "closed"
		fb.json, fb.output, fb.concurrency, fb.load, fb.duration, fb.requests = &j, &out, &c, &load, &zero, &requests
	} else if !sh.set["duration"] && !sh.set["requests"] {
		fb.duration, fb.requests = &zero, &requests
	}
	cfg, err := fb.config(sh.set, sh.stderr)
	if err != nil {
		return "", err
	}
	cfg.GatewayAdmin = ""
	if cfg.Load.Requests > 0 {
		fmt.Fprintf(stdout, "size: %d requests: at least %d pairs unless more than half are refused; %d pairs settle a rate at 0 in both arms within %.3g points\n",
			cfg.Load.Requests, cfg.Load.Requests/2, settle, sh.tol*100)
	}
	skip := len(g.Pairs().Pairs)
	if _, err := bench.Run(ctx, cfg); err != nil {
		return "", err
	}
	for wait := time.Now().Add(10 * time.Second); g.MirrorsInFlight() > 0 && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	pairs := g.Pairs().Pairs
	if len(pairs) <= skip {
		fmt.Fprintln(stdout, "no pairs were recorded")
		return verdict.Inconclusive, nil
	}
	pairs = pairs[skip:]
	enough := "at least"
	if len(pairs) < settle {
		enough = "fewer than"
	}
	fmt.Fprintf(stdout, "%d pairs: each request answered by the primary and the candidate (%s the %d that settle a rate at 0 in both arms)\n\n", len(pairs), enough, settle)
	r := ab.Compare(pairs, verdict.Options{Objective: sh.obj, QualityTolerance: sh.tol})
	r.Write(stdout)
	fmt.Fprintf(stdout, "in short: %s\n", brief(r.Changes, r.Verdict))
	return r.Verdict, sh.pages.write(fmt.Sprintf("%d-shadow-%s.html", n, name), fmt.Sprintf("%d. shadow test: %s", n, what),
		r.Verdict+": "+brief(r.Changes, r.Verdict), svgchart.Tone(r.Verdict), func(w io.Writer) error {
			return r.WriteHTML(w, "infergate ab report: "+name, ab.Examples(pairs, 5))
		})
}

// shutdownWithin calls shutdown with a deadline d from now.
func shutdownWithin(shutdown func(context.Context) error, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = shutdown(ctx)
}

// demoIgnores are bench's flags that mean nothing in the demo, which runs
// its own server and gateway and writes its own files to --dir: given,
// they would be silently ignored, so they are refused.
var demoIgnores = map[string]string{
	"url":        "the demo measures its own gateway; to tune yours: infergate tune --admin ADMIN_URL --url API_URL",
	"admin":      "the demo drives its own gateway's admin listener",
	"admin-key":  "the demo drives its own gateway's admin listener",
	"out":        "the records go to --dir",
	"html":       "the reports go to --dir",
	"csv":        "the records go to --dir",
	"events":     "the records go to --dir",
	"cpuprofile": "profile infergate bench or serve instead",
	"memprofile": "profile infergate bench or serve instead",
}

// demoDefaults are the demo's own defaults for bench's flags, set in
// runDemo where a flag was not given; its help states them.
var demoDefaults = map[string]struct{ def, usage string }{
	"output-tokens":  {"64", "max_tokens: N, uniform:MIN-MAX, normal:MEAN,SD, or none to leave it unset"},
	"warmup":         {"500ms", "warm-up per measurement, left out: a request count or a duration"},
	"slo":            {"ttft=2s,tpot=50ms", "the objective every step is judged at"},
	"rate":           {"24", "open loop: requests per second (without --concurrency or --sweep: above what the memory-bound server serves)"},
	"gateway-timing": {"true", "ask the gateway where each request's time went"},
	"requests":       {"0", "measured requests per measurement (default: as many as settle --quality-tolerance)"},
	"model":          {"", "model name (default: the simulator's)"},
}

// demoFlags hides the bench flags the demo refuses from its help and
// states the demo's own defaults for the ones it sets.
func demoFlags(fs *flag.FlagSet) {
	for name := range demoIgnores {
		if fl := fs.Lookup(name); fl != nil {
			fl.Usage = hiddenUsage
		}
	}
	for name, d := range demoDefaults {
		if fl := fs.Lookup(name); fl != nil {
			fl.DefValue, fl.Usage = d.def, d.usage
		}
	}
}

// notTheDemos refuses, as a usage error, a flag the demo would ignore.
func notTheDemos(set map[string]bool) error {
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if why, ok := demoIgnores[name]; ok {
			return exitError{codeUsage, fmt.Errorf("--%s is not the demo's: %s", name, why)}
		}
	}
	return nil
}

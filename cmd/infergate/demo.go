package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/proxy"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/verdict"
)

const demoSynopsis = `demo [--preset NAME] [--concurrency N] [--duration D] [--out run.json] [--html run.html]

The whole idea in one command, with no setup: it starts the simulator (a
continuous-batching server with vLLM's behaviour under load) and the
gateway in this process on loopback ports, probes the path once, runs a
short closed-loop baseline through the gateway, and prints the report.
Save it with --out and compare a later run with 'infergate compare'.

Meanwhile the gateway mirrors every request to a second simulator posing
as a candidate build (the int4 variant: faster decode, more malformed
JSON, refusals and truncation), and the demo ends with the shadow test's
verdict, as 'infergate ab report' gives it (--no-mirror leaves it out).`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	preset := fs.String("preset", "balanced", "simulator preset: "+fmt.Sprint(sim.Presets()))
	noMirror := fs.Bool("no-mirror", false, "do not mirror to a candidate simulator")
	f := registerBenchFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	scfg, err := sim.Preset(*preset)
	if err != nil {
		return err
	}
	s, err := sim.New(scfg, log)
	if err != nil {
		return err
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: sim: %w", err)
	}
	go s.Serve(sln)
	defer shutdownWithin(s.Shutdown, 2*time.Second)
	simURL := "http://" + sln.Addr().String()

	gcfg := quickConfig("127.0.0.1:0", simURL, "/health")
	candURL := ""
	if !*noMirror {
		ccfg := scfg
		if err := ccfg.ApplyVariant("int4"); err != nil {
			return err
		}
		cs, err := sim.New(ccfg, log)
		if err != nil {
			return err
		}
		cln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("demo: candidate sim: %w", err)
		}
		go cs.Serve(cln)
		defer shutdownWithin(cs.Shutdown, 2*time.Second)
		candURL = "http://" + cln.Addr().String()
		gcfg.Pools["candidate"] = proxy.PoolConfig{Backends: []proxy.BackendConfig{{URL: candURL}}}
		gcfg.Mirror.Rules = []proxy.MirrorRule{{Name: "int4-candidate", Pool: "candidate", Sample: 1}}
	}
	g, err := proxy.New(gcfg, log)
	if err != nil {
		return err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: gateway: %w", err)
	}
	go g.Serve(gln)
	defer shutdownWithin(g.Shutdown, 2*time.Second)
	gwURL := "http://" + gln.Addr().String()
	fmt.Fprintf(stdout, "demo: simulator (%s preset) at %s, infergate gateway at %s\n", *preset, simURL, gwURL)
	if candURL != "" {
		fmt.Fprintf(stdout, "demo: every request also mirrored to a candidate simulator (int4 variant) at %s\n", candURL)
	}
	fmt.Fprintln(stdout)

	// The demo's own defaults, where the flags were not given.
	if !set["url"] {
		*f.url = gwURL
	}
	if !set["concurrency"] && !set["rate"] && !set["sweep"] {
		*f.concurrency = 8
	}
	if !set["duration"] && !set["requests"] {
		*f.duration = 10 * time.Second
	}
	if !set["model"] {
		*f.model = scfg.Model
	}
	if !set["gateway-timing"] {
		*f.gwTiming = true
	}
	if !set["json"] && candURL != "" {
		*f.json = true // JSON answers show what the candidate breaks
		if !set["output-tokens"] {
			*f.output = "none" // a JSON answer cut at max_tokens is broken on both sides
		}
	}
	cfg, err := f.config(set, stderr)
	if err != nil {
		return err
	}
	rs, err := bench.Probe(ctx, bench.ProbeConfig{URL: gwURL + "/v1/chat/completions", Stream: true, N: 5,
		Body: fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"stream":true}`, scfg.Model)})
	if err != nil {
		return err
	}
	bench.WriteProbe(stdout, gwURL+"/v1/chat/completions", rs)
	fmt.Fprintln(stdout)
	if _, err = benchRun(ctx, cfg, f, stdout, stderr); err != nil || candURL == "" {
		return err
	}
	// The shadow test: the pairs the gateway recorded, judged, once the
	// last copies have their answers.
	for wait := time.Now().Add(10 * time.Second); g.MirrorsInFlight() > 0 && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	pairs := g.Pairs().Pairs
	fmt.Fprintf(stdout, "\nshadow test: the candidate (int4) against the primary, on the same %d requests\n\n", len(pairs))
	if len(pairs) == 0 {
		fmt.Fprintln(stdout, "no pairs were recorded")
		return nil
	}
	abReport(pairs, verdict.Options{}).Write(stdout)
	return nil
}

// shutdownWithin calls shutdown with a deadline d from now.
func shutdownWithin(shutdown func(context.Context) error, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = shutdown(ctx)
}

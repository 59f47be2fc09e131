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
)

const demoSynopsis = `demo [--preset NAME] [--concurrency N] [--duration D] [--out run.json] [--html run.html]

The whole idea in one command, with no setup: it starts the simulator (a
continuous-batching server with vLLM's behaviour under load) and the
gateway in this process on loopback ports, probes the path once, runs a
short closed-loop baseline through the gateway, and prints the report.
Save it with --out and compare a later run with 'infergate compare'.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	preset := fs.String("preset", "balanced", "simulator preset: "+fmt.Sprint(sim.Presets()))
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

	g, err := proxy.New(quickConfig("127.0.0.1:0", simURL, "/health"), log)
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
	fmt.Fprintf(stdout, "demo: simulator (%s preset) at %s, infergate gateway at %s\n\n", *preset, simURL, gwURL)

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
	_, err = benchRun(ctx, cfg, f, stdout, stderr)
	return err
}

// shutdownWithin calls shutdown with a deadline d from now.
func shutdownWithin(shutdown func(context.Context) error, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = shutdown(ctx)
}

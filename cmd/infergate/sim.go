package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/infergate/infergate/sim"
)

const simSynopsis = `sim --listen 127.0.0.1:9001 [--preset NAME] [--variant NAME] [--config FILE] [flags]

Runs a simulated OpenAI-compatible inference server. In engine mode (the
default) a continuous-batching scheduler models queueing, batching, prefill,
decode and KV-cache preemption; --ttft/--itl (or --mode fixed) give constant
timings with no load effects. Precedence: preset, then --variant, then the
--config file, then the other flags.

Faults per request: header X-Sim-Fault, e.g. "error=503;retry_after=2s",
"reset_after=5", "stall_after=3;stall_for=10s", "header_delay=200ms",
"net_delay=5ms;net_jitter=1ms".

Presets:
  ` + "%s"

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, log, addrFile, err := parseSimFlags(args, stderr)
	if err != nil {
		return err
	}
	s, err := sim.New(cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if addrFile != "" {
		remove, err := writeAddrFile(addrFile, "api", ln.Addr().String())
		if err != nil {
			ln.Close()
			return err
		}
		defer remove()
	}
	log.Info("sim listening", "addr", ln.Addr().String(), "mode", cfg.Mode, "model", cfg.Model, "variant", cfg.Quality.Variant)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// parseSimFlags builds the sim config: preset, variant, file, then flags.
// It also returns --addr-file's path.
func parseSimFlags(args []string, stderr io.Writer) (sim.Config, *slog.Logger, string, error) {
	syn := fmt.Sprintf(simSynopsis, strings.Join(sim.Presets(), "\n  "))
	// Parse into a scratch config: it finds the preset, variant and file,
	// checks every flag, and records which were given.
	scratch := sim.DefaultConfig()
	fs := newFlagSet("sim", syn, stderr)
	preset := fs.String("preset", "balanced", "starting preset (see above)")
	variant := fs.String("variant", "", "candidate build: int4 or fp8 (speed and quality trade-off)")
	file := fs.String("config", "", "YAML file of sim parameters (keys as in the sim section of the docs)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	addrFile := fs.String("addr-file", "", addrFileHelp)
	scratch.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return scratch, nil, "", err
	}
	cfg, err := sim.Preset(*preset)
	if err != nil {
		return cfg, nil, "", err
	}
	if *variant != "" {
		if err := cfg.ApplyVariant(*variant); err != nil {
			return cfg, nil, "", err
		}
	}
	if *file != "" {
		if err := cfg.LoadFile(*file); err != nil {
			return cfg, nil, "", err
		}
	}
	// Then the flags that were given, over preset and file: each is set
	// again on a flag set bound to cfg.
	onCfg := flag.NewFlagSet("sim", flag.ContinueOnError)
	cfg.RegisterFlags(onCfg)
	fixed, modeSet := false, false
	var setErr error
	fs.Visit(func(f *flag.Flag) {
		if onCfg.Lookup(f.Name) == nil {
			return // preset, variant, config, log flags
		}
		if err := onCfg.Set(f.Name, f.Value.String()); err != nil && setErr == nil {
			setErr = fmt.Errorf("--%s: %w", f.Name, err)
		}
		switch f.Name {
		case "ttft", "itl":
			fixed = true
		case "mode":
			modeSet = true
		}
	})
	if setErr != nil {
		return cfg, nil, "", setErr
	}
	if fixed && !modeSet {
		cfg.Mode = sim.ModeFixed
	}
	log, err := newLogger(stderr, *level, *format)
	if err != nil {
		return cfg, nil, "", err
	}
	return cfg, log, *addrFile, cfg.Validate()
}

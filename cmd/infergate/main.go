// Command infergate is a reverse proxy and load generator for LLM
// inference backends that speak the OpenAI HTTP API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"

	"github.com/infergate/infergate/internal/suggest"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the gateway (with no flags: in front of a built-in simulator)", runServe},
		{"sim", "run the continuous-batching inference simulator", runSim},
		{"demo", "the whole idea in one command: sim + gateway in-process, a baseline through it, the report", runDemo},
		{"bench", "measure a server: TTFT, TPOT, throughput, goodput; closed/open loop, sweeps; save a record", runBench},
		{"compare", "judge a new run against a base: KEEP, ROLL BACK or INCONCLUSIVE (exit 0/1/2)", runCompare},
		{"ab", "judge a candidate backend from mirrored pairs: ab report PAIRS.jsonl (exit 0/1/2)", runAB},
		{"diagnose", "name the bottleneck (memory, batching, scheduling, compute, none) from the gateway's and backends' metrics, and the next knob", runDiagnose},
		{"tune", "walk the tuning loop on a running gateway: baseline, diagnose, each knob re-measured and kept or rolled back at the SLOs", runTune},
		{"size", "size GPU memory: weights, KV cache per token and request, requests that fit, GPUs needed", runSize},
		{"rank", "rank endpoints (providers, relays, servers) on your workload by SLO, cost and TTFT, with intervals, costs and a history that flags drift", runRank},
		{"config", "a running gateway's kept configurations: versions, rollback, reload; or check a file", runConfig},
		{"top", "a running gateway's live view: rates, TTFT, TPOT, where the time went, per model and backend", runTop},
		{"probe", "one request at a time: DNS, connect, TLS, first byte, first token, total", runProbe},
		{"overhead", "measure what the gateway adds: direct vs gateway vs nginx, interleaved", runOverhead},
		{"version", "the release, source revision and Go toolchain of this binary", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "infergate: a reverse proxy and load generator for OpenAI-compatible LLM backends")
	fmt.Fprintln(w, "\nUsage: infergate <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'infergate <command> --help' for a command's flags, 'infergate help flags' for all of them.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" && args[1] == "flags" {
		if err := writeFlagsDoc(ctx, stdout); err != nil {
			fmt.Fprintf(stderr, "infergate help flags: %v\n", err)
			return codeFailed
		}
		return codeOK
	}
	if len(args) == 0 {
		usage(stderr)
		return codeUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 2 && args[0] == "help" {
			args = []string{args[1], "--help"} // infergate help bench
		} else {
			usage(stdout)
			return codeOK
		}
	}
	if len(args) == 2 && wantsHelp(args[1:]) {
		// ab and config parse their flags in a subcommand: show those.
		switch args[0] {
		case "ab":
			args = []string{"ab", "report", args[1]}
		case "config":
			args = []string{"config", "versions", args[1]}
		}
	}
	if args[0] == "--version" {
		args = []string{"version"}
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		if c.name != args[0] {
			continue
		}
		errOut := stderr
		if wantsHelp(args[1:]) {
			errOut = stdout
		}
		err := c.run(ctx, renameFlags(c.name, args[1:], stderr), stdout, errOut)
		code := statusOf(c.name, err, stderr)
		if code != codeOK && interrupted(ctx) && c.name != "serve" && c.name != "sim" {
			return codeInterrupt
		}
		return code
	}
	fmt.Fprintf(stderr, "infergate: unknown command %q\n", args[0])
	if s := suggest.Nearest(args[0], names); s != "" {
		fmt.Fprintf(stderr, "  did you mean %s?\n", s)
	}
	fmt.Fprintln(stderr, "Run 'infergate --help' for the commands.")
	return codeUsage
}

// statusOf maps a command's error to its exit status, printing the error.
func statusOf(name string, err error, stderr io.Writer) int {
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return codeOK
	case isUsageError(err):
		// The flag set's usage has said what was wrong.
		if name == "compare" || name == "ab" {
			return 3 // their 2 is a verdict, INCONCLUSIVE
		}
		return codeUsage
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "infergate %s: %v\n", name, ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "infergate %s: %v\n", name, err)
		return codeFailed
	}
}

// newFlagSet returns a flag set whose --help prints the command's usage.
func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("infergate "+name, flag.ContinueOnError)
	fo := &flagOutput{w: out}
	fs.SetOutput(fo)
	fs.Usage = func() {
		if fo.failed != "" {
			shortUsage(out, name, fo.failed, fs)
			fo.failed = ""
			return
		}
		fmt.Fprintf(out, "Usage: infergate %s\n\n%s\n\nFlags:\n", name, synopsis)
		printFlags(fs, out)
	}
	return fs
}

// newLogger makes the process's structured logger.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

// exitError ends the command with a chosen status (compare's verdicts),
// printing err when there is one.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

// startTrace starts a runtime execution trace to path (none when it is
// empty); stop ends it and closes the file.
func startTrace(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}

// startProfiles starts a CPU profile to cpu and arranges an allocation
// profile to mem (either may be empty); stop writes them out.
func startProfiles(cpu, mem string, stderr io.Writer) (stop func(), err error) {
	var f *os.File
	if cpu != "" {
		if f, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	return func() {
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
		if mem == "" {
			return
		}
		mf, err := os.Create(mem)
		if err != nil {
			fmt.Fprintf(stderr, "--memprofile: %v\n", err)
			return
		}
		defer mf.Close()
		_ = pprof.Lookup("allocs").WriteTo(mf, 0)
	}, nil
}

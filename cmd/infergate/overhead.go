package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/overhead"
)

const overheadSynopsis = `overhead [--scenarios LIST] [--rounds N] [--round-time D] [--nginx PATH] [--gateway-bin PATH]

Measures what the gateway adds. For each scenario it starts a simulator in
fixed mode, an infergate gateway and (if found) nginx as a plain reverse
proxy in front of it, all on 127.0.0.1, and runs the same closed-loop load
against the backend directly, through infergate and through nginx, in
interleaved rounds. It prints a Markdown report: TTFT and inter-event gap
percentiles, events/s and requests/s, and what each proxy adds.

Scenarios: paced, single, cpu-stream-64, cpu-stream-512, cpu-plain, idle (gateway
proxies); stream1 (the public boards' stream suite: one stream at a time,
a role chunk at once, then 64 deltas 20 ms apart; added TTFT and added
per-token time at p50, p90 and p99 against direct, exact percentiles;
--streams streams per target per round, each 1.28 s long: the default
5 rounds of 200 take about 65 minutes with nginx, --rounds 2 --streams 10
is a smoke run); sim-fidelity, sim-capacity (the simulator alone); bench-capacity
(one bench process driving --idle-streams streams: its CPU against the
sim's, memory per stream), bench-vs-hey (non-streaming request rate against
hey, interleaved) and bench-timing (what the client adds to TTFT);
shaping-redis (TTFT added by a cap shared through --redis, against one
Redis round trip) and shaping-knee (a cap at the sim's knee against none,
offered 1.5× the knee's rate); tracing-cost (request log and 100% spans
over OTLP against all off); routing-prefix, routing-unique and
routing-slow (four sims with prefix caching behind gateways of each
selection policy, a fresh fleet per run, loaded by infergate bench in
open loop: grouped system prompts, unique prompts with an A/A pair, and
one slow replica; --round-time is each run's measured time); sessions
(agent-like conversations: a shared system prompt and tool list, a
growing history, on four sims whose caches hold a third of all the
sessions' contexts, through least_outstanding, prefix, and prefix with
session keys: TTFT and cached share of the follow-up turns, spread of
requests over the sims) and replicas (the keyed sessions through one
gateway against --replicas gateways behind a round-robin HTTP front, with
the --redis Redis and without); both sized by --sessions and --turns, each
run ending when its sessions do (--round-time does not apply); classes
(issue 45: the memory-bound sim scheduling by priority at twice its
capacity with a 20/50/30 priority/default/flex mix, through a gateway
without classes, with them, and with them on three replicas sharing the
--redis Redis, against an idle baseline; --classes-run is each arm's
time, --classes-reserve the share of the knee priority may hold above it,
--classes-reserve-inside within it instead).
--gateway-bin runs another binary in the gateway's place, started as
infergate serve is: another build, or the floor, the least a fasthttp
proxy does (go build -o floorproxy ./internal/overhead/floorproxy; its
figures hold for cpu-plain, its stream relay is naive).
scripts/bench-overhead.sh installs nginx (Debian) when missing and runs all.`

func runOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("overhead", overheadSynopsis, stderr)
	scen := fs.String("scenarios", "paced,single,cpu-stream-64,cpu-stream-512,cpu-plain,idle", "comma-separated scenarios")
	rounds := fs.Int("rounds", 5, "interleaved rounds per scenario")
	roundTime := fs.Duration("round-time", 3*time.Second, "load duration of one target in one round")
	nginx := fs.String("nginx", "", "nginx executable (default: nginx on PATH or /usr/sbin/nginx; \"none\" to skip)")
	idle := fs.Int("idle-streams", 5000, "open streams in the idle (memory) and bench-capacity scenarios")
	gwEnv := fs.String("gateway-env", "", "comma-separated VAR=value added to the gateway's environment, e.g. GOMAXPROCS=1")
	gwBin := fs.String("gateway-bin", "", "run this binary's serve in the gateway's place (another build, or floorproxy)")
	redisAddr := fs.String("redis", "127.0.0.1:6379", "Redis for the shaping-redis scenario and the replicas scenario's shared arm (\"\" skips them)")
	sessions := fs.Int("sessions", 32, "sessions and replicas scenarios: sessions at once")
	turns := fs.Int("turns", 8, "sessions and replicas scenarios: turns per session")
	replicas := fs.Int("replicas", 4, "replicas scenario: gateway processes behind the round-robin front")
	classesRun := fs.Duration("classes-run", 20*time.Second, "classes scenario: each loaded arm's time (the full size: 2m)")
	classesReserve := fs.Float64("classes-reserve", 0.25, "classes scenario: the share of the knee priority may hold above it (classes.priority.reserved; default and flex are held to the knee)")
	classesInside := fs.Bool("classes-reserve-inside", false, "classes scenario: keep priority's reserve within the knee (the cap the knee) instead of above it")
	streams := fs.Int("streams", overhead.DefaultStreams, "stream suites (stream1): streams per target per round, one at a time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	ng := *nginx
	switch ng {
	case "none":
		ng = ""
	case "":
		if p, err := exec.LookPath("nginx"); err == nil {
			ng = p
		} else if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			ng = "/usr/sbin/nginx"
		} else {
			fmt.Fprintln(stderr, "nginx not found: measuring direct and infergate only")
		}
	}
	o := &overhead.Overhead{Binary: self, Nginx: ng, Rounds: *rounds, RoundTime: *roundTime, IdleStreams: *idle, GatewayBinary: *gwBin, Report: stdout, Progress: stderr, Redis: *redisAddr,
		Sessions: *sessions, Turns: *turns, Replicas: *replicas, Streams: *streams, ClassesRun: *classesRun, ClassesReserve: *classesReserve, ClassesInside: *classesInside}
	if *gwEnv != "" {
		o.GatewayEnv = strings.Split(*gwEnv, ",")
	}
	return o.Run(ctx, strings.Split(*scen, ","))
}

package overhead

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// Overhead measures what a proxy adds to a backend: the same load against
// the backend directly, through the infergate gateway and through nginx,
// in interleaved rounds (the order rotates each round), so that noise from
// a shared machine falls on all three alike.
type Overhead struct {
	// Binary is the infergate executable; it runs the sim and the gateway.
	Binary string
	// Nginx is the nginx executable; empty leaves nginx out.
	Nginx string
	// Rounds per scenario, each RoundTime long per target.
	Rounds    int
	RoundTime time.Duration
	// IdleStreams is the number of open streams of the memory scenario.
	IdleStreams int
	// GatewayEnv is added to the gateway process's environment (for
	// example GOMAXPROCS=1), to compare runtime settings.
	GatewayEnv []string
	// GatewayBinary, when set, runs in the gateway's place in the proxy
	// scenarios, started as Binary's serve is (serve --upstream URL
	// --listen ADDR --admin-listen ADDR --log-level warn): another build
	// of infergate, or floorproxy (internal/overhead/floorproxy), the
	// least a fasthttp proxy does. The report still calls it infergate.
	GatewayBinary string
	// Redis is the host:port of the shaping-redis scenario's Redis, and
	// the one the replicas scenario gives its shared arm.
	Redis string
	// Sessions and Turns size the sessions and replicas scenarios (0: 32
	// sessions of 8 turns); Replicas is the replicas scenario's gateway
	// processes (0: 4).
	Sessions, Turns, Replicas int
	// ClassesRun is each loaded arm's time in the classes scenario (0:
	// 20 s, a run of about two minutes).
	ClassesRun time.Duration
	// ClassesReserve is the share of the knee the classes scenario's
	// arms with classes let priority hold above it (0: a quarter).
	ClassesReserve float64
	// ClassesInside keeps that reserve within the knee instead.
	ClassesInside bool
	// Streams is a stream suite's streams per target per round (0:
	// DefaultStreams).
	Streams int
	// Report receives the results as Markdown; Progress a line per round.
	Report, Progress io.Writer
}

// Scenario is one load shape.
type Scenario struct {
	Name        string
	What        string
	TTFT, ITL   time.Duration // the sim's fixed timings
	Tokens      int           // events per answer
	Stream      bool
	Concurrency int
}

// Scenarios are the gateway's load shapes: paced streams as a model sends
// them, one stream alone, CPU-bound streams at two concurrencies and small
// plain responses.
func Scenarios() []Scenario {
	return []Scenario{
		{"paced", "realistic pacing: TTFT 50ms, 10ms between events, 100 events, concurrency 64", 50 * time.Millisecond, 10 * time.Millisecond, 100, true, 64},
		{"single", "one stream at a time, no backend delay, 200 events", 0, 0, 200, true, 1},
		{"cpu-stream-64", "CPU-bound streaming: no delay, 200 events, concurrency 64", 0, 0, 200, true, 64},
		{"cpu-stream-512", "CPU-bound streaming: no delay, 200 events, concurrency 512", 0, 0, 200, true, 512},
		{"cpu-plain", "CPU-bound non-streaming small responses, concurrency 64", 0, 0, 16, false, 64},
	}
}

// rampUp spreads a round's first requests over one request's duration,
// so the load is steady rather than in synchronised waves.
func (sc Scenario) rampUp() time.Duration {
	if sc.Concurrency == 1 {
		return 0
	}
	return sc.TTFT + time.Duration(sc.Tokens)*sc.ITL
}

type target struct {
	name string
	url  string
	pid  int
}

// Run runs the named scenarios ("idle" is the memory scenario) and writes
// the report.
func (o *Overhead) Run(ctx context.Context, names []string) error {
	dir, err := os.MkdirTemp("", "infergate-overhead")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(o.Report, "Rounds: %d (timed scenarios: %v per target), interleaved; medians of per-round figures, percentiles pooled over rounds.\n\n", o.Rounds, o.RoundTime)
	if o.GatewayBinary != "" {
		fmt.Fprintf(o.Report, "The target called infergate is %s.\n\n", o.GatewayBinary)
	}
	for _, name := range names {
		if err := o.runOne(ctx, dir, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (o *Overhead) runOne(ctx context.Context, dir, name string) error {
	switch name {
	case "idle":
		return o.idle(ctx, dir)
	case "sim-fidelity":
		return o.simFidelity(ctx)
	case "sim-capacity":
		return o.simCapacity(ctx, 2000)
	case "bench-capacity":
		return o.benchCapacity(ctx, dir, o.IdleStreams)
	case "bench-vs-hey":
		return o.benchVsHey(ctx, dir, 64)
	case "bench-timing":
		return o.benchTiming(ctx, dir)
	case "shaping-redis":
		return o.shapingRedis(ctx)
	case "shaping-knee":
		return o.shapingKnee(ctx)
	case "tracing-cost":
		return o.tracingCost(ctx, dir)
	case "sessions":
		return o.sessionsScenario(ctx, dir)
	case "replicas":
		return o.replicasScenario(ctx, dir)
	case "classes":
		return o.classesScenario(ctx, dir)
	}
	if i := slices.IndexFunc(StreamSuites(), func(s StreamSuite) bool { return s.Name == name }); i >= 0 {
		return o.streamSuite(ctx, dir, StreamSuites()[i])
	}
	if rc, ok := routingCases()[name]; ok {
		return o.routing(ctx, dir, rc)
	}
	i := slices.IndexFunc(Scenarios(), func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return fmt.Errorf("unknown scenario %q", name)
	}
	return o.scenario(ctx, dir, Scenarios()[i])
}

// setup starts the sim with the scenario's timings, a gateway and nginx in
// front of it, and returns the targets and a stop func.
func (o *Overhead) setup(dir string, simArgs []string) ([]target, func(), error) {
	var procs []*proc
	stop := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}
	backend, err := startInfergate(o.Binary, "sim", append([]string{"sim"}, simArgs...)...)
	if err != nil {
		return nil, stop, err
	}
	procs = append(procs, backend)
	var gw *proc
	if o.GatewayBinary != "" {
		gw, err = startOther(o.GatewayEnv, o.GatewayBinary, "gateway", "serve", "--upstream", "http://"+backend.addr, "--log-level", "warn")
	} else {
		gw, err = startInfergateEnv(o.GatewayEnv, o.Binary, "gateway", "serve", "--upstream", "http://"+backend.addr)
	}
	if err != nil {
		return nil, stop, err
	}
	procs = append(procs, gw)
	targets := []target{
		{"direct", "http://" + backend.addr, backend.cmd.Process.Pid},
		{"infergate", "http://" + gw.addr, gw.cmd.Process.Pid},
	}
	if o.Nginx != "" {
		ng, err := startNginx(o.Nginx, dir, backend.addr)
		if err != nil {
			return nil, stop, err
		}
		procs = append(procs, ng)
		targets = append(targets, target{"nginx", "http://" + ng.addr, ng.cmd.Process.Pid})
	}
	return targets, stop, nil
}

func requestBody(tokens int, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"sim-model","messages":[{"role":"user","content":"Measure me."}],"max_tokens":%d,"ignore_eos":true,"stream":%v}`, tokens, stream)
}

func (o *Overhead) scenario(ctx context.Context, dir string, sc Scenario) error {
	targets, stop, err := o.setup(dir, []string{"--mode", "fixed", "--ttft", sc.TTFT.String(), "--itl", sc.ITL.String()})
	defer stop()
	if err != nil {
		return err
	}
	body := requestBody(sc.Tokens, sc.Stream)
	clients := map[string]*bench.Client{}
	for _, t := range targets {
		c, err := bench.NewClient(t.url+"/v1/chat/completions", bench.ClientOptions{})
		if err != nil {
			return err
		}
		defer c.Close()
		clients[t.name] = c
	}
	runs := make(map[string][]Stats)
	// Warm every path (connections, caches and pools) first.
	for _, t := range targets {
		if _, err := Load(ctx, clients[t.name], Target{Body: body, Stream: sc.Stream},
			Options{Concurrency: sc.Concurrency, Duration: o.RoundTime / 3}); err != nil {
			return err
		}
	}
	for r := range o.Rounds {
		for k := range targets {
			t := targets[(r+k)%len(targets)]
			st, err := Load(ctx, clients[t.name], Target{Body: body, Stream: sc.Stream},
				Options{Concurrency: sc.Concurrency, Duration: o.RoundTime, RampUp: sc.rampUp()})
			if err != nil {
				return err
			}
			if st.Errors > 0 {
				return fmt.Errorf("%s round %d: %d of %d requests failed, first: %v", t.name, r, st.Errors, st.Requests, st.FirstErr)
			}
			runs[t.name] = append(runs[t.name], st)
			fmt.Fprintf(o.Progress, "%s round %d %-9s %6d requests %8.0f events/s TTFT p50 %v\n", sc.Name, r+1, t.name, st.Requests, st.EventsPerSecond(), st.TTFT.Quantile(50))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	o.report(sc, targets, runs)
	return nil
}

func (o *Overhead) report(sc Scenario, targets []target, runs map[string][]Stats) {
	w := o.Report
	fmt.Fprintf(w, "### %s\n\n%s.\n\n", sc.Name, sc.What)
	fmt.Fprintln(w, "| target | requests | TTFT p50 | TTFT p99 | gap p50 | gap p99 | events/s (median) | requests/s (median) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	pooled := map[string]Stats{}
	eps := map[string]float64{}
	rps := map[string]float64{}
	for _, t := range targets {
		st := Stats{TTFT: bench.NewDist(), Gap: bench.NewDist()}
		var e, q []float64
		for _, r := range runs[t.name] {
			st.Merge(r)
			e = append(e, r.EventsPerSecond())
			q = append(q, r.RequestsPerSecond())
		}
		pooled[t.name], eps[t.name], rps[t.name] = st, verdict.Median(e), verdict.Median(q)
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %.0f | %.0f |\n", t.name, st.Requests,
			msf(st.TTFT.Quantile(50)), msf(st.TTFT.Quantile(99)), msf(st.Gap.Quantile(50)), msf(st.Gap.Quantile(99)), eps[t.name], rps[t.name])
	}
	d := pooled["direct"]
	fmt.Fprintln(w)
	for _, name := range []string{"infergate", "nginx"} {
		p, ok := pooled[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "- %s adds: TTFT p50 %s, p99 %s; gap p99 %s", name,
			msf(p.TTFT.Quantile(50)-d.TTFT.Quantile(50)), msf(p.TTFT.Quantile(99)-d.TTFT.Quantile(99)), msf(p.Gap.Quantile(99)-d.Gap.Quantile(99)))
		fmt.Fprintf(w, "; throughput %.2f× direct (events/s), %.2f× (requests/s)\n", ratio(eps[name], eps["direct"]), ratio(rps[name], rps["direct"]))
	}
	if _, ok := pooled["nginx"]; ok {
		fmt.Fprintf(w, "- infergate / nginx: events/s %.2f×, requests/s %.2f×\n", ratio(eps["infergate"], eps["nginx"]), ratio(rps["infergate"], rps["nginx"]))
	}
	fmt.Fprintln(w)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func msf(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

// idle opens IdleStreams streams that wait forever for a first token and
// reports the gateway's (and nginx's) resident memory per open stream.
func (o *Overhead) idle(ctx context.Context, dir string) error {
	targets, stop, err := o.setup(dir, []string{"--mode", "fixed", "--ttft", "10m", "--itl", "10ms"})
	defer stop()
	if err != nil {
		return err
	}
	simPID := targets[0].pid
	fmt.Fprintf(o.Report, "### idle\n\n%d open streams waiting for their first token (sim TTFT 10 min).\n\n| proxy | streams at the backend | RSS before | RSS with streams | per opened stream |\n|---|---:|---:|---:|---:|\n", o.IdleStreams)
	body := requestBody(10, true)
	for _, t := range targets[1:] {
		for range 4 { // the server side of a connection exists before measuring
			resp, err := http.Get(t.url + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
		}
		time.Sleep(500 * time.Millisecond)
		before, err := rssKiB(t.pid)
		if err != nil {
			return err
		}
		baseFDs := fdCount(simPID)
		closeAll, err := holdStreams(ctx, hostOf(t.url), o.IdleStreams, body)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for fdCount(simPID)-baseFDs < o.IdleStreams && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		after, err := rssKiB(t.pid)
		reached := fdCount(simPID) - baseFDs
		closeAll()
		if err != nil {
			return err
		}
		if reached < o.IdleStreams*9/10 {
			return fmt.Errorf("%s: only %d of %d streams reached the backend", t.name, reached, o.IdleStreams)
		}
		fmt.Fprintf(o.Report, "| %s | %d | %d KiB | %d KiB | %.1f KiB |\n", t.name, reached, before, after, float64(after-before)/float64(o.IdleStreams))
		fmt.Fprintf(o.Progress, "idle %s: %d streams, RSS %d -> %d KiB\n", t.name, o.IdleStreams, before, after)
		time.Sleep(2 * time.Second) // let the closes reach the backend
	}
	fmt.Fprintln(o.Report)
	return nil
}

func hostOf(url string) string {
	if len(url) > 7 && url[:7] == "http://" {
		return url[7:]
	}
	return url
}

package overhead

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// Service classes (issue 45): the memory-bound simulator, scheduling by
// priority as vllm --scheduling-policy priority does, offered twice what
// it can serve, 20% priority, 50% default and 30% flex. The targets:
// priority's p99 TTFT within 1.5× its p99 on an idle server; default
// meeting its SLO at least as often as without classes at the same load;
// flex absorbing the shedding; every request answered or refused with a
// reason, and the gateway's request log holding as many lines as were
// sent. Then the same on three gateway replicas sharing one Redis, where
// the cap must hold across them. Each arm is a fresh fleet.

// classCase sizes the classes scenario.
type classCase struct {
	input, output int
	// stage is each stage of the capacity sweep; run each loaded arm.
	stage, run time.Duration
	// slo is the TTFT objective every class is judged by (bench) and
	// the gateway counts attainment against (classes.*.slo_ttft).
	slo time.Duration
	mix string
	// replicas is the shared arm's gateway processes.
	replicas int
	// reserve is the share of the knee the classes arms reserve for
	// priority above it (classes.priority.reserved; the cap knee plus
	// that).
	reserve float64
	// inside keeps the reserve within the knee (the cap the knee,
	// default and flex held to knee-reserve) instead of above it.
	inside bool
}

func (o *Overhead) classCase() classCase {
	cc := classCase{input: 128, output: 64, stage: 2 * time.Second, run: 20 * time.Second, slo: time.Second,
		mix: "priority=0.2,default=0.5,flex=0.3", replicas: 3, reserve: 0.25}
	if o.ClassesReserve > 0 {
		cc.reserve = o.ClassesReserve
	}
	cc.inside = o.ClassesInside
	if o.ClassesRun > 0 {
		cc.run = o.ClassesRun
		cc.stage = max(cc.stage, o.ClassesRun/10)
	}
	return cc
}

// classArm is one run: its load (a share of the sim's capacity, the
// classes sent), whether the gateways serve classes, and how many share
// one Redis behind a round-robin front.
type classArm struct {
	label    string
	load     float64 // × the capacity's request rate
	mix      string
	classes  bool
	replicas int
}

// classRun is what one arm measured.
type classRun struct {
	stage *bench.Summary
	// logged counts the gateways' request-log lines, by outcome.
	logged map[string]int
	// peak is the most requests the sim held at once (running and
	// waiting), sampled every 50 ms.
	peak float64
}

// classFleet is the capacity the arms are sized by.
type classFleet struct {
	peakRate float64 // requests/s at the sweep's peak throughput
	knee     int     // the first level within 5% of that peak: the gateway's cap
	// kneeTTFT is the TTFT p99 at the knee (p90 when the stage had
	// too few requests for a p99): what a request admitted at the cap
	// still needs before its first token.
	kneeTTFT time.Duration
}

// queueWait is the longest a request judged by slo may wait for a slot
// and still meet it: the SLO less the TTFT it needs once admitted at the
// cap, at least 100 ms. Both loaded arms wait this long (without
// classes, shaping.queue.timeout; with them, default's queue_timeout): a
// request admitted later cannot meet its SLO, and its place in the
// queue makes the ones behind it late too.
func (fl classFleet) queueWait(slo time.Duration) time.Duration {
	return max(slo-fl.kneeTTFT, 100*time.Millisecond)
}

// classesScenario measures the sim's capacity, then runs the arms.
func (o *Overhead) classesScenario(ctx context.Context, dir string) error {
	cc := o.classCase()
	fl, sweep, err := o.classCapacity(ctx, cc)
	if err != nil {
		return err
	}
	arms := []classArm{
		{"idle, priority only", 0.2, "priority=1", true, 1},
		{"2×, without classes", 2, cc.mix, false, 1},
		{"2×, with classes", 2, cc.mix, true, 1},
	}
	redis := o.Redis != "" && reachable(o.Redis)
	if redis {
		arms = append(arms, classArm{fmt.Sprintf("2×, with classes, %d replicas sharing Redis", cc.replicas), 2, cc.mix, true, cc.replicas})
	}
	runs := map[string]classRun{}
	for _, a := range arms {
		run, err := o.classOnce(ctx, dir, cc, fl, a)
		if err != nil {
			return fmt.Errorf("%s: %w", a.label, err)
		}
		runs[a.label] = run
		fmt.Fprintf(o.Progress, "classes %s: %d sent, %d ok, %d failed\n", a.label, run.stage.Requests+run.stage.Cancelled, run.stage.OK, run.stage.Failed)
	}
	o.classReport(cc, fl, sweep, arms, runs, redis)
	return nil
}

// classSim starts the memory-bound sim scheduling by priority.
func (o *Overhead) classSim(name string) (*proc, error) {
	return startInfergate(o.Binary, name, "sim", "--preset", "memory-bound", "--scheduling-policy", "priority")
}

// classCapacity finds the sim's peak request rate and knee with a
// closed-loop sweep straight to it.
func (o *Overhead) classCapacity(ctx context.Context, cc classCase) (classFleet, *bench.Record, error) {
	sim, err := o.classSim("sim")
	if err != nil {
		return classFleet{}, nil, err
	}
	defer sim.stop()
	rec, err := bench.Run(ctx, bench.Config{URL: "http://" + sim.addr, Workload: cc.workload(""), Sweep: []float64{4, 8, 16, 32, 64, 128},
		Load: bench.LoadSpec{Mode: "closed", Concurrency: 1, Duration: cc.stage, WarmupPerUser: true, Timeout: time.Minute}})
	if err != nil {
		return classFleet{}, nil, err
	}
	var fl classFleet
	peak := 0.0
	for _, s := range rec.Stages {
		if s.OutputTokenThroughput > peak {
			peak, fl.peakRate = s.OutputTokenThroughput, s.RequestThroughput
		}
	}
	for _, s := range rec.Stages {
		if s.OutputTokenThroughput >= 0.95*peak {
			fl.knee = int(s.Level)
			// A 2 s stage has too few requests for a p99; then its p90.
			if m := s.Metrics["ttft"]; m != nil {
				for _, p := range []*float64{m.P99, m.P90} {
					if p != nil {
						fl.kneeTTFT = time.Duration(*p * float64(time.Millisecond))
						break
					}
				}
			}
			break
		}
	}
	if fl.peakRate <= 0 || fl.knee == 0 {
		return fl, rec, fmt.Errorf("the sim served nothing in the sweep")
	}
	return fl, rec, nil
}

func (cc classCase) workload(mix string) bench.WorkloadSpec {
	return bench.WorkloadSpec{Endpoint: "chat", Model: "sim-model", Stream: true, InputTokens: fmt.Sprint(cc.input), OutputTokens: fmt.Sprint(cc.output),
		ForceOutputLength: true, Seed: 1, ClassMix: mix}
}

// classOnce starts a fresh sim and the arm's gateways, offers the arm's
// load and reads the record, the request logs and the sim's peak.
func (o *Overhead) classOnce(ctx context.Context, dir string, cc classCase, fl classFleet, a classArm) (classRun, error) {
	var procs []*proc
	var fr *front
	defer func() {
		fr.closeIfAny()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	sim, err := o.classSim("sim")
	if err != nil {
		return classRun{}, err
	}
	procs = append(procs, sim)
	prefix := fmt.Sprintf("ovclasses%d", time.Now().UnixNano())
	var addrs, logs []string
	for i := range a.replicas {
		logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", prefix, i))
		cfgPath := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", prefix, i))
		redis := ""
		if a.replicas > 1 {
			redis = o.Redis
		}
		gc := classGateway{sim: sim.addr, knee: fl.knee, reserve: classReserve(fl.knee, cc.reserve), inside: cc.inside, wait: fl.queueWait(cc.slo), slo: cc.slo,
			classes: a.classes, redis: redis, prefix: prefix, log: logPath}
		if err := os.WriteFile(cfgPath, []byte(gc.config()), 0o600); err != nil {
			return classRun{}, err
		}
		gw, err := startInfergate(o.Binary, fmt.Sprintf("gateway%d", i), "serve", "--config", cfgPath)
		if err != nil {
			return classRun{}, err
		}
		procs = append(procs, gw)
		addrs, logs = append(addrs, gw.addr), append(logs, logPath)
	}
	url := "http://" + addrs[0]
	if len(addrs) > 1 {
		if fr, err = startFront(addrs); err != nil {
			return classRun{}, err
		}
		url = "http://" + fr.addr
	}
	rate := a.load * fl.peakRate
	run := cc.run
	if a.load < 1 {
		// The idle baseline needs enough requests for a p99.
		run = max(run, time.Duration(120/rate*float64(time.Second)))
	}
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var peak float64
	wg.Go(func() { peak = samplePeak(sctx, sim.addr) })
	rec, err := bench.Run(ctx, bench.Config{URL: url, Workload: cc.workload(a.mix), Headers: [][2]string{{"X-Infergate-Timing", "1"}},
		SLOs: []verdict.SLO{{Metric: "ttft", MaxMs: float64(cc.slo.Milliseconds())}},
		Load: bench.LoadSpec{Mode: "open", Rate: rate, Arrival: "poisson", Duration: run, Timeout: time.Minute}})
	stopSampling()
	wg.Wait()
	if err != nil {
		return classRun{}, err
	}
	// The gateways write their logs as requests end; stop them (the
	// front first) so every line is out. A proc is stopped once only.
	fr.closeIfAny()
	for i := len(procs) - 1; i >= 1; i-- {
		procs[i].stop()
	}
	procs = procs[:1]
	out := classRun{stage: rec.Stages[0], logged: map[string]int{}, peak: peak}
	for _, p := range logs {
		if err := countLog(p, out.logged); err != nil {
			return classRun{}, err
		}
	}
	return out, nil
}

// classGateway is one gateway of an arm: one pool of the sim, every
// tenant allowed priority, a queue of twice the knee all open to the
// one tenant the load is; with redis, the caps shared.
type classGateway struct {
	sim string
	// knee is the cap default and flex share (and, without classes,
	// every request); reserve is priority's headroom above it
	// (classes.priority.reserved, the global cap knee+reserve). The
	// knee is where throughput stops rising, not where the sim's KV
	// cache ends: the memory-bound sim holds 42 requests of this size.
	knee, reserve int
	// inside: the reserve is within the knee (the cap the knee).
	inside bool
	// wait is the queue deadline of the loaded arms (see queueWait).
	wait time.Duration
	// slo is each class's TTFT objective, for attainment.
	slo                time.Duration
	classes            bool
	redis, prefix, log string
}

// cap is the global max_requests.
func (g classGateway) cap() int {
	if g.classes && !g.inside {
		return g.knee + g.reserve
	}
	return g.knee
}

// config is the gateway's configuration file. With classes the class
// reaches the sim as vLLM's priority, priority may wait 5 s for a slot
// and flex 20 s (it absorbs the shedding).
func (g classGateway) config() string {
	cfg := fmt.Sprintf(`pools:
  sim:
    backends:
      - url: http://%s
%sdefault_pool: sim
shaping:
  global:
    max_requests: %d
  queue:
    max_waiting: %d
    max_waiting_per_tenant: -1
    timeout: %v
  default_tenant:
    max_class: priority
`, g.sim, map[bool]string{true: "    class_priority: vllm\n"}[g.classes], g.cap(), 2*g.knee, g.wait)
	if g.redis != "" {
		cfg += fmt.Sprintf("  redis:\n    addr: %s\n    key_prefix: %s\n", g.redis, g.prefix)
	}
	cfg += fmt.Sprintf("classes:\n  enabled: %v\n", g.classes)
	if g.classes {
		cfg += fmt.Sprintf("  priority:\n    queue_timeout: 5s\n    slo_ttft: %[1]v\n    reserved: %[2]d\n  default:\n    queue_timeout: %[3]v\n    slo_ttft: %[1]v\n  flex:\n    queue_timeout: 20s\n    slo_ttft: %[1]v\n", g.slo, g.reserve, g.wait)
	}
	return cfg + fmt.Sprintf("request_log:\n  path: %s\n", g.log)
}

// classReserve is the requests the classes arms reserve for priority: a
// share of the knee, at least 1 and (for a reserve inside it) less than
// the knee.
func classReserve(knee int, share float64) int {
	return min(max(int(float64(knee)*share), 1), max(knee-1, 1))
}

// countLog adds the request log's lines at path to by, by outcome.
func countLog(path string, by map[string]int) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e struct {
			Outcome string `json:"outcome"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			by["unreadable"]++
			continue
		}
		by[e.Outcome]++
	}
	return sc.Err()
}

// samplePeak polls the sim's running and waiting requests every 50 ms
// until ctx ends and returns the most it saw at once.
func samplePeak(ctx context.Context, addr string) float64 {
	peak := 0.0
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if m, err := scrapeSim("http://" + addr + "/metrics"); err == nil {
			peak = math.Max(peak, m["vllm:num_requests_running"]+m["vllm:num_requests_waiting"])
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}

package overhead

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/verdict"
)

// Sessions: agent-like conversations (one system prompt and tool list
// shared by every session, a history that grows by each answer and the
// next question) on four sims whose prefix caches hold about a third of
// all the sessions' contexts: a session's follow-up turns find their
// history cached only where the session was served before. "sessions"
// runs them through one gateway per policy; "replicas" through four
// gateway processes behind a round-robin front, with a shared Redis and
// without, against one gateway. Each run is a fresh fleet (no run
// inherits another's cache) and ends by itself: every user holds one
// session of Turns turns.

// sessionCase is the workload and fleet of the session scenarios.
type sessionCase struct {
	sessions, turns int
	system, tools   int // tokens of the system prompt; tools in the list
	input, output   int // tokens of each question and answer
	think           time.Duration
	// ramp spreads the sessions' first turns (agents do not all start at
	// one instant); shorter than a session, so each user holds one.
	ramp time.Duration
	sims int
	// key is how sessions name themselves in the keyed arms.
	key string
}

// toolTokens is about what one of bench's --tools definitions counts.
const toolTokens = 110

func (o *Overhead) sessionCase() sessionCase {
	sc := sessionCase{sessions: 32, turns: 8, system: 1500, tools: 5, input: 200, output: 100, think: time.Second, ramp: 2 * time.Second, sims: 4, key: bench.SessionKeyPromptCacheKey}
	if o.Sessions > 0 {
		sc.sessions = o.Sessions
	}
	if o.Turns > 0 {
		sc.turns = o.Turns
	}
	return sc
}

// shared is the tokens every prompt starts with (system prompt, tools,
// framing); context the tokens one session adds over its turns.
func (sc sessionCase) shared() int  { return sc.system + sc.tools*toolTokens + 8 }
func (sc sessionCase) context() int { return sc.turns * (sc.input + sc.output + 8) }

// kv is each sim's KV cache: a third of every session's context and the
// shared prefix (so a sim holds its quarter of the sessions when they
// stay put, and a third of them when they wander), and never less than
// two whole last turns (a small run must still fit its longest request).
func (sc sessionCase) kv() int {
	third := (sc.shared() + sc.sessions*sc.context()) / 3
	return roundUp(max(third, 2*(sc.shared()+sc.context()+sc.output)), 16)
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

func (sc sessionCase) what() string {
	return fmt.Sprintf("%d agent sessions at once, starting over %v, %d turns each (a %d-token system prompt and %d tools, about %d tokens shared by all; %d-token questions, %d-token answers, %v think time); %d sims of %d KV tokens each (all sessions' contexts: %d tokens)",
		sc.sessions, sc.ramp, sc.turns, sc.system, sc.tools, sc.shared(), sc.input, sc.output, sc.think, sc.sims, sc.kv(), sc.shared()+sc.sessions*sc.context())
}

// sessionArm is one run of a round: a policy, whether sessions send
// their key, how many gateway replicas (behind the front when more than
// one) and whether they share a Redis.
type sessionArm struct {
	label, selection string
	keyed            bool
	replicas         int
	redis            bool
}

// sessionRun is what one run measured; a figure that could not be had
// (too few requests for a p90, no cached share reported) is NaN.
type sessionRun struct {
	firstP50, followP50, followP90 float64 // TTFT, ms
	cached                         float64 // follow-up turns' cached share
	cov                            float64 // requests per sim
	perSim                         []float64
	requests, failed               int
}

// sessionsScenario compares the policies through one gateway.
func (o *Overhead) sessionsScenario(ctx context.Context, dir string) error {
	sc := o.sessionCase()
	arms := []sessionArm{{"least_outstanding", "least_outstanding", false, 1, false}, {"prefix", "prefix", false, 1, false},
		{"prefix + session keys", "prefix", true, 1, false}}
	runs, err := o.sessionRounds(ctx, dir, "sessions", sc, arms)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Report, "### sessions\n\n%s; %d rounds per policy, each on a fresh fleet, order rotating; medians over rounds (range). Turns 2+ are the follow-up turns; the cached share is the sims' own count (usage cached_tokens over prompt_tokens); CoV is the spread of requests over the sims (standard deviation / mean).\n\n", sc.what(), o.Rounds)
	o.sessionTable(arms, runs, nil)
	lo, keyed := runs[arms[0].label], runs[arms[2].label]
	p90lo, p90k := medianOf(lo, func(r sessionRun) float64 { return r.followP90 }), medianOf(keyed, func(r sessionRun) float64 { return r.followP90 })
	cached := medianOf(keyed, func(r sessionRun) float64 { return r.cached })
	fmt.Fprintf(o.Report, "Against the issue's targets (medians):\n\n| target | reached |\n|---|---|\n")
	fmt.Fprintf(o.Report, "| with session keys, p90 TTFT of turns 2–%d ≤ 1/3 of least_outstanding's | %.0f ms against %.0f ms: %s |\n", sc.turns, p90k, p90lo, ratioText(p90k, p90lo, 1.0/3, false))
	fmt.Fprintf(o.Report, "| with session keys, cached share of follow-up turns ≥ 0.85 | %.3f: %s |\n\n", cached, met(cached >= 0.85)) // NaN: not met
	return nil
}

// replicasScenario runs the keyed sessions through one gateway and
// through replicas behind a round-robin front, with a shared Redis
// (when o.Redis answers) and without.
func (o *Overhead) replicasScenario(ctx context.Context, dir string) error {
	sc := o.sessionCase()
	n := o.Replicas
	if n == 0 {
		n = 4
	}
	arms := []sessionArm{{"1 gateway", "prefix", true, 1, false}}
	redis := o.Redis != "" && reachable(o.Redis)
	if redis {
		arms = append(arms, sessionArm{fmt.Sprintf("%d replicas, shared Redis", n), "prefix", true, n, true})
	}
	arms = append(arms, sessionArm{fmt.Sprintf("%d replicas, each its own index", n), "prefix", true, n, false})
	runs, err := o.sessionRounds(ctx, dir, "replicas", sc, arms)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Report, "### replicas\n\n%s; prefix selection, sessions sending %s; one gateway against %d gateway processes behind a round-robin HTTP front on loopback (each request to the next replica)", sc.what(), sc.key, n)
	if redis {
		fmt.Fprintf(o.Report, ", with the Redis at %s given to every replica (serve --redis) and without", o.Redis)
	} else {
		fmt.Fprintf(o.Report, "; no Redis answered at %q, so the shared arm was left out", o.Redis)
	}
	fmt.Fprintf(o.Report, "; %d rounds per arm, each on a fresh fleet, order rotating; medians over rounds (range).\n\n", o.Rounds)
	single := medianOf(runs[arms[0].label], func(r sessionRun) float64 { return r.cached })
	o.sessionTable(arms, runs, &single)
	fmt.Fprintf(o.Report, "Against the issue's targets (medians):\n\n| target | arm | reached |\n|---|---|---|\n")
	for _, a := range arms[1:] {
		rs := runs[a.label]
		c, cov := medianOf(rs, func(r sessionRun) float64 { return r.cached }), medianOf(rs, func(r sessionRun) float64 { return r.cov })
		fmt.Fprintf(o.Report, "| cached share of follow-up turns ≥ 0.95× one gateway's | %s | %.3f against %.3f: %s |\n", a.label, c, single, ratioText(c, single, 0.95, true))
		fmt.Fprintf(o.Report, "| CoV of requests per backend ≤ 0.1 | %s | %.3f: %s |\n", a.label, cov, met(cov <= 0.1))
	}
	fmt.Fprintln(o.Report)
	return nil
}

// sessionRounds runs every arm o.Rounds times, the order rotating.
func (o *Overhead) sessionRounds(ctx context.Context, dir, name string, sc sessionCase, arms []sessionArm) (map[string][]sessionRun, error) {
	runs := map[string][]sessionRun{}
	for r := range max(o.Rounds, 1) {
		for k := range arms {
			a := arms[(r+k)%len(arms)]
			run, err := o.sessionOnce(ctx, dir, sc, a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.label, err)
			}
			runs[a.label] = append(runs[a.label], run)
			fmt.Fprintf(o.Progress, "%s round %d %s: turns 2+ ttft p90 %.0f ms, cached %.3f, CoV %.3f, %d failed\n", name, r+1, a.label, run.followP90, run.cached, run.cov, run.failed)
		}
	}
	return runs, nil
}

// sessionTable writes the arms' figures; with single, each arm's cached
// share against it.
func (o *Overhead) sessionTable(arms []sessionArm, runs map[string][]sessionRun, single *float64) {
	head, rule := "| arm | turn 1 TTFT p50 | turns 2+ TTFT p50 | turns 2+ TTFT p90 | turns 2+ cached | CoV of requests per sim | requests | failed |", "|---|---:|---:|---:|---:|---:|---:|---:|"
	if single != nil {
		head, rule = head+" cached × one gateway |", rule+"---:|"
	}
	fmt.Fprintln(o.Report, head)
	fmt.Fprintln(o.Report, rule)
	for _, a := range arms {
		rs := runs[a.label]
		failed, requests := 0, 0
		for _, r := range rs {
			failed, requests = failed+r.failed, requests+r.requests
		}
		fmt.Fprintf(o.Report, "| %s | %s | %s | %s | %s | %s | %d | %d |", a.label,
			medRange(rs, func(r sessionRun) float64 { return r.firstP50 }, "%.0f ms"), medRange(rs, func(r sessionRun) float64 { return r.followP50 }, "%.0f ms"),
			medRange(rs, func(r sessionRun) float64 { return r.followP90 }, "%.0f ms"), medRange(rs, func(r sessionRun) float64 { return r.cached }, "%.3f"),
			medRange(rs, func(r sessionRun) float64 { return r.cov }, "%.3f"), requests, failed)
		if single != nil {
			fmt.Fprintf(o.Report, " %.2f× |", ratio(medianOf(rs, func(r sessionRun) float64 { return r.cached }), *single))
		}
		fmt.Fprintln(o.Report)
	}
	fmt.Fprintln(o.Report)
}

// sessionOnce starts a fleet, the arm's gateways (and front), runs the
// sessions with infergate bench and reads its record and the sims'
// request counts.
func (o *Overhead) sessionOnce(ctx context.Context, dir string, sc sessionCase, a sessionArm) (sessionRun, error) {
	var procs []*proc
	var fr *front
	defer func() {
		fr.closeIfAny()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	var sims []*proc
	gwArgs := []string{"serve", "--selection", a.selection}
	for i := range sc.sims {
		s, err := startInfergate(o.Binary, fmt.Sprintf("sim%d", i), "sim", "--kv-cache-tokens", strconv.Itoa(sc.kv()), "--seed", strconv.Itoa(i+1))
		if err != nil {
			return sessionRun{}, err
		}
		procs = append(procs, s)
		sims = append(sims, s)
		gwArgs = append(gwArgs, "--upstream", "http://"+s.addr)
	}
	if a.redis {
		gwArgs = append(gwArgs, sharedRoutingArgs(o.Redis)...)
	}
	var addrs []string
	for i := range max(a.replicas, 1) {
		gw, err := startInfergate(o.Binary, fmt.Sprintf("gateway%d", i), gwArgs...)
		if err != nil {
			return sessionRun{}, err
		}
		procs = append(procs, gw)
		addrs = append(addrs, gw.addr)
	}
	url := "http://" + addrs[0]
	if len(addrs) > 1 {
		var err error
		if fr, err = startFront(addrs); err != nil {
			return sessionRun{}, err
		}
		url = "http://" + fr.addr
	}
	out := filepath.Join(dir, "sessions.json")
	ba := []string{"bench", "--url", url, "--model", "sim-model", "--sessions", strconv.Itoa(sc.sessions), "--turns", strconv.Itoa(sc.turns),
		"--think-time", sc.think.String(), "--ramp-up", sc.ramp.String(), "--prefix-groups", "1", "--prefix-tokens", strconv.Itoa(sc.system), "--tools", strconv.Itoa(sc.tools),
		"--input-tokens", strconv.Itoa(sc.input), "--output-tokens", strconv.Itoa(sc.output), "--force-output-length",
		"--warmup", "0", "--timeout", "60s", "--quiet", "--out", out}
	if a.keyed {
		ba = append(ba, "--session-key", sc.key)
	}
	// Every user holds one session, so the run ends by itself; the
	// deadline is for a fleet that stopped answering.
	bctx, cancel := context.WithTimeout(ctx, time.Duration(sc.turns)*(sc.think+90*time.Second))
	defer cancel()
	if b, err := exec.CommandContext(bctx, o.Binary, ba...).CombinedOutput(); err != nil {
		return sessionRun{}, fmt.Errorf("bench: %v: %s", err, b)
	}
	rec, err := readRecord(out)
	if err != nil {
		return sessionRun{}, err
	}
	run := sessionFigures(rec.Stages[0])
	for _, s := range sims {
		n, err := simRequests(s.addr)
		if err != nil {
			return sessionRun{}, err
		}
		run.perSim = append(run.perSim, n)
	}
	run.cov = cov(run.perSim)
	return run, nil
}

// sharedRoutingArgs are the serve flags that give gateway replicas a
// Redis to share through.
func sharedRoutingArgs(redis string) []string { return []string{"--redis", redis} }

// sessionFigures reads a session run's figures from its stage.
func sessionFigures(s *bench.Summary) sessionRun {
	// NaN: a figure the run had too few requests for, or the backends
	// did not report.
	run := sessionRun{followP50: math.NaN(), followP90: math.NaN(), cached: math.NaN(), requests: s.Requests, failed: s.Failed}
	if len(s.Turns) > 0 {
		run.firstP50 = s.Turns[0].TTFTP50
	}
	if f := s.FollowUps; f != nil {
		run.followP50 = f.TTFTP50
		if f.TTFTP90 != nil {
			run.followP90 = *f.TTFTP90
		}
		if f.CachedShare != nil {
			run.cached = *f.CachedShare
		}
	}
	return run
}

// readRecord reads a bench record with at least one stage.
func readRecord(path string) (*bench.Record, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec bench.Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("bench record: %w", err)
	}
	if len(rec.Stages) == 0 {
		return nil, fmt.Errorf("bench record %s: no stage", path)
	}
	return &rec, nil
}

// simRequests is the requests a sim finished (vllm:request_success_total).
func simRequests(addr string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s, err := promtext.Parse(resp.Body, time.Now())
	if err != nil {
		return 0, err
	}
	n, _ := s.Sum("vllm:request_success_total")
	return n, nil
}

// cov is the coefficient of variation of xs: the population standard
// deviation over the mean (0 for no spread, or no requests).
func cov(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return math.Sqrt(sq/float64(len(xs))) / mean
}

// reachable reports whether something accepts TCP at addr.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// figures is f over the runs that have it (not NaN).
func figures(rs []sessionRun, f func(sessionRun) float64) []float64 {
	var xs []float64
	for _, r := range rs {
		if v := f(r); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return xs
}

// medianOf is the median over the runs that have the figure, NaN when
// none has.
func medianOf(rs []sessionRun, f func(sessionRun) float64) float64 {
	xs := figures(rs, f)
	if len(xs) == 0 {
		return math.NaN()
	}
	return verdict.Median(xs)
}

// medRange is the median over rounds and its range, "–" when no round
// had the figure.
func medRange(rs []sessionRun, f func(sessionRun) float64, format string) string {
	xs := figures(rs, f)
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", verdict.Median(xs), slices.Min(xs), slices.Max(xs))
}

// ratioText says a/b and whether it meets the bound: at least bound
// (atLeast) or at most.
func ratioText(a, b, bound float64, atLeast bool) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "no figure (too few requests for it)"
	}
	r := a / b
	return fmt.Sprintf("%.2f×, %s", r, met(atLeast && r >= bound || !atLeast && r <= bound))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// closeIfAny closes a front that was started.
func (f *front) closeIfAny() {
	if f != nil {
		f.Close()
	}
}

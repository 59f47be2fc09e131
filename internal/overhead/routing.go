package overhead

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/engine"
	"github.com/infergate/infergate/internal/promtext"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/verdict"
)

// Routing: the same fleet of four simulators (prefix caching on) behind
// gateways of different selection policies, one fresh fleet per run so no
// run inherits another's cache, the policies' order rotating each round,
// loaded by infergate bench in open loop.

// routingCase is one routing comparison.
type routingCase struct {
	name, what string
	kv         int      // each sim's KV cache, tokens
	rate       float64  // requests per second
	bench      []string // workload flags
	arms       []routingArm
}

// routingArm is one run of a round: a policy, and whether one sim of the
// fleet is the slow one.
type routingArm struct {
	label, selection string
	slow             bool
}

// slowSim makes one replica a third as fast: slower prefill and steps.
var slowSim = []string{"--prefill-tokens-per-s", "3300", "--decode-base-ms", "24"}

func routingCases() map[string]routingCase {
	return map[string]routingCase{
		"routing-prefix": {
			name: "routing-prefix", kv: 22528, rate: 16,
			what:  "16 groups × 4,000-token system prompts, 200-token questions, 100 output tokens; 4 sims of 22,528 KV tokens each (5 prefixes); open loop 16 req/s",
			bench: []string{"--prefix-groups", "16", "--prefix-tokens", "4000", "--input-tokens", "200", "--output-tokens", "100"},
			arms:  []routingArm{{"least_outstanding", "least_outstanding", false}, {"prefix", "prefix", false}},
		},
		"routing-unique": {
			name: "routing-unique", kv: 22528, rate: 12,
			what:  "unique 2,000-token prompts, 100 output tokens; the same fleet; open loop 12 req/s; least_outstanding twice (A/A)",
			bench: []string{"--input-tokens", "2000", "--output-tokens", "100"},
			arms:  []routingArm{{"least_outstanding", "least_outstanding", false}, {"least_outstanding (A/A)", "least_outstanding", false}, {"prefix", "prefix", false}},
		},
		"routing-slow": {
			name: "routing-slow", kv: 22528, rate: 12,
			what:  "unique 1,000-token prompts, 100 output tokens; open loop 12 req/s; one of the 4 sims a third as fast (" + strings.Join(slowSim, " ") + "), against the healthy fleet",
			bench: []string{"--input-tokens", "1000", "--output-tokens", "100"},
			arms: []routingArm{{"healthy fleet, least_outstanding", "least_outstanding", false}, {"least_outstanding", "least_outstanding", true},
				{"load", "load", true}, {"prefix", "prefix", true}},
		},
	}
}

// routingRun is what one run measured.
type routingRun struct {
	ttftP90, ttftP99, outTPS float64
	hit                      float64 // the sims' own prefix hit ratio
	slowShare                float64 // the slow sim's share of the requests
	failed                   int
}

func (o *Overhead) routing(ctx context.Context, dir string, rc routingCase) error {
	runs := map[string][]routingRun{}
	for r := range o.Rounds {
		for k := range rc.arms {
			a := rc.arms[(r+k)%len(rc.arms)]
			run, err := o.routingOnce(ctx, dir, rc, a)
			if err != nil {
				return fmt.Errorf("%s: %w", a.label, err)
			}
			runs[a.label] = append(runs[a.label], run)
			fmt.Fprintf(o.Progress, "%s round %d %s: ttft p90 %.0f ms, %.0f tok/s, hit %.2f\n", rc.name, r+1, a.label, run.ttftP90, run.outTPS, run.hit)
		}
	}
	fmt.Fprintf(o.Report, "### %s\n\n%s; %d rounds of %v per policy, each on a fresh fleet, order rotating; medians over rounds (range).\n\n", rc.name, rc.what, o.Rounds, o.RoundTime)
	fmt.Fprintln(o.Report, "| policy | TTFT p90 | TTFT p99 | output tok/s | sims' prefix hit ratio | slow sim's share | failed |")
	fmt.Fprintln(o.Report, "|---|---:|---:|---:|---:|---:|---:|")
	med := func(rs []routingRun, f func(routingRun) float64, format string) string {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return fmt.Sprintf(format+" ("+format+"–"+format+")", verdict.Median(xs), slices.Min(xs), slices.Max(xs))
	}
	for _, a := range rc.arms {
		rs := runs[a.label]
		share := "–"
		if a.slow {
			share = med(rs, func(r routingRun) float64 { return 100 * r.slowShare }, "%.1f%%")
		}
		failed := 0
		for _, r := range rs {
			failed += r.failed
		}
		fmt.Fprintf(o.Report, "| %s | %s | %s | %s | %s | %s | %d |\n", a.label,
			med(rs, func(r routingRun) float64 { return r.ttftP90 }, "%.0f ms"), med(rs, func(r routingRun) float64 { return r.ttftP99 }, "%.0f ms"),
			med(rs, func(r routingRun) float64 { return r.outTPS }, "%.0f"), med(rs, func(r routingRun) float64 { return r.hit }, "%.2f"), share, failed)
	}
	fmt.Fprintln(o.Report)
	return nil
}

// routingOnce starts a fleet and a gateway of a's policy, runs the load
// and reads what the sims and the gateway counted.
func (o *Overhead) routingOnce(ctx context.Context, dir string, rc routingCase, a routingArm) (routingRun, error) {
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	args := []string{"serve", "--selection", a.selection}
	var sims []*proc
	for i := range 4 {
		sa := []string{"sim", "--kv-cache-tokens", strconv.Itoa(rc.kv), "--seed", strconv.Itoa(i + 1)}
		if a.slow && i == 3 {
			sa = append(sa, slowSim...)
		}
		s, err := startInfergate(o.Binary, fmt.Sprintf("sim%d", i), sa...)
		if err != nil {
			return routingRun{}, err
		}
		procs = append(procs, s)
		sims = append(sims, s)
		args = append(args, "--upstream", "http://"+s.addr)
	}
	gw, err := startInfergate(o.Binary, "gateway", args...)
	if err != nil {
		return routingRun{}, err
	}
	procs = append(procs, gw)
	out := filepath.Join(dir, "routing.json")
	ba := append([]string{"bench", "--url", "http://" + gw.addr, "--rate", strconv.FormatFloat(rc.rate, 'f', -1, 64),
		"--duration", o.RoundTime.String(), "--warmup", "3s", "--quiet", "--out", out}, rc.bench...)
	cmd := exec.CommandContext(ctx, o.Binary, ba...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return routingRun{}, fmt.Errorf("bench: %v: %s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return routingRun{}, err
	}
	var rec bench.Record
	if err := json.Unmarshal(raw, &rec); err != nil || len(rec.Stages) == 0 {
		return routingRun{}, fmt.Errorf("bench record: %v", err)
	}
	s := rec.Stages[0]
	run := routingRun{outTPS: s.OutputTokenThroughput, failed: s.Failed}
	if t := s.Metrics["ttft"]; t != nil && t.P90 != nil && t.P99 != nil {
		run.ttftP90, run.ttftP99 = *t.P90, *t.P99
	}
	var hits, queries float64
	for _, sp := range sims {
		rd, err := simPrefix(sp.addr)
		if err != nil {
			return routingRun{}, err
		}
		hits += rd.PrefixHits
		queries += rd.PrefixQueries
	}
	if queries > 0 {
		run.hit = hits / queries
	}
	if a.slow {
		st, err := (&adminapi.Client{URL: gw.admin, HTTP: safehttp.Client(10 * time.Second)}).Stats(ctx)
		if err != nil {
			return routingRun{}, err
		}
		var total, slow float64
		for _, b := range st.Gateway.Backends {
			n := 0.0
			for _, v := range b.Routes {
				n += float64(v)
			}
			total += n
			if b.Name == "http://"+sims[3].addr {
				slow = n
			}
		}
		if total > 0 {
			run.slowShare = slow / total
		}
	}
	return run, nil
}

func simPrefix(addr string) (reading, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return reading{}, err
	}
	defer resp.Body.Close()
	s, err := promtext.Parse(resp.Body, time.Now())
	if err != nil {
		return reading{}, err
	}
	r := engine.Read(s)
	return reading{PrefixHits: r.PrefixHits, PrefixQueries: r.PrefixQueries}, nil
}

type reading struct{ PrefixHits, PrefixQueries float64 }

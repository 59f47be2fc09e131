package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The sessions and replicas scenarios at a tiny size, as processes: every
// arm runs on its own fleet, ends by itself, and reports its row with
// every turn answered (which backend a session lands on is the routing's
// business, not asserted here); the replicas run behind the harness's
// round-robin front, with the test Redis when there is one. The two
// scenarios are separate runs, side by side (parallel subtests): each
// only waits on its sims, and one run of both took 30 s.
func TestOverheadSessionScenarios(t *testing.T) {
	t.Parallel()
	redis := os.Getenv("INFERGATE_TEST_REDIS")
	for _, sc := range []struct {
		name    string
		arms    []string
		targets []string
	}{
		{"sessions", []string{"least_outstanding", "prefix", "prefix + session keys"},
			[]string{"p90 TTFT of turns 2–2 ≤ 1/3", "cached share of follow-up turns ≥ 0.85"}},
		{"replicas", []string{"1 gateway", "2 replicas, each its own index"},
			[]string{"≥ 0.95× one gateway's", "CoV of requests per backend ≤ 0.1"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			code, out := exitCodeStdout(t, "overhead", "--scenarios", sc.name, "--rounds", "1", "--sessions", "2", "--turns", "2",
				"--replicas", "2", "--nginx", "none", "--redis", redis)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, out)
			}
			arms := sc.arms
			if sc.name == "replicas" {
				if redis != "" {
					arms = append(arms, "2 replicas, shared Redis")
				} else if !strings.Contains(out, "the shared arm was left out") {
					t.Errorf("no Redis, and the report does not say the shared arm was left out:\n%s", out)
				}
			}
			for _, a := range arms {
				// The arm's row: 2 sessions × 2 turns, none failed, the
				// cached share a number.
				row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(a) + ` \| .* \| (0\.\d{3}|1\.000) \(.*\) \| \d\.\d{3} \(.*\) \| 4 \| 0 \|`)
				if !row.MatchString(out) {
					t.Errorf("no row for %q with 4 requests, 0 failed:\n%s", a, out)
				}
			}
			for _, target := range sc.targets {
				if !strings.Contains(out, target) {
					t.Errorf("the report does not judge %q:\n%s", target, out)
				}
			}
		})
	}
}

// The stream suite at a tiny size, as processes: two rounds of three
// streams per target, each stream its role chunk and 64 deltas, the
// figures in both tables and the direct per-token median at the pace.
func TestOverheadStreamSuite(t *testing.T) {
	t.Parallel()
	code, out := exitCodeStdout(t, "overhead", "--scenarios", "stream1", "--rounds", "2", "--streams", "3", "--nginx", "none")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	num := `([0-9.]+) ms`
	row := regexp.MustCompile(`(?m)^\| direct \| 6 \| ` + num + ` \| - \| - \| ` + num + ` \| ` + num + ` \| ` + num + ` \|$`)
	m := row.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no direct row of 6 streams with a TTFT median and three per-token figures:\n%s", out)
	}
	if ttft, gap := atof(t, m[1]), atof(t, m[2]); ttft < 20 || ttft > 30 || gap < 19 || gap > 25 {
		t.Errorf("direct TTFT p50 %v ms, per-token p50 %v ms: want each near the 20 ms pace", ttft, gap)
	}
	if !regexp.MustCompile(`(?m)^\| infergate \| 6 \| `).MatchString(out) {
		t.Errorf("no infergate row of 6 streams:\n%s", out)
	}
	signed := `[+-][0-9.]+ ms`
	added := regexp.MustCompile(`(?m)^\| infergate \| ` + signed + ` \| - \| - \| ` + signed + ` \| ` + signed + ` \| ` + signed + ` \| [+-][0-9.]+ to ` + signed + ` \| - \|$`)
	if !added.MatchString(out) {
		t.Errorf("no added row for infergate:\n%s", out)
	}
	// 6 streams carry no TTFT p99; the per-token p99 (of 378 gaps) is judged.
	if !regexp.MustCompile(`Targets \(issue 46\): infergate's added TTFT p99 ≤ 0.3 ms: -; its added per-token p99 ≤ 0.05 ms: [+-][0-9.]+ ms, (met|not met)\.`).MatchString(out) {
		t.Errorf("no judgement of the targets:\n%s", out)
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

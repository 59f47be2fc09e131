package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The sessions and replicas scenarios at a tiny size, as processes: every
// arm runs on its own fleet, ends by itself, and reports its row with
// every turn answered (which backend a session lands on is the routing's
// business, not asserted here); the replicas run behind the harness's
// round-robin front, with the test Redis when there is one.
func TestOverheadSessionScenarios(t *testing.T) {
	t.Parallel()
	redis := os.Getenv("INFERGATE_TEST_REDIS")
	code, out := exitCodeStdout(t, "overhead", "--scenarios", "sessions,replicas", "--rounds", "1", "--sessions", "2", "--turns", "2",
		"--replicas", "2", "--nginx", "none", "--redis", redis)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	arms := []string{"least_outstanding", "prefix", "prefix + session keys", "1 gateway", "2 replicas, each its own index"}
	if redis != "" {
		arms = append(arms, "2 replicas, shared Redis")
	} else if !strings.Contains(out, "the shared arm was left out") {
		t.Errorf("no Redis, and the report does not say the shared arm was left out:\n%s", out)
	}
	for _, a := range arms {
		// The arm's row: 2 sessions × 2 turns, none failed, the cached
		// share a number.
		row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(a) + ` \| .* \| (0\.\d{3}|1\.000) \(.*\) \| \d\.\d{3} \(.*\) \| 4 \| 0 \|`)
		if !row.MatchString(out) {
			t.Errorf("no row for %q with 4 requests, 0 failed:\n%s", a, out)
		}
	}
	for _, target := range []string{"p90 TTFT of turns 2–2 ≤ 1/3", "cached share of follow-up turns ≥ 0.85", "≥ 0.95× one gateway's", "CoV of requests per backend ≤ 0.1"} {
		if !strings.Contains(out, target) {
			t.Errorf("the report does not judge %q:\n%s", target, out)
		}
	}
}

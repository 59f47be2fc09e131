package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/internal/svgchart"
	"github.com/infergate/infergate/verdict"
)

// exitCode runs the binary and returns its status and output.
func exitCode(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return exitCodeEnv(t, nil, args...)
}

// exitCodeStdout is exitCode with stdout alone: what a script reads of a
// --json command, whose warnings go to stderr.
func exitCodeStdout(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return exitOf(t, args, out, err, stderr.String())
}

// exitCodeEnv is exitCode with variables added to the environment.
func exitCodeEnv(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	return exitOf(t, args, out, err, "")
}

// exitOf is a finished run's status and output; a run that could not
// start fails t, with stderr when it was kept apart.
func exitOf(t *testing.T, args []string, out []byte, err error, stderr string) (int, string) {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("infergate %v: %v\n%s", args, err, stderr)
	return -1, ""
}

// A baseline, a slower candidate and a rerun, all real processes: compare
// says ROLL BACK for the slower one with exit 1, refuses other conditions
// with exit 3, and keeps its journal. The three benches run side by side,
// each against its own sim, so the baseline and the candidate see the
// same machine (other tests run beside this one): one after the other, a
// load that came or went between them would be measured as the change.
func TestBenchCompareEndToEnd(t *testing.T) {
	t.Parallel()
	fast := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "40ms", "--itl", "2ms").url(t)
	fast2 := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "40ms", "--itl", "2ms").url(t)
	slow := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "60ms", "--itl", "2ms").url(t)
	dir := t.TempDir()
	var wg sync.WaitGroup
	run := func(url, out string, extra ...string) {
		wg.Go(func() {
			args := append([]string{"bench", "--url", url, "--input-tokens", "32", "--output-tokens", "8", "--concurrency", "4",
				"--requests", "60", "--warmup", "4", "--out", filepath.Join(dir, out), "--csv", filepath.Join(dir, out+".csv")}, extra...)
			cmd := exec.Command(binary, args...)
			output, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(output), "requests 60: 60 ok") {
				t.Errorf("bench %v: %v\n%s", args, err, output)
			}
		})
	}
	run(fast, "base.json")
	run(slow, "slow.json")
	run(fast2, "other.json", "--input-tokens", "64")
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rec, err := bench.LoadRecord(filepath.Join(dir, "base.json"))
	if err != nil || rec.Conditions.Workload.Model != "sim-model" {
		t.Fatalf("record: %v (model found through /v1/models: %q)", err, rec.Conditions.Workload.Model)
	}
	journal := filepath.Join(dir, "journal.jsonl")
	code, out := exitCode(t, "compare", filepath.Join(dir, "base.json"), filepath.Join(dir, "slow.json"), "--journal", journal, "--change", "slower build")
	if code != 1 || !strings.Contains(out, "verdict: ROLL BACK") {
		t.Errorf("compare base slow: exit %d, want 1 and ROLL BACK\n%s", code, out)
	}
	code, out = exitCode(t, "compare", filepath.Join(dir, "base.json"), filepath.Join(dir, "other.json"))
	if code != 3 || !strings.Contains(out, "workload.input_tokens: 32 ≠ 64") {
		t.Errorf("compare mismatched: exit %d, want 3 naming the field\n%s", code, out)
	}
	if code, _ = exitCode(t, "compare", filepath.Join(dir, "base.json"), filepath.Join(dir, "other.json"), "--force"); code == 3 {
		t.Error("--force still refused")
	}
	lines := readFileLines(t, journal)
	if len(lines) != 1 || !strings.Contains(lines[0], `"slower build"`) || !strings.Contains(lines[0], `"ROLL BACK"`) {
		t.Errorf("journal %q", lines)
	}
}

// TestDemoRunsOnItsOwn runs the whole workflow on its defaults, shortened
// by a 10-point quality tolerance (each measurement sized to settle it:
// 56 requests, 36 for a shadow test): tune's baseline, diagnosis and cap
// steps (each kept or rolled back, and the gateway left on the
// configuration the journal names), then the two shadow tests, each
// saying what is in force; every record and report lands in the folder.
//
// Serial: the demo's decisions depend on the machine. Run beside the
// parallel tests (-parallel 4, 2 cores) its baseline once diagnosed "none"
// (the KV cache 97% full but nothing queued yet) instead of memory, so
// tune had no step to take.
func TestDemoRunsOnItsOwn(t *testing.T) {
	dir := t.TempDir()
	code, out := exitCode(t, "demo", "--quality-tolerance", "10%", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo exit %d\n%s", code, out)
	}
	for _, want := range []string{"probe http://127.0.0.1:", "== 1. tune", "open loop at 24 requests/s", fmt.Sprintf("size: each measurement sends %d requests", 2*verdict.SettlingSize(0.1)),
		"within the 10-point tolerance", "rule: a step is kept when", "== baseline", "== diagnose: memory",
		"== step 1, cap: cap the gateway at", "+shaping.global.max_requests: ", "verdict: ", "== summary", "the gateway runs configuration version",
		"== 2. shadow test", "== 3. shadow test", "in force at the gateway: ", fmt.Sprintf("size: %d requests", 2*verdict.PairedSettlingSize(0.1)), "paired change", "in short: ",
		"== decisions\ntune step 1: ", "\nshadow int4: ", "\nshadow kv-share: ", "records and reports: " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q\n%s", want, out)
		}
	}
	for _, f := range []string{"01-baseline.json", "2-diagnose.json", "2-diagnose.html", "1-tune.html", "tune-journal.jsonl", "2-shadow-int4.html", "3-shadow-kv-share.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The folder opens on its index: a link to each page with its
	// verdict, the shadow tests' coloured.
	index, err := os.ReadFile(filepath.Join(dir, "index.html"))
	for _, want := range []string{`<a href="1-tune.html">`, `<a href="2-diagnose.html">`, `<a href="2-shadow-int4.html">`, `<a href="3-shadow-kv-share.html">`,
		"kept ", "bottleneck: memory", svgchart.CSP} {
		if err != nil || !strings.Contains(string(index), want) {
			t.Errorf("index.html lacks %q (%v)\n%s", want, err, index)
		}
	}
	if n := strings.Count(string(index), `class="good"`) + strings.Count(string(index), `class="bad"`) + strings.Count(string(index), `class="unsure"`); n < 3 {
		t.Errorf("%d coloured verdicts in the index, want tune's and both shadow tests'\n%s", n, index)
	}
	rec, err := bench.LoadRecord(filepath.Join(dir, "01-baseline.json"))
	if err != nil || rec.Conditions.GatewayConfigHash == "" || rec.Conditions.GatewaySettings["pools.default.backends[0].url"] == "" || len(rec.Conditions.SLOs) != 2 {
		t.Errorf("demo record: %v, gateway config hash %q, settings %v, SLOs %v (want the gateway's and two)", err, rec.Conditions.GatewayConfigHash, rec.Conditions.GatewaySettings, rec.Conditions.SLOs)
	}
	var rep struct {
		Bottleneck string `json:"bottleneck"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "2-diagnose.json")); err != nil || json.Unmarshal(b, &rep) != nil || rep.Bottleneck != "memory" {
		t.Errorf("2-diagnose.json: %v %q", err, rep.Bottleneck)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	url := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "30ms", "--itl", "1ms").url(t)
	code, out := exitCode(t, "probe", url, "-n", "3")
	if code != 0 || !strings.Contains(out, "p50") || strings.Count(out, "\n   ") < 3 {
		t.Fatalf("probe: exit %d\n%s", code, out)
	}
}

func TestBenchRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--url", "ftp://x", "--model", "m"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--input-tokens", "0"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--rate", "-1"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--slo", "ttft"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--sweep", "4,2"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--sessions", "2", "--session-key", "cookie"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--sessions", "2", "--session-key", "header:a b"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--session-key", "prompt_cache_key"},
		{"bench", "--url", "http://127.0.0.1:1", "--model", "m", "--tools", "-1"},
		{"compare", "one.json"},
	} {
		code, out := exitCode(t, args...)
		if code == 0 || strings.Contains(out, "panic") {
			t.Errorf("infergate %v: exit %d\n%s", args, code, out)
		}
	}
}

func readFileLines(t *testing.T, path string) []string {
	t.Helper()
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// serve --max-concurrency caps what reaches the backend: the bench at 6
// users through a gateway capped at 2 (queue on) sees no failure, and its
// TTFT shows the queue. (TestQueueHoldsTheCapAtTheBackend counts the
// backend's peak.)
func TestServeMaxConcurrency(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "30ms", "--itl", "2ms").url(t)
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", sim, "--max-concurrency", "2", "--max-queue", "100").url(t)
	dir := t.TempDir()
	code, out := exitCode(t, "bench", "--url", gw, "--concurrency", "6", "--requests", "30", "--input-tokens", "16", "--output-tokens", "5",
		"--out", filepath.Join(dir, "r.json"), "--events", filepath.Join(dir, "e.jsonl"))
	if code != 0 || !strings.Contains(out, "requests 30: 30 ok") {
		t.Fatalf("bench through the capped gateway: exit %d\n%s", code, out)
	}
	assertPrivate(t, filepath.Join(dir, "r.json"), filepath.Join(dir, "e.jsonl"))
	rec, err := bench.LoadRecord(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Six users through two slots: each request waits for about two others.
	if ttft := rec.Stages[0].Metrics["ttft"].P50; ttft < 60 {
		t.Errorf("TTFT p50 %.1f ms through a cap of 2 at 6 users, want the queue to show (≥ 60 ms)", ttft)
	}
}

// The gateway's request log replays: bench through the gateway, then
// bench --replay of its log straight to the sim sends the same requests.
func TestRequestLogReplays(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "5ms", "--itl", "1ms").url(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	conf := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "server:\n  listen: 127.0.0.1:0\npools:\n  gpu:\n    backends:\n      - url: %s\ndefault_pool: gpu\nrequest_log:\n  path: %s\n  body_bytes: 65536\n", sim, logPath), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := start(t, "serve", "--config", conf)
	url := gw.url(t)
	if code, out := exitCode(t, "bench", "--url", url, "--concurrency", "2", "--requests", "10", "--warmup", "0", "--input-tokens", "8", "--output-tokens", "4"); code != 0 {
		t.Fatalf("bench: %d\n%s", code, out)
	}
	gw.cmd.Process.Signal(syscall.SIGTERM)
	if err := gw.wait(t); err != nil {
		t.Fatalf("gateway exit: %v", err)
	}
	code, out := exitCode(t, "bench", "--url", sim, "--replay", logPath, "--speedup", "10", "--out", filepath.Join(dir, "replay.json"))
	if code != 0 || !strings.Contains(out, "requests 10: 10 ok") {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
	rec, err := bench.LoadRecord(filepath.Join(dir, "replay.json"))
	if err != nil || rec.Conditions.Workload.ReplaySHA256 == "" {
		t.Fatalf("replay record: %v", err)
	}
}

// bench --direct-url pairs each request through the gateway with the same
// one straight to the backend: a backend 50 ms from its first token shows
// through both, and what the gateway adds is small and recorded.
func TestBenchPairedAgainstTheBackend(t *testing.T) {
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "50ms", "--itl", "1ms").url(t)
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", sim).url(t)
	dir := t.TempDir()
	code, out := exitCode(t, "bench", "--url", gw, "--direct-url", sim, "--pairs", "12", "--requests", "4", "--input-tokens", "8", "--output-tokens", "4",
		"--out", filepath.Join(dir, "r.json"))
	if code != 0 || !strings.Contains(out, "added by the gateway, paired against") {
		t.Fatalf("bench --direct-url: exit %d\n%s", code, out)
	}
	rec, err := bench.LoadRecord(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := rec.Paired
	if p == nil || p.Pairs != 12 || p.Failed != 0 || p.TTFT == nil {
		t.Fatalf("paired: %+v", p)
	}
	if p.DirectTTFT < 49 || p.GatewayTTFT < 49 {
		t.Errorf("TTFT p50 direct %.1f ms, gateway %.1f ms: want the sim's 50 ms on both", p.DirectTTFT, p.GatewayTTFT)
	}
	// Loopback on a busy CI machine: the gateway adds well under 15 ms.
	if p.TTFT.P50 < -5 || p.TTFT.P50 > 15 {
		t.Errorf("added TTFT p50 %.3f ms", p.TTFT.P50)
	}
}

// The new traffic from the command line, as real processes: a reasoning
// sim, the Responses API in two-turn sessions (TTFO and figures by
// turn), and a public trace replayed on its timestamps.
func TestBenchResponsesSessionsAndTrace(t *testing.T) {
	t.Parallel()
	url := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "10ms", "--itl", "1ms", "--reasoning-tokens", "5", "--reasoning-field", "reasoning").url(t)
	code, out := exitCode(t, "bench", "--url", url, "--api", "responses", "--sessions", "2", "--turns", "2", "--think-time", "10ms",
		"--input-tokens", "16", "--output-tokens", "12", "--force-output-length", "--warmup", "0")
	if code != 0 || !strings.Contains(out, "requests 4: 4 ok") || !strings.Contains(out, "by turn") || !strings.Contains(out, "ttfo ms") || !strings.Contains(out, "reasoning_tokens") {
		t.Fatalf("sessions: exit %d\n%s", code, out)
	}
	trace := filepath.Join("..", "..", "bench", "testdata", "traces", "burstgpt.csv")
	code, out = exitCode(t, "bench", "--url", url, "--trace", trace, "--trace-speedup", "200", "--trace-window", "0:30", "--output-tokens", "4")
	if code != 0 || !strings.Contains(out, "burstgpt trace") || !strings.Contains(out, "failed rows skipped") || !strings.Contains(out, "send_lag") {
		t.Fatalf("trace: exit %d\n%s", code, out)
	}
	if code, out := exitCode(t, "bench", "--url", url, "--trace", trace, "--trace-format", "sharegpt"); code == 0 || !strings.Contains(out, "--trace-format") {
		t.Errorf("a bad --trace-format: exit %d\n%s", code, out)
	}
}

// An agent's sessions from the command line: a session key, a shared
// system prompt and tools; the record says how sessions named
// themselves, and the report pools the follow-up turns.
func TestBenchAgentSessions(t *testing.T) {
	t.Parallel()
	url := start(t, "sim", "--listen", "127.0.0.1:0").url(t)
	out := filepath.Join(t.TempDir(), "run.json")
	code, text := exitCode(t, "bench", "--url", url, "--sessions", "2", "--turns", "3", "--session-key", "header:x-session-id",
		"--prefix-groups", "1", "--prefix-tokens", "200", "--tools", "3", "--input-tokens", "16", "--output-tokens", "8", "--force-output-length", "--out", out)
	if code != 0 || !strings.Contains(text, "requests 6: 6 ok") || !strings.Contains(text, "\n2+ ") {
		t.Fatalf("exit %d\n%s", code, text)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rec bench.Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	w := rec.Conditions.Workload
	if w.SessionKey != "header:x-session-id" || w.Tools != 3 || w.PrefixTokens != 200 || rec.Stages[0].FollowUps == nil || rec.Stages[0].FollowUps.N != 4 {
		t.Errorf("the record's workload %+v, follow-ups %+v", w, rec.Stages[0].FollowUps)
	}
	if strings.Contains(string(raw), `"bench-`) {
		t.Errorf("the record holds a session's key")
	}
}

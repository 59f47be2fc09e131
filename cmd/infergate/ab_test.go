package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/htmlcheck"
	"github.com/infergate/infergate/mirror"
)

// abRun sends load through a gateway that mirrors every request to a
// candidate simulator and returns `ab report`'s exit code and output.
func abRun(t *testing.T, candidateFlags ...string) (int, string, string) {
	t.Helper()
	primary := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "30ms", "--itl", "4ms", "--mean-output-tokens", "40").url(t)
	candidate := start(t, append([]string{"sim", "--listen", "127.0.0.1:0", "--mean-output-tokens", "40"}, candidateFlags...)...).url(t)
	pairs := filepath.Join(t.TempDir(), "pairs.jsonl")
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", primary, "--mirror", candidate, "--mirror-record", pairs)
	url := gw.url(t)
	code, out := exitCode(t, "bench", "--url", url, "--json-workload", "--input-tokens", "32", "--output-tokens", "none", "--concurrency", "8",
		"--requests", "300", "--warmup", "0")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, out)
	}
	// The last pairs are recorded after their requests end: stop the
	// gateway so the file is complete.
	gw.cmd.Process.Signal(syscall.SIGTERM)
	if err := gw.wait(t); err != nil {
		t.Fatalf("gateway exit: %v\n%s", err, gw.log())
	}
	code, report := exitCode(t, "ab", "report", pairs)
	t.Logf("ab report:\n%s", report)
	return code, report, pairs
}

// TestABFindsTheTradeOff: a candidate that decodes faster but breaks JSON
// more often (the simulator's int4 variant, given a faster decode) is
// rolled back, for its JSON, although it is faster.
func TestABFindsTheTradeOff(t *testing.T) {
	t.Parallel()
	code, report, pairs := abRun(t, "--ttft", "30ms", "--itl", "2ms", "--variant", "int4")
	if code != 1 || !strings.Contains(report, "verdict: ROLL BACK") || !strings.Contains(report, "quality regressed: invalid_json_rate") ||
		strings.Contains(report, "speed regressed") {
		t.Fatalf("exit %d, want 1 and a ROLL BACK for invalid JSON\n%s", code, report)
	}
	page := filepath.Join(t.TempDir(), "ab.html")
	code, js := exitCodeStdout(t, "ab", "report", "--json", "--html", page, pairs)
	var r struct {
		Pairs   int    `json:"pairs"`
		Verdict string `json:"verdict"`
	}
	if code != 1 || json.Unmarshal([]byte(js), &r) != nil || r.Pairs < 280 || r.Verdict != "ROLL BACK" {
		t.Errorf("--json: exit %d %+v\n%s", code, r, js)
	}
	// The page opens offline and its charts draw.
	htmlcheck.Check(t, page, "#D55E00") // the candidate's colour
	assertPrivate(t, page, pairs)       // prompts and answers: the owner's alone
}

// TestABSameBackendIsNotRolledBack: two identical simulators are never
// called ROLL BACK.
func TestABSameBackendIsNotRolledBack(t *testing.T) {
	t.Parallel()
	code, report, _ := abRun(t, "--ttft", "30ms", "--itl", "4ms")
	if code == 1 || strings.Contains(report, "ROLL BACK") {
		t.Fatalf("identical backends: exit %d\n%s", code, report)
	}
}

// TestABReadsARunningGateway: ab report --admin reads the recent pairs
// of a running gateway whose admin listener wants a key, through the
// admin API's client: every request's pair, none lost on the way.
func TestABReadsARunningGateway(t *testing.T) {
	t.Parallel()
	primary := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "5ms", "--itl", "1ms", "--mean-output-tokens", "16").url(t)
	candidate := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "5ms", "--itl", "1ms", "--mean-output-tokens", "16").url(t)
	key := filepath.Join(t.TempDir(), "admin-key")
	if err := os.WriteFile(key, []byte("adm-ab-test-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-auth-file", key, "--upstream", primary, "--mirror", candidate)
	url, admin := gw.url(t), gw.adminURL(t)
	if code, out := exitCode(t, "bench", "--url", url, "--concurrency", "4", "--requests", "40", "--warmup", "0"); code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, out)
	}
	// A pair is recorded once both its answers have ended.
	c := &adminapi.Client{URL: admin, Key: "adm-ab-test-key"}
	deadline := time.Now().Add(10 * time.Second)
	for ps, err := c.Pairs(context.Background()); ps.Recorded < 40 && time.Now().Before(deadline); ps, err = c.Pairs(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, js := exitCodeStdout(t, "ab", "report", "--json", "--admin", admin, "--admin-key", "adm-ab-test-key")
	var r struct {
		Pairs int `json:"pairs"`
	}
	if code == 3 || json.Unmarshal([]byte(js), &r) != nil || r.Pairs != 40 {
		t.Errorf("ab report --admin: exit %d, %d pairs, want 40\n%s", code, r.Pairs, js)
	}
	if code, out := exitCode(t, "ab", "report", "--admin", admin); code != 3 || !strings.Contains(out, "401") {
		t.Errorf("ab report --admin without the key: exit %d, want 3 and the gateway's 401\n%s", code, out)
	}
}

func TestABRefusesUnusableInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"ab", "report"},
		{"ab", "report", filepath.Join(dir, "missing.jsonl")},
		{"ab", "nonsense"},
	} {
		if code, out := exitCode(t, args...); code != 3 || strings.Contains(out, "panic") {
			t.Errorf("infergate %v: exit %d\n%s", args, code, out)
		}
	}
}

// TestABJudge: a judge that prefers the better answer, shown the two in a
// random order, prefers the candidate on every pair; the report says so
// with its interval.
func TestABJudge(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	var firstA atomic.Int64 // how often the candidate's answer came first
	judge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string                     `json:"model"`
			Messages []struct{ Content string } `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		u := req.Messages[len(req.Messages)-1].Content
		a := u[strings.Index(u, "Answer A:"):strings.Index(u, "Answer B:")]
		pick := "B"
		if strings.Contains(a, "precise") {
			pick = "A"
			firstA.Add(1)
		}
		if req.Model != "grader" || !strings.Contains(u, "Request:\nwhat is 2+2") {
			pick = "?"
		}
		asked.Add(1)
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%q}}]}`, pick)
	}))
	defer judge.Close()
	var lines []string
	for i := range 40 {
		p := mirror.Pair{ID: fmt.Sprintf("r%d", i), Prompt: "what is 2+2", Stream: true,
			Primary:   mirror.Arm{Status: 200, Output: "maybe five", TTFTms: 50, E2Ems: 500, TPOTms: 10, OutputTokens: 10},
			Candidate: mirror.Arm{Status: 200, Output: "4, precise", TTFTms: 50, E2Ems: 500, TPOTms: 10, OutputTokens: 10}}
		b, _ := json.Marshal(p)
		lines = append(lines, string(b))
	}
	file := filepath.Join(t.TempDir(), "pairs.jsonl")
	os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	_, out := exitCode(t, "ab", "report", "--judge", judge.URL, "--judge-model", "grader", "--judge-sample", "30", file)
	if asked.Load() != 30 || !strings.Contains(out, "candidate preferred 30, primary 0, ties 0") || !strings.Contains(out, "preference for the candidate 100% [89, 100]%") {
		t.Fatalf("asked %d\n%s", asked.Load(), out)
	}
	if n := firstA.Load(); n < 5 || n > 25 {
		t.Errorf("the candidate's answer was shown first %d times of 30: the order is not random", n)
	}
}

// The arms' cache states are a condition: a primary that had seen the
// prompts before (its prefix cache warm, as a primary's is from the
// traffic it always serves) against a candidate that had not: ab report
// refuses to judge, with both arms' cached shares, and --force judges.
func TestABRefusesDifferentCacheStates(t *testing.T) {
	t.Parallel()
	primary := start(t, "sim", "--listen", "127.0.0.1:0").url(t)
	candidate := start(t, "sim", "--listen", "127.0.0.1:0").url(t)
	pairs := filepath.Join(t.TempDir(), "pairs.jsonl")
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", primary, "--mirror", candidate, "--mirror-record", pairs)
	run := func(url string) {
		t.Helper()
		code, out := exitCode(t, "bench", "--url", url, "--seed", "9", "--input-tokens", "128", "--output-tokens", "4", "--concurrency", "4",
			"--requests", "30", "--warmup", "0")
		if code != 0 {
			t.Fatalf("bench %s: exit %d\n%s", url, code, out)
		}
	}
	run(primary)   // the primary sees the prompts first
	run(gw.url(t)) // then the same prompts, mirrored
	gw.cmd.Process.Signal(syscall.SIGTERM)
	if err := gw.wait(t); err != nil {
		t.Fatalf("gateway exit: %v\n%s", err, gw.log())
	}
	code, out := exitCode(t, "ab", "report", pairs)
	if code != 3 || !strings.Contains(out, "different conditions") || !strings.Contains(out, "primary 9") || !strings.Contains(out, "candidate 0.0%") || !strings.Contains(out, "--force") {
		b, _ := os.ReadFile(pairs)
		first, _, _ := strings.Cut(string(b), "\n")
		t.Errorf("ab report on a warm primary and a cold candidate: exit %d, want 3 naming both shares\n%s\nthe first pair: %s\ngateway log:\n%s", code, out, first, gw.log())
	}
	code, out = exitCode(t, "ab", "report", "--force", pairs)
	if code == 3 || !strings.Contains(out, "cached prompt tokens") || !strings.Contains(out, "judged under --force") {
		t.Errorf("--force: exit %d\n%s", code, out)
	}
}

package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/bench"
)

// TestQuickStartPolicyFlags: serve --upstream with the policy flags and
// no config file authenticates, clamps and rejects.
func TestQuickStartPolicyFlags(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "1ms", "--itl", "1ms")
	simURL := sim.url(t)
	keys := filepath.Join(t.TempDir(), "keys")
	// "sk-file-key-2" as a digest, and a named tenant.
	if err := os.WriteFile(keys, []byte("# clients\nsk-file-key-1\nteam-b sha256:5271697559daefd38c9356f39b00845de562555b0a90d0ef0fb793b0f1eac693\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", simURL, "--auth-keys", keys,
		"--max-input-tokens", "50", "--trim", "reject", "--max-output-tokens", "3", "--tokenizer", "cl100k_base")
	url := p.url(t)
	send := func(key, body string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	short := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`
	if code, _, body := send("", short); code != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("no key: %d %s", code, body)
	}
	code, h, body := send("sk-file-key-1", short)
	if code != 200 || h.Get("X-Infergate-Max-Tokens-Clamped") != "3" || !strings.Contains(body, `"completion_tokens":3`) {
		t.Errorf("a key of the file: %d %v %s", code, h, body)
	}
	if code, _, body := send("sk-file-key-2", short); code != 200 {
		t.Errorf("a key written as its digest: %d %s", code, body)
	}
	long := `{"model":"sim-model","messages":[{"role":"user","content":"` + strings.Repeat("the queue is long ", 30) + `"}]}`
	if code, _, body := send("sk-file-key-1", long); code != 400 || !strings.Contains(body, "context_length_exceeded") || !strings.Contains(body, "at most 50") {
		t.Errorf("too long: %d %s", code, body)
	}
	if strings.Contains(p.log(), "sk-file-key") {
		t.Errorf("a key reached the log:\n%s", p.log())
	}
}

// TestBenchCountsPolicyLengthApart: bench through a gateway whose output
// cap is below what it asks for counts the length finishes as the
// policy's, not the model's.
func TestBenchCountsPolicyLengthApart(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "1ms", "--itl", "1ms")
	gw := start(t, "serve", "--listen", "127.0.0.1:0", "--upstream", sim.url(t), "--max-output-tokens", "4").url(t)
	out := filepath.Join(t.TempDir(), "run.json")
	code, output := exitCode(t, "bench", "--url", gw, "--input-tokens", "16", "--output-tokens", "32", "--concurrency", "2",
		"--requests", "10", "--warmup", "0", "--out", out)
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, output)
	}
	rec, err := bench.LoadRecord(out)
	if err != nil {
		t.Fatal(err)
	}
	q := rec.Stages[0].Quality
	if q.LengthByPolicy != 10 || q.FinishLength != 0 {
		t.Errorf("quality %+v: want all 10 length finishes the policy's\n%s", q, output)
	}
	if !strings.Contains(output, "length at the gateway's output cap 10") {
		t.Errorf("the report does not say so:\n%s", output)
	}
}

// FuzzAuthKeys: any --auth-keys file is read or refused, never with a
// key in the error.
func FuzzAuthKeys(f *testing.F) {
	f.Add("# c\nsk-1\nteam sk-2\n\n")
	f.Add("team sha256:5271697559daefd38c9356f39b00845de562555b0a90d0ef0fb793b0f1eac693\n")
	f.Add("a b c\n")
	f.Fuzz(func(t *testing.T, file string) {
		tenants, err := parseAuthKeys("keys", strings.NewReader(file))
		if err != nil {
			for _, line := range strings.Split(file, "\n") {
				for _, field := range strings.Fields(line) {
					if len(field) > 12 && !strings.HasPrefix(field, "sha256:") && strings.Contains(err.Error(), field) {
						t.Fatalf("the error %q repeats %q", err, field)
					}
				}
			}
			return
		}
		if len(tenants) == 0 {
			t.Fatal("no tenant and no error")
		}
	})
}

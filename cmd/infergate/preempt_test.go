package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/promtext"
)

// simGauges reads the sim's running requests and KV-cache usage.
func simGauges(t *testing.T, simURL string) (running, kv float64) {
	t.Helper()
	resp, err := http.Get(simURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s, err := promtext.Parse(resp.Body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	running, _ = s.Sum("vllm:num_requests_running")
	kv, _ = s.Sum("vllm:kv_cache_usage_perc")
	return running, kv
}

// TestPreemptionFreesTheSim is the issue 45 target "preemption frees the
// engine", end to end over TCP with the real processes: a gateway with
// one slot serves a flex stream whose long prompt the sim (scheduling by
// priority, the class passed as vLLM's priority) is still prefilling
// when a priority request arrives. The flex request is preempted (503,
// X-Infergate-Preempted) and the sim drops it within 100 ms: its KV
// blocks free, the priority request runs.
func TestPreemptionFreesTheSim(t *testing.T) {
	// A 2,400-token prompt prefills in one 1.2 s step.
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--scheduling-policy", "priority",
		"--prefill-tokens-per-s", "2000", "--max-batched-tokens", "0")
	simURL := sim.url(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `server:
  listen: 127.0.0.1:0
pools:
  gpu:
    backends:
      - url: %s
    class_priority: vllm
default_pool: gpu
shaping:
  global:
    max_requests: 1
  default_tenant:
    max_class: priority
classes:
  enabled: true
`, simURL), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := start(t, "serve", "--config", cfg)
	url := gw.url(t)
	post := func(body string) (*http.Response, error) {
		return http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	}
	long := strings.Repeat("the sea is wide and slow ", 400)
	type answer struct {
		code      int
		preempted string
		at        time.Time
	}
	flex := make(chan answer, 1)
	go func() {
		resp, err := post(fmt.Sprintf(`{"model":"sim-model","service_tier":"flex","stream":true,"max_tokens":50,"messages":[{"role":"user","content":%q}]}`, long))
		if err != nil {
			flex <- answer{}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		flex <- answer{resp.StatusCode, resp.Header.Get("X-Infergate-Preempted"), time.Now()}
	}()
	var kvFlex float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, kv := simGauges(t, simURL)
		if running == 1 && kv > 0 {
			kvFlex = kv
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flex request never ran at the sim\n%s", gw.log())
		}
		time.Sleep(2 * time.Millisecond)
	}
	sent := time.Now()
	prio := make(chan int, 1)
	go func() {
		resp, err := post(`{"model":"sim-model","service_tier":"priority","max_tokens":200,"ignore_eos":true,"messages":[{"role":"user","content":"quick"}]}`)
		if err != nil {
			prio <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		prio <- resp.StatusCode
	}()
	var f answer
	select {
	case f = <-flex:
	case <-time.After(10 * time.Second):
		t.Fatalf("the flex request was not preempted\n%s", gw.log())
	}
	if f.code != http.StatusServiceUnavailable || f.preempted == "" {
		t.Fatalf("flex answered %d, X-Infergate-Preempted %q; want 503 preempted", f.code, f.preempted)
	}
	// Freed: the KV blocks of its 2,400 tokens are back (the priority
	// request's few dozen remain at most).
	var freed time.Time
	for {
		if _, kv := simGauges(t, simURL); kv < kvFlex/4 {
			freed = time.Now()
			break
		}
		if time.Since(f.at) > 3*time.Second {
			t.Fatalf("3 s after the preemption the sim still holds the flex request's KV blocks\n%s", gw.log())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if code := <-prio; code != 200 {
		t.Errorf("the priority request got %d", code)
	}
	after := freed.Sub(f.at)
	t.Logf("priority sent → flex preempted (503) %v; → the sim freed the flex request's KV %v; %v after the 503", f.at.Sub(sent), freed.Sub(sent), after)
	if after > 100*time.Millisecond {
		t.Errorf("the sim freed the preempted request's KV %v after its 503, want within 100ms", after)
	}
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// running reads the sim's vllm:num_requests_running.
func running(url string) (float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	mf := mfs["vllm:num_requests_running"]
	if mf == nil || len(mf.Metric) == 0 {
		return 0, fmt.Errorf("no vllm:num_requests_running")
	}
	return mf.Metric[0].GetGauge().GetValue(), nil
}

// Three gateway processes share a cap of 3 through Redis in front of one
// sim, driven by 12 clients: the sim never runs more than 3. One replica
// is killed holding slots; within its lease TTL the other two get them
// back and run 3 again.
func TestReplicasShareOneCap(t *testing.T) {
	addr := testredis.Addr(t)
	const capN = 3
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--decode-base-ms", "5", "--decode-per-seq-ms", "0", "--max-num-seqs", "64").url(t)
	conf := filepath.Join(t.TempDir(), "shared.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `server:
  listen: 127.0.0.1:0
  drain_timeout: 1s
pools:
  gpu:
    backends:
      - url: %s
default_pool: gpu
shaping:
  global:
    max_requests: %d
  queue:
    max_waiting: 1000
    timeout: 30s
  redis:
    addr: %s
    key_prefix: e2e-%d
    lease_ttl: 1s
    poll_interval: 100ms
    op_timeout: 2s
    expected_replicas: 3
`, sim, capN, addr, time.Now().UnixNano()), 0o600); err != nil {
		t.Fatal(err)
	}
	var gws []*proc
	var urls []string
	for range 3 {
		p := start(t, "serve", "--config", conf)
		gws = append(gws, p)
		urls = append(urls, p.url(t))
	}
	body := `{"model":"sim-model","stream":true,"max_tokens":40,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	for c := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Clients of the replica that dies find its port closed;
				// they move on to the others.
				url := urls[(c+i)%3]
				resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(string(b), "[DONE]") {
					ok.Add(1)
				} else if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	var peak atomic.Int64
	sample := func(d time.Duration) (maxSeen float64) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if n, err := running(sim); err == nil {
				maxSeen = max(maxSeen, n)
				if int64(n) > peak.Load() {
					peak.Store(int64(n))
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		return maxSeen
	}
	if m := sample(1500 * time.Millisecond); m != capN {
		t.Errorf("the sim ran at most %v at once before the kill, want the shared cap %d", m, capN)
	}
	// Kill one replica while it holds slots.
	killed := time.Now()
	gws[0].cmd.Process.Signal(syscall.SIGKILL)
	// Its leases expire within the TTL (1s); the two live replicas'
	// queues then fill the cap again.
	sample(1300 * time.Millisecond)
	if m := sample(1200 * time.Millisecond); m != capN {
		t.Errorf("%v after the kill, the sim ran at most %v at once, want %d again", time.Since(killed).Round(time.Millisecond), m, capN)
	}
	close(stop)
	wg.Wait()
	if peak.Load() > capN {
		t.Errorf("the sim ran %d at once under a shared cap of %d", peak.Load(), capN)
	}
	if ok.Load() < 20 || failed.Load() > 0 {
		t.Errorf("%d ok, %d failed (want many ok and no refusal: the queue holds them)", ok.Load(), failed.Load())
	}
}

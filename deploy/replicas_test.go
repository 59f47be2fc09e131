package deploy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
)

// simRunning reads the sim's vllm:num_requests_running.
func simRunning(base string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && strings.HasPrefix(f[0], "vllm:num_requests_running") {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no vllm:num_requests_running at %s", base)
}

// TestChartReplicasShareOneCap runs the chart's Deployment as three
// processes: the config its ConfigMap holds and the arguments its
// container runs, with a shared Redis (redis.externalAddr) and a cap of 3
// in front of one sim, under 12 clients. The sim never runs more than 3;
// a replica killed (SIGKILL, as a lost node) while it holds slots gives
// them back within redis.leaseTTL, and the other two fill the cap again.
func TestChartReplicasShareOneCap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes for seconds")
	}
	redis := testredis.Addr(t)
	bin := gatewayBinary(t)
	const capN = 3
	sim := startProc(t, "sim", bin, "sim", "--listen", "127.0.0.1:0", "--decode-base-ms", "5", "--decode-per-seq-ms", "0", "--max-num-seqs", "64")
	simAddr := sim.bound(t, "sim listening")
	waitHTTP(t, "http://"+simAddr+"/health", sim)

	o := mustRender(t, map[string]any{
		"replicaCount": 3,
		"redis":        map[string]any{"externalAddr": redis, "leaseTTL": "1s"},
		"drain":        map[string]any{"preStopSeconds": 0, "delay": "0s", "timeout": "1s"},
		"config": map[string]any{
			"pools":        map[string]any{"gpu": map[string]any{"backends": []any{map[string]any{"url": "http://" + simAddr}}}},
			"default_pool": "gpu",
			"shaping": map[string]any{
				"global": map[string]any{"max_requests": capN},
				"queue":  map[string]any{"max_waiting": 1000, "timeout": "30s"},
				"redis": map[string]any{"key_prefix": fmt.Sprintf("chart-%d", time.Now().UnixNano()),
					"poll_interval": "100ms", "op_timeout": "2s"},
			},
		},
	})
	cfg := podConfig(t, o)
	for _, want := range []string{"expected_replicas: 3", "lease_ttl: 1s", "addr: " + redis} {
		if !strings.Contains(cfg, want) {
			t.Fatalf("the chart's config lacks %q:\n%s", want, cfg)
		}
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := o.deployments["gw-infergate"].Spec.Template.Spec.Containers[0]
	var gws []*proc
	var urls []string
	for i := range 3 {
		args := rewrite(c.Args, "/etc/infergate/config/config.yaml", cfgPath)
		// The pod's ports are its own; three processes on one host need three.
		args = append(args, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0")
		p := startProc(t, fmt.Sprintf("replica-%d", i), bin, args...)
		api := p.bound(t, "infergate listening")
		waitHTTP(t, "http://"+api+"/readyz", p)
		gws = append(gws, p)
		urls = append(urls, "http://"+api)
	}

	body := `{"model":"sim-model","stream":true,"max_tokens":40,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	client := &http.Client{Timeout: 20 * time.Second}
	for n := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// The Service spreads clients; those of the dead replica
				// find its port closed and move on, as after an endpoint update.
				resp, err := client.Post(urls[(n+i)%3]+"/v1/chat/completions", "application/json", strings.NewReader(body))
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
	sample := func(d time.Duration) (seen float64) {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if n, err := simRunning("http://" + simAddr); err == nil {
				seen = max(seen, n)
				if int64(n) > peak.Load() {
					peak.Store(int64(n))
				}
			}
		}
		return seen
	}
	if m := sample(1500 * time.Millisecond); m != capN {
		t.Errorf("before the kill the sim ran at most %v at once, want the shared cap %d", m, capN)
	}
	killed := time.Now()
	gws[0].cmd.Process.Signal(syscall.SIGKILL)
	sample(1300 * time.Millisecond) // the lease TTL (1s) and a poll
	if m := sample(1200 * time.Millisecond); m != capN {
		t.Errorf("%v after the kill the sim ran at most %v at once, want %d again", time.Since(killed).Round(time.Millisecond), m, capN)
	}
	close(stop)
	wg.Wait()
	if peak.Load() > capN {
		t.Errorf("the sim ran %d at once under a shared cap of %d", peak.Load(), capN)
	}
	if ok.Load() < 20 || failed.Load() > 0 {
		t.Errorf("%d ok, %d refused: want many ok and none refused (the queue holds them)", ok.Load(), failed.Load())
	}
}

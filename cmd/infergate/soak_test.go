package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// TestSoak runs the gateway, the simulator and Redis as processes under a
// sustained mix of streams and plain calls, clients that abort at random
// points, backend faults (resets, stalls, 5xx, 429) and a Redis restart
// halfway, then checks that everything is back to its baseline:
// goroutines, open files, slots in flight, Redis leases, queue depth, and
// that every request has a logged outcome. Half the requests are
// mirrored to a second simulator that fails 5% of its answers; some
// clients read their streams slowly. The gateway's resident memory is
// sampled through the run. INFERGATE_SOAK sets how long
// (default 8s; scripts/soak.sh runs it for minutes).
func TestSoak(t *testing.T) {
	t.Parallel()
	d := 8 * time.Second
	if v := os.Getenv("INFERGATE_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("INFERGATE_SOAK=%q: %v", v, err)
		}
	}
	rds := testredis.Start(t, 0)
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "5ms", "--itl", "3ms")
	simURL := sim.url(t)
	candURL := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "8ms", "--itl", "4ms", "--error-rate", "0.05").url(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	pairsPath := filepath.Join(dir, "pairs.jsonl")
	cfgPath := filepath.Join(dir, "infergate.yaml")
	prefix := fmt.Sprintf("soak%d", time.Now().UnixNano())
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  forward_sim_fault: true
  write_timeout: 2s
  drain_timeout: 5s
timeouts:
  idle: 500ms
  total: 5s
retries:
  max: 1
pools:
  sim:
    backends:
      - url: %s
    ejection:
      consecutive_failures: -1
  candidate:
    backends:
      - url: %s
models:
  - name: m
    pool: sim
    upstream_model: sim-model
shaping:
  global:
    max_requests: 12
  queue:
    max_waiting: 64
    timeout: 2s
  redis:
    addr: %s
    key_prefix: %s
    lease_ttl: 3s
    on_failure: open
request_log:
  path: %s
mirror:
  rules:
    - name: soak
      pool: candidate
      sample: 0.5
      max_in_flight: 12
  record:
    path: %s
`, simURL, candURL, rds.Addr(), prefix, logPath, pairsPath)), 0o600)
	// At info the gateway logs a line per request: proc keeps a bounded
	// part of them, and the addresses the gateway bound.
	gw := start(t, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	url, admin := gw.url(t), gw.adminURL(t)
	pid := gw.cmd.Process.Pid

	// Warm up, then take the baseline.
	for range 5 {
		chat(t, url, "m")
	}
	time.Sleep(300 * time.Millisecond)
	baseG, baseFD, baseRSS := metric(t, admin, "infergate_goroutines"), fds(pid), rss(pid)
	var samples []string // goroutines/open files/RSS through the run
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for i := 1; i <= 4; i++ {
			time.Sleep(d / 5)
			samples = append(samples, fmt.Sprintf("%.0f/%d/%.0fMiB", metric(t, admin, "infergate_goroutines"), fds(pid), float64(rss(pid))/(1<<20)))
		}
	}()

	var sent, aborted, faulted, unsent, slow atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) {
				sent.Add(1)
				soakRequest(client, url, rng, &aborted, &faulted, &unsent, &slow)
			}
		}()
	}
	// Halfway, Redis dies and comes back.
	time.Sleep(d / 2)
	rds.Kill()
	time.Sleep(500 * time.Millisecond)
	rds = testredis.Start(t, rds.Port)
	wg.Wait()
	<-sampleDone
	// The client's idle keep-alive connections are not the gateway's to
	// count; its own idle connections to the sim and Redis are (bounded
	// by the cap: at most one a slot, plus the retries'), and to the
	// candidate (at most the rule's max_in_flight).
	client.CloseIdleConnections()

	// Back to baseline.
	var g, fd float64
	settled := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		g, fd = metric(t, admin, "infergate_goroutines"), float64(fds(pid))
		if metric(t, admin, "infergate_queue_depth") == 0 && metric(t, admin, `infergate_shaping_in_flight{level="global",name="",unit="requests"}`) == 0 &&
			metric(t, admin, "infergate_upstream_in_flight") == 0 && metric(t, admin, "infergate_mirror_in_flight") == 0 &&
			g <= baseG+8 && fd <= float64(baseFD)+2*12+12+8 {
			settled = true
			break
		}
	}
	if !settled {
		t.Errorf("after the soak: goroutines %v (baseline %v), open files %v (baseline %d), queue %v, in flight %v/%v",
			g, baseG, fd, baseFD, metric(t, admin, "infergate_queue_depth"),
			metric(t, admin, `infergate_shaping_in_flight{level="global",name="",unit="requests"}`), metric(t, admin, "infergate_upstream_in_flight"))
	}
	if n := leases(t, rds.Addr(), prefix); n != 0 {
		t.Errorf("%d leases left in Redis after the soak", n)
	}
	if p := metric(t, admin, `infergate_panics_total{where="request"}`) + metric(t, admin, `infergate_panics_total{where="stream"}`); p != 0 {
		t.Errorf("%v panics during the soak", p)
	}
	dropped, endRSS := metric(t, admin, "infergate_mirror_dropped_total"), rss(pid)
	// Every request has its logged outcome (the log is flushed on exit).
	gw.cmd.Process.Signal(os.Interrupt)
	if err := gw.wait(t); err != nil {
		t.Errorf("exit: %v", err)
	}
	lines, outcomes := logOutcomes(t, logPath)
	if all := sent.Load() + 5; lines > all || lines < all-unsent.Load() {
		t.Errorf("%d request-log lines for %d requests sent, %d of them cut by their client before an answer", lines, all, unsent.Load())
	}
	pairLines, _ := logOutcomes(t, pairsPath)
	if pairLines == 0 {
		t.Error("no mirrored pair was recorded")
	}
	t.Logf("soak %v: %d requests (%d aborted by the client, %d read slowly, %d with a backend fault), %d pairs recorded (%v copies dropped), Redis restarted once; outcomes %v; "+
		"goroutines %v→%v, open files %d→%v, RSS %.0f→%.0f MiB; through the run (goroutines/files/RSS) %v; leases 0, nothing leaked",
		d, sent.Load(), aborted.Load(), slow.Load(), faulted.Load(), pairLines, dropped, outcomes, baseG, g, baseFD, fd,
		float64(baseRSS)/(1<<20), float64(endRSS)/(1<<20), samples)
}

// soakRequest sends one request of the mix.
func soakRequest(c *http.Client, url string, rng *rand.Rand, aborted, faulted, unsent, slow *atomic.Int64) {
	stream := rng.IntN(10) < 6
	body := fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, stream, 5+rng.IntN(40))
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	switch f := rng.IntN(20); {
	case f == 0:
		req.Header.Set("X-Sim-Fault", "reset_after="+strconv.Itoa(1+rng.IntN(5)))
	case f == 1:
		req.Header.Set("X-Sim-Fault", "stall_after=2;stall_for=1s")
	case f == 2:
		req.Header.Set("X-Sim-Fault", "error=503")
	case f == 3:
		req.Header.Set("X-Sim-Fault", "error=429;retry_after=1s")
	}
	if req.Header.Get("X-Sim-Fault") != "" {
		faulted.Add(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	abort := rng.IntN(10) == 0
	if abort {
		aborted.Add(1)
		time.AfterFunc(time.Duration(rng.IntN(80))*time.Millisecond, cancel)
	}
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		if abort {
			unsent.Add(1) // it may have been cut before the gateway read it whole
		}
		return
	}
	if !abort && rng.IntN(20) == 0 {
		// A slow reader: small reads with pauses, the stream outlasting
		// server.write_timeout at times.
		slow.Add(1)
		buf := make([]byte, 64)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
			time.Sleep(15 * time.Millisecond)
		}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// rss is the process's resident memory in bytes (0 off Linux).
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// metric reads one series of the admin listener's /metrics (the first
// whose name and labels start with key), 0 when absent.
func metric(t *testing.T, admin, key string) float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sum := 0.0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if name == key || strings.HasPrefix(name, key+"{") || (strings.Contains(key, "{") && name == key) {
			v, _ := strconv.ParseFloat(val, 64)
			sum += v
		}
	}
	return sum
}

func fds(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// leases counts the leases held in Redis under prefix.
func leases(t *testing.T, addr, prefix string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "{"+prefix+"}:cap:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, k := range keys {
		if typ, _ := c.Type(ctx, k).Result(); typ == "zset" {
			// Leases past their TTL are dead: count those still live.
			now := time.Now().Unix()
			live, _ := c.ZCount(ctx, k, strconv.FormatInt(now, 10), "+inf").Result()
			n += live
		}
	}
	return n
}

// logOutcomes counts the request log's lines by outcome.
func logOutcomes(t *testing.T, path string) (int64, map[string]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	var n int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.Index(line, `"outcome":"`); i >= 0 {
			o := line[i+len(`"outcome":"`):]
			out[o[:strings.IndexByte(o, '"')]]++
		} else {
			out["(none)"]++
		}
	}
	return n, out
}

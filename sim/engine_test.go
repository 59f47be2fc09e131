package sim

import (
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStepCost(t *testing.T) {
	e := newEngine(EngineConfig{KVCacheTokens: 1024, BlockSize: 16, PrefillTokensPerS: 1000,
		DecodeBaseMs: 5, DecodePerSeqMs: 1, DecodePerKVTokenUs: 10}, 1, nil)
	tests := []struct {
		name                 string
		decodes, kv, prefill int
		want                 time.Duration
	}{
		{"base only", 0, 0, 0, 5 * time.Millisecond},
		{"per sequence", 4, 0, 0, 9 * time.Millisecond},
		{"per kv token", 1, 100, 0, 7 * time.Millisecond},
		{"prefill", 0, 0, 50, 55 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := e.stepCost(tc.decodes, tc.kv, tc.prefill); got != tc.want {
			t.Errorf("%s: stepCost(%d,%d,%d) = %v, want %v", tc.name, tc.decodes, tc.kv, tc.prefill, got, tc.want)
		}
	}
	e.speedup = 2
	if got := e.stepCost(4, 0, 0); got != 4500*time.Microsecond {
		t.Errorf("speedup 2: %v, want 4.5ms", got)
	}
}

// runSeqs pushes n sequences through an engine directly and returns each
// one's TTFT and mean ITL as seen by a waiting handler.
func runSeqs(t *testing.T, cfg EngineConfig, n, prompt, target int) (ttft, itl []time.Duration, preempt float64) {
	t.Helper()
	m := newMetrics("sim-model", DefaultConfig().Engine)
	e := newEngine(cfg, 1, m)
	e.start()
	defer e.close()
	ttft = make([]time.Duration, n)
	itl = make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		s := newSeq(prompt, target)
		start := time.Now()
		if !e.add(s) {
			t.Fatal("engine stopped")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := &engineSource{s: s}
			got, ok := 0, true
			var first time.Time
			for ok && got < target {
				got, ok = src.wait(got)
				if first.IsZero() {
					first = time.Now()
				}
			}
			ttft[i] = first.Sub(start)
			itl[i] = time.Since(first) / time.Duration(max(1, target-1))
		}()
	}
	wg.Wait()
	mfs, _ := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "vllm:num_preemptions_total" {
			preempt = mf.Metric[0].Counter.GetValue()
		}
	}
	return ttft, itl, preempt
}

func TestQueueingAddsToTTFT(t *testing.T) {
	cfg := DefaultConfig().Engine
	cfg.MaxNumSeqs = 2
	cfg.DecodeBaseMs, cfg.DecodePerSeqMs = 5, 0
	// 6 requests, 2 at a time, 10 tokens each at 5ms a step: the last two
	// wait for two full generations (~100ms) before they start.
	ttft, _, _ := runSeqs(t, cfg, 6, 10, 10)
	sort.Slice(ttft, func(i, j int) bool { return ttft[i] < ttft[j] })
	if ttft[0] > 20*time.Millisecond {
		t.Errorf("first TTFT %v, want about one step", ttft[0])
	}
	if ttft[5] < 90*time.Millisecond {
		t.Errorf("last TTFT %v, want at least the 100ms its wait takes (minus jitter): %v", ttft[5], ttft)
	}
}

func TestITLRisesWithBatch(t *testing.T) {
	cfg := DefaultConfig().Engine
	cfg.MaxNumSeqs = 64
	cfg.DecodeBaseMs, cfg.DecodePerSeqMs = 2, 0.5
	_, one, _ := runSeqs(t, cfg, 1, 10, 20)
	_, many, _ := runSeqs(t, cfg, 32, 10, 20)
	// configured: 2.5ms at batch 1, 18ms at batch 32
	if one[0] < 2*time.Millisecond || one[0] > 4*time.Millisecond {
		t.Errorf("ITL at batch 1 = %v, want about 2.5ms", one[0])
	}
	sort.Slice(many, func(i, j int) bool { return many[i] < many[j] })
	if med := many[16]; med < 15*time.Millisecond || med > 21*time.Millisecond {
		t.Errorf("median ITL at batch 32 = %v, want about 18ms", med)
	}
}

func TestMemoryBoundPreempts(t *testing.T) {
	p, _ := Preset("memory-bound")
	cfg := p.Engine
	cfg.DecodeBaseMs, cfg.DecodePerSeqMs, cfg.DecodePerKVTokenUs = 0.5, 0, 0
	// 16 sequences of 400+200 tokens need 9,600 tokens; the cache has 8,192.
	_, _, pre := runSeqs(t, cfg, 16, 400, 200)
	if pre == 0 {
		t.Error("memory-bound preset ran 16 long sequences with no preemption")
	}
	b := DefaultConfig().Engine
	b.DecodeBaseMs, b.DecodePerSeqMs = 0.5, 0
	if _, _, pre := runSeqs(t, b, 16, 400, 200); pre != 0 {
		t.Errorf("balanced preset preempted %v times with room to spare", pre)
	}
}

func TestChunkedPrefillSharesSteps(t *testing.T) {
	cfg := DefaultConfig().Engine
	cfg.PrefillTokensPerS = 100000 // 2048-token chunk = 20ms
	cfg.MaxBatchedTokens = 2048
	cfg.DecodeBaseMs, cfg.DecodePerSeqMs = 1, 0
	// A 6,000-token prompt prefills in three chunks of ~20ms each.
	ttft, _, _ := runSeqs(t, cfg, 1, 6000, 2)
	if ttft[0] < 55*time.Millisecond || ttft[0] > 80*time.Millisecond {
		t.Errorf("TTFT of a 6000-token prompt = %v, want about 63ms (3 chunked steps)", ttft[0])
	}
}

func TestClientGoneFreesSlot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.MaxNumSeqs = 1
	cfg.Engine.DecodeBaseMs = 20
	url, s := startSim(t, cfg)
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody(`,"max_tokens":1000,"ignore_eos":true`)
	conn.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	time.Sleep(100 * time.Millisecond)
	conn.Close() // 1000 tokens at 20ms would hold the only slot for 20s
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && s.eng.steps.Load() > 0 && runningNow(t, url) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("next request took %v: the departed client's sequence still holds the slot", d)
	}
}

func runningNow(t *testing.T, url string) float64 { return scrape(t, url)["vllm:num_requests_running"] }

// presetUnderLoad runs n long sequences on a preset's engine for d and
// returns the utilisation gauge (0..1) and the queue length then.
func presetUnderLoad(t *testing.T, preset string, n int, d time.Duration) (util float64, waiting int) {
	t.Helper()
	p, _ := Preset(preset)
	m := newMetrics("sim-model", DefaultConfig().Engine)
	e := newEngine(p.Engine, 1, m)
	e.start()
	defer e.close()
	for range n {
		if !e.add(newSeq(200, 100000)) {
			t.Fatal("engine stopped")
		}
	}
	time.Sleep(d)
	mfs, _ := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "vllm:num_requests_waiting" {
			waiting = int(mf.Metric[0].Gauge.GetValue())
		}
	}
	return m.util.value(time.Now()), waiting
}

func TestPresetSymptoms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engines for seconds")
	}
	// batch-starved: 4 running, the rest queued, the GPU mostly idle.
	util, waiting := presetUnderLoad(t, "batch-starved", 32, 1500*time.Millisecond)
	if util > 0.15 || waiting != 28 {
		t.Errorf("batch-starved: utilisation %.2f, waiting %d; want under 0.15 with 28 queued", util, waiting)
	}
	// compute-bound: the batch fills and utilisation is pinned.
	util, _ = presetUnderLoad(t, "compute-bound", 64, 2500*time.Millisecond)
	if util < 0.85 {
		t.Errorf("compute-bound: utilisation %.2f under load, want pinned near 1", util)
	}
}

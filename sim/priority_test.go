package sim

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPriorityPreemptionVictim drives the scheduler by hand through a
// KV cache too small for every running sequence's next token, under each
// policy: fcfs preempts the newest, priority the one with the highest
// priority value (then the newest), and a victim already given its decode
// this step is taken back out of the step.
func TestPriorityPreemptionVictim(t *testing.T) {
	t.Parallel()
	type spec struct {
		name     string
		priority int
	}
	tests := []struct {
		name     string
		policy   bool
		kvBlocks int
		seqs     []spec // admitted in this order, each one block's prompt
		// after the second step's schedule:
		running, waiting []string
		decodes          int
	}{
		// Three one-block sequences fill three blocks; each next token
		// needs a second block. fcfs: A preempts C (newest), then B
		// preempts itself; the queue front is B, then C.
		{"fcfs preempts the newest", false, 3, []spec{{"A", 0}, {"B", 5}, {"C", 0}}, []string{"A"}, []string{"B", "C"}, 1},
		// priority: A preempts B (priority 5), then C preempts itself
		// (latest of the priority-0 ones); the queue is by priority.
		{"priority preempts the lowest", true, 3, []spec{{"A", 0}, {"B", 5}, {"C", 0}}, []string{"A"}, []string{"C", "B"}, 1},
		// A (priority 5) takes the free block and decodes; B (priority
		// 0) then needs one: A is preempted and its decode undone.
		{"victim already decoded this step", true, 3, []spec{{"A", 5}, {"B", 0}}, []string{"B"}, []string{"A"}, 1},
		{"fcfs keeps the older decode", false, 3, []spec{{"A", 5}, {"B", 0}}, []string{"A"}, []string{"B"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(EngineConfig{MaxNumSeqs: 8, KVCacheTokens: 16 * tc.kvBlocks, BlockSize: 16, PrefillTokensPerS: 1000}, 1, nil)
			e.priority = tc.policy
			names := map[*seq]string{}
			t0 := time.Now()
			for i, sp := range tc.seqs {
				s := newSeq(15, 100) // 15 prompt tokens + the first output fill one block
				s.priority = sp.priority
				s.arrival = t0.Add(time.Duration(i) * time.Millisecond)
				names[s] = sp.name
				e.enqueue(s)
			}
			e.finishStep(e.schedule(), time.Now(), nil)
			if len(e.runningSeqs) != len(tc.seqs) {
				t.Fatalf("first step admitted %d of %d", len(e.runningSeqs), len(tc.seqs))
			}
			p := e.schedule()
			list := func(ss []*seq) []string {
				var out []string
				for _, s := range ss {
					out = append(out, names[s])
				}
				return out
			}
			if got := list(e.runningSeqs); fmt.Sprint(got) != fmt.Sprint(tc.running) {
				t.Errorf("running %v, want %v", got, tc.running)
			}
			if got := list(e.waiting); fmt.Sprint(got) != fmt.Sprint(tc.waiting) {
				t.Errorf("waiting %v, want %v", got, tc.waiting)
			}
			if p.decodes != tc.decodes {
				t.Errorf("step decodes %d, want %d", p.decodes, tc.decodes)
			}
			if used := e.totalBlocks - e.freeBlocks; used != 2*len(tc.running) {
				t.Errorf("%d blocks in use, want %d (the running ones' two each)", used, 2*len(tc.running))
			}
		})
	}
}

// TestPriorityOrdersQueue: with one seat taken, requests that arrive with
// priorities 5, 0 and -1 are served -1, 0, 5 once it frees; under fcfs a
// nonzero priority is refused with vLLM's 400 and 0 is served.
func TestPriorityOrdersQueue(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Engine.MaxNumSeqs = 1
	cfg.SchedulingPolicy = PolicyPriority
	url, s := startSim(t, cfg)
	blocker := holdStream(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"hold"}],"stream":true,"max_tokens":5000,"ignore_eos":true}`, true, s)
	order := make(chan int, 3)
	for i, p := range []int{5, 0, -1} {
		go func() {
			code, body, _ := post(t, url, fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":"q%d"}],"max_tokens":3,"ignore_eos":true,"priority":%d}`, i, p))
			if code != 200 {
				t.Errorf("priority %d: %d %s", p, code, body)
			}
			order <- p
		}()
		// Each waits before the next arrives, so arrival order is known.
		deadline := time.Now().Add(5 * time.Second)
		for scrape(t, url)["vllm:num_requests_waiting"] < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d never queued", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	blocker()
	var got []int
	for range 3 {
		select {
		case p := <-order:
			got = append(got, p)
		case <-time.After(10 * time.Second):
			t.Fatalf("served %v, then nothing", got)
		}
	}
	if fmt.Sprint(got) != "[-1 0 5]" {
		t.Errorf("served in priority order %v, want [-1 0 5]", got)
	}

	fcfs, _ := startSim(t, DefaultConfig())
	code, body, _ := post(t, fcfs, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2,"priority":-1}`)
	if code != 400 || !strings.Contains(body, "Got priority -1 but Priority scheduling is not enabled.") {
		t.Errorf("fcfs with priority -1: %d %s, want vLLM's 400", code, body)
	}
	if code, body, _ := post(t, fcfs, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2,"priority":0}`); code != 200 {
		t.Errorf("fcfs with priority 0: %d %s", code, body)
	}
	if code, body, _ := post(t, url, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2,"priority":"high"}`); code != 400 {
		t.Errorf("priority \"high\": %d %s, want 400", code, body)
	}
}

// TestAbortFreesEngineAtOnce: a client whose connection closes mid-prefill
// or mid-decode is aborted and its KV blocks freed within 100 ms, as
// vllm:num_requests_running and vllm:kv_cache_usage_perc show, even when
// the step in flight lasts far longer (a 600 ms prefill, 300 ms decode
// steps). Real TCP: the client just closes its socket.
func TestAbortFreesEngineAtOnce(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		body string
		// waitFirst: close after the first content token (mid-decode),
		// else as soon as the engine runs the request (mid-prefill).
		waitFirst bool
	}{
		{"mid-prefill", func(c *Config) {
			c.Engine.PrefillTokensPerS = 4000
			c.Engine.MaxBatchedTokens = 0 // the whole prompt in one 600 ms step
		}, "", false},
		{"mid-decode", func(c *Config) { c.Engine.DecodeBaseMs = 300 }, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			url, _ := startSim(t, cfg)
			prompt := "hi"
			if !tc.waitFirst {
				prompt = words(t, 0, 2400)
			}
			body := fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":%q}],"stream":true,"max_tokens":1000,"ignore_eos":true}`, prompt)
			conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if tc.waitFirst {
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("no first token: %v", err)
					}
					if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
						break
					}
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				m := scrape(t, url)
				if m["vllm:num_requests_running"] == 1 && m["vllm:kv_cache_usage_perc"] > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("request never ran: %v", m)
				}
				time.Sleep(2 * time.Millisecond)
			}
			closed := time.Now()
			conn.Close()
			var freed time.Duration
			for {
				m := scrape(t, url)
				if m["vllm:num_requests_running"] == 0 && m["vllm:kv_cache_usage_perc"] == 0 {
					freed = time.Since(closed)
					break
				}
				if time.Since(closed) > 3*time.Second {
					t.Fatalf("3 s after the client closed, the engine still holds it: %v", m)
				}
				time.Sleep(2 * time.Millisecond)
			}
			t.Logf("%s: running and KV usage back to 0 %v after the client closed", tc.name, freed)
			if freed > 100*time.Millisecond {
				t.Errorf("freed %v after the client closed, want within 100ms", freed)
			}
		})
	}
}

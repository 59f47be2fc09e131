package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/llamatest"
)

// On llama.cpp's server (one slot, the tiny model decoding ~70 tokens a
// second, 1000 of them an answer): a flex request holding the slot is
// preempted for a priority request that must queue; the gateway closes
// the exchange, llama.cpp stops the generation and frees its slot, and
// the priority request is answered in a fraction of the flex one's
// generation time (without preemption: ~6 s here). Plain: the flex
// answer has sent nothing until it is done (llama.cpp notices the closed
// connection of a plain request within about a second: the priority one
// took 0.84-1.2 s). Streamed, with mid_stream_eviction: evicted after its
// first byte, noticed at llama.cpp's next token (the priority one: 27-52 ms).
//
// (Polling llama.cpp's /metrics meanwhile held its HTTP threads and
// delayed the priority request by seconds: the gauge is read only after.)
func TestPreemptionFreesLlamaCpp(t *testing.T) {
	srv := llamatest.Start(t, llamatest.Options{Parallel: 1, Predict: 1000})
	for _, tc := range []struct {
		name   string
		stream bool
	}{{"plain", false}, {"stream evicted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := classesConfig(srv.URL)
			cfg.Models, cfg.DefaultPool = nil, "p"
			cfg.Shaping.Global.MaxRequests = 1
			cfg.Classes.MidStreamEviction = tc.stream
			cfg.Timeouts.FirstByte, cfg.Timeouts.Idle = time.Minute, time.Minute
			gw := startGateway(t, cfg)
			flex := make(chan string, 1)
			go func() {
				c, _, body := send(gw.URL, `{"model":"m","max_tokens":1000,"stream":`+map[bool]string{true: "true", false: "false"}[tc.stream]+`,"service_tier":"flex","messages":[{"role":"user","content":"write"}]}`)
				if c != 200 {
					body = "status " + body
				}
				flex <- body
			}()
			waitFor(t, 10*time.Second, "llama.cpp generating the flex answer", func() bool {
				return simGauge(t, srv.URL, "llamacpp:requests_processing") == 1
			})
			time.Sleep(200 * time.Millisecond) // well into its generation
			start := time.Now()
			code, _, body := send(gw.URL, `{"model":"m","stream":true,"max_tokens":4,"service_tier":"priority","messages":[{"role":"user","content":"hi"}]}`, bearer("sk-gold")...)
			took := time.Since(start)
			if code != 200 || !strings.Contains(body, "[DONE]") {
				t.Fatalf("priority: %d %s", code, body)
			}
			if f := <-flex; !strings.Contains(f, `"code":"preempted"`) || strings.Contains(f, "[DONE]") {
				t.Errorf("flex ended %.300q, want preempted", f)
			}
			t.Logf("priority answered in %v", took)
			if took > 3*time.Second {
				t.Errorf("the priority request took %v: llama.cpp did not stop the preempted generation", took)
			}
			waitFor(t, 2*time.Second, "llama.cpp idle", func() bool { return simGauge(t, srv.URL, "llamacpp:requests_processing") == 0 })
		})
	}
}

//go:build linux

package proxy

import (
	"testing"
	"time"

	"github.com/infergate/infergate/internal/netem"
	"github.com/infergate/infergate/sim"
	"github.com/infergate/infergate/sim/simtest"
)

// A backend 30 ms of round trip away (a real delay on the wire, through
// a network namespace): the round trip lands in network, the dial in
// connect, and the sim's own 20 ms TTFT in model.
func TestNetworkDelayLandsInNetwork(t *testing.T) {
	if err := netem.Available(); err != nil {
		t.Skip(err)
	}
	link, err := netem.New(30 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	ln, err := link.Listen("0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Model, cfg.Mode, cfg.TTFT, cfg.ITL = "m", "fixed", 20*time.Millisecond, time.Millisecond
	gw := startGateway(t, testConfig(simtest.StartOn(t, cfg, ln).URL))
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for i, name := range []string{"new connection", "pooled connection"} {
		tm := timedStream(t, gw.URL, body)
		addsUp(t, tm)
		if tm.Network < 29 || tm.Network > 60 {
			t.Errorf("%s: network %.1f ms, want the link's 30 ms (%+v)", name, tm.Network, tm)
		}
		// The emulated link's forwarder is a goroutine: with the rest of
		// the test suite loading both cores, every round trip a pooled
		// connection measured can run a few ms long, and the kernel's
		// minimum RTT with it; what it overstates, model shows less.
		if tm.ModelTTFT < 15 || tm.ModelTTFT > 45 {
			t.Errorf("%s: model TTFT %.1f ms, want the sim's 20 ms (%+v)", name, tm.ModelTTFT, tm)
		}
		if i == 0 && (tm.Connect < 29 || tm.Connect > 60) {
			t.Errorf("new connection: connect %.1f ms, want one round trip (30 ms) for the handshake", tm.Connect)
		}
		if i == 1 && tm.Connect > 5 {
			t.Errorf("pooled connection: connect %.1f ms, want ~0", tm.Connect)
		}
		if tm.Gateway > 10 {
			t.Errorf("%s: gateway %.1f ms: the delay leaked into the gateway's share", name, tm.Gateway)
		}
	}
}

package proxy

import (
	"strings"
	"testing"
	"time"
)

func TestCoarseDeadline(t *testing.T) {
	t.Parallel()
	var c coarseDeadline
	t0 := time.Unix(1000, 0)
	d := 64 * time.Millisecond // re-armed after 1 ms
	for _, step := range []struct {
		at   time.Duration
		d    time.Duration
		want bool
		why  string
	}{
		{0, d, true, "the first"},
		{500 * time.Microsecond, d, false, "within a 64th of the timeout"},
		{999 * time.Microsecond, d, false, "still within it"},
		{time.Millisecond, d, true, "a 64th later"},
		{1100 * time.Microsecond, 2 * d, true, "another timeout"},
		{1200 * time.Microsecond, d, true, "back to the first timeout"},
	} {
		if got := c.due(t0.Add(step.at), step.d); got != step.want {
			t.Fatalf("%s (at %v, %v): due %v, want %v", step.why, step.at, step.d, got, step.want)
		}
	}
	c.reset()
	if !c.due(t0.Add(1300*time.Microsecond), d) {
		t.Fatal("after reset: not due")
	}
}

// A stream whose events keep coming is never cut by the idle or the
// write timeout however long it runs: the coarse deadlines move on.
func TestStreamOutlivesItsTimeouts(t *testing.T) {
	t.Parallel()
	be := newTestBackend(t, sseHandler(24, 25*time.Millisecond)) // 0.6 s
	cfg := testConfig(be.URL)
	cfg.Timeouts.Idle = 150 * time.Millisecond
	cfg.Server.WriteTimeout = 150 * time.Millisecond
	gw := startGateway(t, cfg)
	code, _, body := post(t, gw.URL, "/v1/chat/completions", streamBody)
	ev := events(body)
	if code != 200 || len(ev) != 26 || ev[23] == "" || !strings.Contains(ev[23], `"t23"`) || ev[25] != "[DONE]" {
		t.Fatalf("status %d, %d events: %q", code, len(ev), body)
	}
}

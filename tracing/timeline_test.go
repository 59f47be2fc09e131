package tracing

import (
	"testing"
	"time"
)

func TestDerivedFigures(t *testing.T) {
	t0 := time.Now()
	tl := Timeline{Received: t0, UpstreamStart: t0.Add(time.Millisecond), Connected: t0.Add(3 * time.Millisecond),
		Sent: t0.Add(4 * time.Millisecond), FirstTokenIn: t0.Add(54 * time.Millisecond), FirstTokenOut: t0.Add(55 * time.Millisecond),
		Done: t0.Add(time.Second)}
	if tl.TTFT() != 55*time.Millisecond || tl.Connect() != 2*time.Millisecond || tl.ModelTTFT() != 50*time.Millisecond || tl.Duration() != time.Second {
		t.Errorf("TTFT %v connect %v model TTFT %v duration %v", tl.TTFT(), tl.Connect(), tl.ModelTTFT(), tl.Duration())
	}
	// A request that never reached a backend has no connect or model time.
	short := Timeline{Received: t0, Done: t0.Add(time.Millisecond)}
	if short.Connect() != 0 || short.ModelTTFT() != 0 || short.TTFT() != 0 {
		t.Errorf("missing stamps gave figures: %v %v %v", short.Connect(), short.ModelTTFT(), short.TTFT())
	}
}

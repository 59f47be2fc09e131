package tracing

import (
	"testing"
	"time"
)

func TestRecentWindow(t *testing.T) {
	r := NewRecent(10 * time.Second)
	now := time.Unix(5000, 0)
	add := func(ago time.Duration, ttft time.Duration, ok bool, backend string) {
		done := now.Add(-ago)
		start := done.Add(-time.Second)
		tl := Timeline{Received: start, Admitted: start, UpstreamStart: start, Connected: start, Sent: start,
			FirstTokenIn: start.Add(ttft), FirstTokenOut: start.Add(ttft), LastTokenIn: done, Done: done, OutputTokens: 11}
		r.Add(&tl, "m", backend, ok)
	}
	add(30*time.Second, 900*time.Millisecond, true, "a") // out of the window
	for i := range 10 {
		add(time.Duration(i)*100*time.Millisecond, time.Duration(10+i)*time.Millisecond, true, "a")
	}
	add(time.Second, 50*time.Millisecond, false, "b")
	snap := r.Snapshot(now)
	if snap.All.Requests != 11 || snap.All.Errors != 1 || len(snap.Groups) != 2 {
		t.Fatalf("all %+v, %d groups; want 11 requests, 1 error, 2 groups", snap.All, len(snap.Groups))
	}
	a := snap.Groups[0]
	if a.Backend != "a" || a.Samples != 10 || a.TTFT == nil || a.TTFT.P50 != 14 || a.TTFT.P90 == nil || *a.TTFT.P90 != 18 || a.TTFT.P99 != nil {
		t.Errorf("group a: %+v %+v; want 10 samples, TTFT p50 14 ms, p90 18 ms, no p99 of 10 (the old one left out)", a, a.TTFT)
	}
	// 10 tokens after the first over the decode span.
	if a.TPOT == nil || a.Speed == nil || a.Speed.P50 < 10 || a.Speed.P50 > 12 {
		t.Errorf("speed %+v, want about 10 tokens per ~0.98 s", a.Speed)
	}
	if b := snap.Groups[1]; b.TTFT != nil || b.Errors != 1 {
		t.Errorf("group b: a failed request's TTFT counted: %+v", b)
	}
	if later := r.Snapshot(now.Add(time.Minute)); later.All.Requests != 0 || len(later.Groups) != 0 {
		t.Errorf("a minute later: %+v", later.All)
	}
}

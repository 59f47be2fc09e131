//go:build !race

package bench

import (
	"testing"
	"time"
)

// The client reads a stream without allocating per event: a 400-event
// stream costs what a 40-event one does.
func TestReadStreamAllocatesNothingPerEvent(t *testing.T) {
	p := newParser(nil, nil)
	p.flushGaps = func([]time.Duration) {}
	short, long := streamOf(40), streamOf(400)
	readOnce(p, long) // buffers reach their size
	a := testing.AllocsPerRun(50, func() { readOnce(p, short) })
	b := testing.AllocsPerRun(50, func() { readOnce(p, long) })
	if b > a {
		t.Errorf("%v allocations for 400 events, %v for 40: something allocates per event", b, a)
	}
}

//go:build !race

package proxy

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/tracing"
)

// The relay loop allocates nothing per event.
func TestRelayAllocatesNothingPerEvent(t *testing.T) {
	er := openai.NewEventReader(nil, nil, 1<<20)
	w := bufio.NewWriter(io.Discard)
	src := &eventSource{ev: benchEvent, tail: []byte(doneEvent)}
	var tl tracing.Timeline
	allocs := testing.AllocsPerRun(50, func() {
		src.n, src.i = 500, 0
		er.Reset(src, nil, 1<<20)
		relay(w, er, noDeadline{}, time.Second, time.Second, &tl, false)
	})
	if allocs != 0 {
		t.Errorf("relaying 500 events allocated %v times, want 0", allocs)
	}
}

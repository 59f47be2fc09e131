package supervise

import (
	"testing"
	"time"
)

func TestLoopRestartsAfterPanicAndStopsWhenDone(t *testing.T) {
	runs, panics := 0, 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(stop, func() {
			runs++
			if runs < 3 {
				panic("boom")
			}
		}, func(v any, stack []byte) {
			if v != "boom" || len(stack) == 0 {
				t.Errorf("onPanic(%v, %d bytes of stack)", v, len(stack))
			}
			panics++
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Loop did not return once f returned normally")
	}
	if runs != 3 || panics != 2 {
		t.Errorf("runs %d, panics %d; want 3 and 2", runs, panics)
	}
}

func TestLoopStopsOnStopAfterPanic(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	n := 0
	Loop(stop, func() { n++; panic("again") }, nil)
	if n != 1 {
		t.Errorf("f ran %d times with stop closed, want 1", n)
	}
}

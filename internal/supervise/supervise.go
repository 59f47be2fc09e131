// Package supervise keeps a background goroutine alive through a panic:
// the panic is reported with its stack and the loop starts again, so a
// goroutine the process depends on (a health check, a lease renewer, the
// hang-up watcher) is never silently dead.
package supervise

import (
	"runtime/debug"
	"time"
)

// Restart is the pause before a loop that panicked starts again, so a
// loop that panics at once does not spin.
const Restart = 100 * time.Millisecond

// Loop runs f until it returns normally or stop is closed. Each panic in
// f is handed to onPanic (when set), with its stack, and f runs again
// after Restart. f is expected to loop itself and return when stop closes.
func Loop(stop <-chan struct{}, f func(), onPanic func(v any, stack []byte)) {
	for {
		if !runOnce(f, onPanic) {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(Restart):
		}
	}
}

// runOnce runs f and reports whether it panicked.
func runOnce(f func(), onPanic func(v any, stack []byte)) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if onPanic != nil {
				onPanic(v, debug.Stack())
			}
		}
	}()
	f()
	return false
}

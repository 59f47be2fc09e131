//go:build !linux

package hangup

// supported: no POLLRDHUP here; Watch gives handles that never fire (see
// the package comment).
const supported = false

type pollSet struct{}

// poll is never called: New starts no goroutine where unsupported.
func (w *Watcher) poll(fired []*Handle) []*Handle { return fired }

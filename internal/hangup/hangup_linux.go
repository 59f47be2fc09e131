package hangup

import "golang.org/x/sys/unix"

// supported: Linux has POLLRDHUP.
const supported = true

// pollSet is the argument of one poll(2) call, reused between calls.
type pollSet struct{ fds []unix.PollFd }

// poll checks every socket once and returns the handles whose peer is gone,
// already removed from the watch list.
func (w *Watcher) poll(fired []*Handle) []*Handle {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.entries) == 0 {
		return fired
	}
	w.set.fds = w.set.fds[:0]
	for _, h := range w.entries {
		w.set.fds = append(w.set.fds, unix.PollFd{Fd: h.fd, Events: unix.POLLRDHUP})
	}
	// Timeout 0: poll answers at once. Holding the lock keeps every fd in
	// the list open (its handle cannot be stopped, so its request cannot
	// end and close it) for the duration of this one short syscall.
	n, err := unix.Poll(w.set.fds, 0)
	if err != nil || n == 0 {
		return fired
	}
	for i := len(w.set.fds) - 1; i >= 0; i-- {
		if w.set.fds[i].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			h := w.entries[i]
			w.removeLocked(h)
			fired = append(fired, h)
		}
	}
	return fired
}

//go:build unix && !linux && !hurd

package hangup

import "golang.org/x/sys/unix"

// resting polls fd once, without waiting (see Resting). Without
// POLLRDHUP, a peer's FIN makes the socket readable (a read would return
// 0), which POLLIN reports, as it does bytes sent unasked.
func resting(fd int) bool {
	pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd[:], 0)
	if err != nil {
		return true // EINTR and the like: no news, not bad news
	}
	return n == 0 || pfd[0].Revents == 0
}

package hangup

import "golang.org/x/sys/unix"

// resting polls fd once, without waiting, for input, a hang-up or an
// error: at rest, any of them means the connection cannot carry a request
// (see Resting). POLLRDHUP reports the peer's FIN even while bytes it
// sent before are unread; POLLIN reports those bytes, or the FIN.
func resting(fd int) bool {
	pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	var zero unix.Timespec // ppoll, not poll: unix.Poll puts its timeout on the heap
	n, err := unix.Ppoll(pfd[:], &zero, nil)
	if err != nil {
		return true // EINTR and the like: no news, not bad news
	}
	return n == 0 || pfd[0].Revents == 0
}

package proxy

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setSmallRcvBuf gives a test client the smallest receive buffer the
// kernel allows, so a client that does not read fills it at once.
func setSmallRcvBuf(_, _ string, c syscall.RawConn) error {
	var err error
	_ = c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1024) })
	return err
}

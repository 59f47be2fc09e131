package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tcpRTT is the kernel's smoothed round-trip time of the TCP connection
// under c (TCP_INFO tcpi_rtt), or 0 when it cannot be read. It is one
// getsockopt: the network share of a request's time is measured, not
// guessed (DESIGN: the timeline).
func tcpRTT(c net.Conn) time.Duration {
	for {
		switch v := c.(type) {
		case *dialConn:
			c = v.Conn
			continue
		case *tls.Conn:
			c = v.NetConn()
			continue
		}
		break
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var rtt time.Duration
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			rtt = time.Duration(info.Rtt) * time.Microsecond
		}
	})
	return rtt
}

package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tcpRTT is the round-trip time of the TCP connection under c as the
// kernel measured it (TCP_INFO): the minimum seen on the connection
// (tcpi_min_rtt), which delayed ACKs do not inflate as they do the
// smoothed tcpi_rtt on a connection that idles between requests; the
// smoothed one where the kernel gives no minimum; 0 when unreadable. It is
// one getsockopt: the network share of a request's time is measured, not
// guessed (DESIGN: the timeline). Elsewhere (rtt_other.go) it is 0, and the
// round trip counts as the model's time.
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
			us := info.Min_rtt
			if us == 0 || us == ^uint32(0) {
				us = info.Rtt
			}
			rtt = time.Duration(us) * time.Microsecond
		}
	})
	return rtt
}

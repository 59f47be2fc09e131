package hangup

import "net"

// Resting reports whether conn, a connection at rest between requests
// (a client's pooled keep-alive connection), can carry another request:
// its peer has not closed or reset it and has sent nothing unasked (a
// server that times an idle connection out may first send a 408, which
// no request of ours would match). It checks once, at once, and reads
// nothing: one poll(2) with a zero timeout on Unix. Where it cannot tell
// (no socket under conn, no poll(2) on the system) it reports true, and
// the caller's retry of a request that failed on a reused connection is
// the only cure.
//
// A peer's close reaches us one network trip after it happened, so a
// connection the server closes just now still reads as resting: Resting
// makes a stale connection rare, not impossible.
func Resting(conn net.Conn) bool {
	fd, ok := SocketFD(conn)
	if !ok {
		return true
	}
	return resting(fd)
}

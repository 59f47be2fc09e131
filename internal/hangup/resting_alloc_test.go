//go:build linux && !race

package hangup

import (
	"net"
	"testing"
)

func TestRestingAllocatesNothing(t *testing.T) {
	client, server := pair(t)
	defer client.Close()
	defer server.Close()
	fd, _ := SocketFD(client)
	var c net.Conn = fdConn{Conn: client, fd: fd} // boxed once, as a pool's connection is
	if n := testing.AllocsPerRun(100, func() { Resting(c) }); n != 0 {
		t.Errorf("Resting allocated %v times per call, want 0", n)
	}
}

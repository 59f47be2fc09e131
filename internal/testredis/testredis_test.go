package testredis

import (
	"os/exec"
	"testing"
)

// A server started on a port another Redis holds is not taken for
// ours: its own exits (the port is in use), or the one that answers
// there has another process id.
func TestStartTakesOnlyItsOwnServer(t *testing.T) {
	a := Start(t, 0)
	pid, err := serverPID(a.Addr())
	if err != nil || pid != a.cmd.Process.Pid {
		t.Fatalf("the server on %s is process %d (%v), want %d", a.Addr(), pid, err, a.cmd.Process.Pid)
	}
	bin, _ := exec.LookPath("redis-server")
	if b, err := start(bin, a.Port); err == nil {
		b.Kill()
		t.Fatalf("a second redis-server on %d was taken as started", a.Port)
	}
	b := Start(t, 0)
	if b.Port == a.Port {
		t.Fatalf("two servers on port %d", a.Port)
	}
}

// Package testredis finds the real Redis server of the integration tests.
package testredis

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Addr returns the address of the Redis server the integration tests
// use: INFERGATE_TEST_REDIS (which .ci/run sets; then it must answer), or
// 127.0.0.1:6379 when something answers there. Otherwise tb skips.
func Addr(tb testing.TB) string {
	tb.Helper()
	addr, set := os.LookupEnv("INFERGATE_TEST_REDIS")
	if !set {
		addr = "127.0.0.1:6379"
	}
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		if set {
			tb.Fatalf("INFERGATE_TEST_REDIS=%s: %v", addr, err)
		}
		tb.Skip("no Redis on 127.0.0.1:6379 and INFERGATE_TEST_REDIS not set")
	}
	c.Close()
	return addr
}

// Server is a redis-server of the test's own, on a port it can stop and
// start again (a Redis restart under load). It keeps nothing on disk.
type Server struct {
	Port int
	cmd  *exec.Cmd
}

// Start runs redis-server on port (0: a free one) until the test ends;
// tb skips when redis-server is not installed.
func Start(tb testing.TB, port int) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redis-server not installed")
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	s := &Server{Port: port, cmd: exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")}
	if err := s.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", s.Addr()); err == nil {
			c.Close()
			return s
		}
	}
	tb.Fatal("redis-server did not start")
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Kill stops the server at once (SIGKILL: nothing is saved); safe to
// call twice.
func (s *Server) Kill() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// Package testredis finds the real Redis server of the integration tests.
package testredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	done chan struct{} // closed when the process has exited
}

// Start runs redis-server on port until the test ends; tb skips when
// redis-server is not installed. Port 0 picks a free one: redis-server
// cannot bind port 0 and say which it got, so a port is picked, and the
// server that answers on it is taken only when it is this one (its
// process id, asked over INFO); a port another process took in between
// is given up for another.
func Start(tb testing.TB, port int) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redis-server not installed")
	}
	for attempt := 1; ; attempt++ {
		p := port
		if port == 0 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				tb.Fatal(err)
			}
			p = ln.Addr().(*net.TCPAddr).Port
			ln.Close()
		}
		s, err := start(bin, p)
		if err == nil {
			tb.Cleanup(s.Kill)
			return s
		}
		if port != 0 || attempt == 5 {
			tb.Fatalf("redis-server on port %d: %v", p, err)
		}
	}
}

// start runs redis-server on port and waits until it answers there as
// itself.
func start(bin string, port int) (*Server, error) {
	s := &Server{Port: port, done: make(chan struct{}),
		cmd: exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server exited (%v): the port taken?", s.cmd.ProcessState)
		default:
		}
		pid, err := serverPID(s.Addr())
		if err != nil {
			continue // not listening yet
		}
		if pid != s.cmd.Process.Pid {
			s.Kill()
			return nil, fmt.Errorf("the Redis answering there is process %d, not ours (%d)", pid, s.cmd.Process.Pid)
		}
		return s, nil
	}
	s.Kill()
	return nil, errors.New("did not answer within 5 s")
}

// serverPID asks the Redis at addr for its process id (INFO server).
func serverPID(addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server named no process_id")
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Kill stops the server at once (SIGKILL: nothing is saved); safe to
// call twice.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}

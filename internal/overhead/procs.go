package overhead

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process of the harness.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	// admin is a serve's admin listener (/metrics, /admin/stats).
	admin string
	done  chan error
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago, for
// a process that cannot name the port it bound (nginx, another build).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening polls addr until it accepts a connection.
func (p *proc) waitListening(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			return fmt.Errorf("%s exited before listening: %v", p.name, err)
		default:
		}
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop()
	return fmt.Errorf("%s did not listen on %s within %v", p.name, p.addr, d)
}

// startInfergate runs the infergate binary with args, listening on ports
// the system picks, and waits until it has written them down.
func startInfergate(binary, name string, args ...string) (*proc, error) {
	return startInfergateEnv(nil, binary, name, args...)
}

// startInfergateEnv is startInfergate with env added to the environment.
// The process binds 127.0.0.1:0 (and, for serve, an admin listener the
// same way: gateways run side by side) and writes the addresses it bound
// to --addr-file, which the harness reads: no port is picked before it is
// bound. It logs at warn (at info serve logs a line per request).
func startInfergateEnv(env []string, binary, name string, args ...string) (*proc, error) {
	serve := len(args) > 0 && args[0] == "serve"
	dir, err := os.MkdirTemp("", "infergate-harness-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "addr")
	args = append(args, "--listen", "127.0.0.1:0", "--addr-file", file, "--log-level", "warn")
	if serve {
		args = append(args, "--admin-listen", "127.0.0.1:0")
	}
	p, err := launch(env, binary, name, args)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(file); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				switch k, v, _ := strings.Cut(line, " "); k {
				case "api":
					p.addr = v
				case "admin":
					p.admin = v
				}
			}
			if p.addr == "" || (serve && p.admin == "") {
				p.stop()
				return nil, fmt.Errorf("%s: its --addr-file says %q, want its api (and, for serve, admin) address", name, b)
			}
			return p, nil
		}
		select {
		case err := <-p.done:
			p.done <- err // for stop
			return nil, fmt.Errorf("%s exited before listening: %v", name, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s wrote no --addr-file within 15 s", name)
		}
	}
}

// startOther runs another build of a gateway (--gateway-binary) as
// startInfergateEnv runs serve, on ports picked for it (it may not name
// the ones it bound), with its log passed on as it comes.
func startOther(env []string, binary, name string, args ...string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args = append(args, "--listen", addr, "--admin-listen", admin)
	p, err := launch(env, binary, name, args)
	if err != nil {
		return nil, err
	}
	p.addr, p.admin = addr, admin
	return p, p.waitListening(15 * time.Second)
}

// launch starts binary with args (env added to the environment, its
// stderr the harness's) and reports its exit on done.
func launch(env []string, binary, name string, args []string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(binary, args...), done: make(chan error, 1)}
	p.cmd.Stderr = os.Stderr
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// startNginx runs nginx as a plain reverse proxy to upstream: HTTP/1.1
// keep-alive to the backend, proxy_buffering off, no access log.
func startNginx(path, dir, upstream string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`worker_processes auto;
worker_rlimit_nofile 65536;
daemon off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_requests 1000000;
  upstream backend { server %[2]s; keepalive 1024; keepalive_requests 1000000; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`, dir, upstream, addr)
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	p := &proc{name: "nginx", cmd: exec.Command(path, "-c", file, "-p", dir), addr: addr, done: make(chan error, 1)}
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, p.waitListening(10 * time.Second)
}

// stop sends SIGTERM and waits up to 10s, then kills.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// rssKiB returns the resident set of pid and its children (nginx workers).
func rssKiB(pid int) (int64, error) {
	total, err := statusKiB(pid)
	if err != nil {
		return 0, err
	}
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(kids)) {
		if k, err := strconv.Atoi(f); err == nil {
			if v, err := statusKiB(k); err == nil {
				total += v
			}
		}
	}
	return total, nil
}

func statusKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// fdCount returns the number of open descriptors of pid.
func fdCount(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// holdStreams opens n raw connections to addr, each sending one streaming
// request and reading nothing, and returns a func that closes them all.
func holdStreams(ctx context.Context, addr string, n int, body []byte) (func(), error) {
	conns := make([]net.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	req := fmt.Appendf(nil, "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for range n {
		if ctx.Err() != nil {
			closeAll()
			return nil, ctx.Err()
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("open stream %d: %w", len(conns), err)
		}
		if _, err := c.Write(req); err != nil {
			c.Close()
			closeAll()
			return nil, err
		}
		conns = append(conns, c)
	}
	return closeAll, nil
}

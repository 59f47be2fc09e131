package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLog waits until the process has logged want.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", want, p.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// What a person does: start the gateway with --pid-file, reload it by
// the file's number and through the admin API, stop it; the file is
// there while it runs, guards against a second gateway, and goes.
func TestPIDFileAndConfigReload(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "1ms", "--itl", "1ms")
	simURL := sim.url(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "infergate.yaml")
	pidPath := filepath.Join(dir, "gw.pid")
	writeConfig(t, path, simURL, "alpha")
	gw := start(t, "serve", "--config", path, "--pid-file", pidPath)
	url := gw.url(t)
	admin := gw.adminURL(t)

	b, err := os.ReadFile(pidPath)
	if err != nil {
		t.Fatalf("pid file after start: %v\n%s", err, gw.log())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid != gw.cmd.Process.Pid {
		t.Fatalf("pid file holds %q, the gateway is %d", b, gw.cmd.Process.Pid)
	}

	// A second gateway with the same file is refused and leaves it alone.
	out, err := exec.Command(binary, "serve", "--config", path, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pid-file", pidPath).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "infergate process "+strconv.Itoa(pid)+" is running") {
		t.Errorf("second gateway on the same pid file: %v\n%s", err, out)
	}
	if b2, _ := os.ReadFile(pidPath); string(b2) != string(b) {
		t.Errorf("the refused gateway rewrote the pid file: %q", b2)
	}

	// kill -HUP "$(cat gw.pid)"
	writeConfig(t, path, simURL, "beta")
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, gw, "configuration reloaded")
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Fatalf("beta after SIGHUP: %d\n%s", code, gw.log())
	}

	// infergate config reload --admin ADMIN
	writeConfig(t, path, simURL, "gamma")
	out, err = exec.Command(binary, "config", "reload", "--admin", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reloaded: now version 3") || !strings.Contains(string(out), "admin "+path) {
		t.Fatalf("config reload: %v\n%s", err, out)
	}
	if code, _ := chat(t, url, "gamma"); code != 200 {
		t.Fatalf("gamma after config reload: %d\n%s", code, gw.log())
	}
	// A bad file: the command fails with the reason, the running one stays.
	os.WriteFile(path, []byte("pools:\n  gpu:\n    backends:\n      - url: nope://x\nmodels:\n  - name: delta\n    pool: gpu\n"), 0o600)
	out, err = exec.Command(binary, "config", "reload", "--admin", admin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pools.gpu.backends[0].url") {
		t.Errorf("config reload of a bad file: %v\n%s", err, out)
	}
	if code, _ := chat(t, url, "gamma"); code != 200 {
		t.Errorf("gamma after a refused reload: %d", code)
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := gw.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, gw.log())
	}
	if _, err := os.Stat(pidPath); !os.IsNotExist(err) {
		t.Errorf("pid file after a clean exit: %v", err)
	}
}

// Without --config, config reload says there is no file, not "reloaded".
func TestConfigReloadWithoutFile(t *testing.T) {
	t.Parallel()
	gw := start(t, "serve", "--listen", "127.0.0.1:0")
	gw.url(t)
	out, err := exec.Command(binary, "config", "reload", "--admin", gw.adminURL(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "without a configuration file") {
		t.Errorf("config reload without --config: %v\n%s", err, out)
	}
}

// A stale pid file (its process gone, or the number now another
// program's) does not stop a start; a live infergate's does.
func TestPIDFileFree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(pid int) string {
		p := filepath.Join(dir, strconv.Itoa(pid))
		os.WriteFile(p, []byte(strconv.Itoa(pid)+"\n"), 0o644)
		return p
	}
	if err := pidFileFree(filepath.Join(dir, "none")); err != nil {
		t.Errorf("no file: %v", err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip(err)
	}
	if err := pidFileFree(write(dead.Process.Pid)); err != nil {
		t.Errorf("a dead process's file: %v", err)
	}
	// The test's parent (go test) is alive and not an infergate.
	if err := pidFileFree(write(os.Getppid())); err != nil {
		t.Errorf("another program's pid: %v", err)
	}
	gw := start(t, "serve", "--listen", "127.0.0.1:0")
	gw.url(t)
	if err := pidFileFree(write(gw.cmd.Process.Pid)); err == nil {
		t.Error("a running infergate's pid file was taken")
	}
}

// serve on its defaults says where its simulator listens, and it does.
func TestServeNamesItsSimulator(t *testing.T) {
	t.Parallel()
	gw := start(t, "serve", "--listen", "127.0.0.1:0")
	gw.url(t)
	m := regexp.MustCompile(`msg="built-in simulator listening \(no --config or --upstream\)" addr=(\S+)`).FindStringSubmatch(gw.log())
	if m == nil {
		t.Fatalf("no simulator line:\n%s", gw.log())
	}
	resp, err := http.Get(m[1] + "/health")
	if err != nil {
		t.Fatalf("the simulator the log names: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("%s/health: %d", m[1], resp.StatusCode)
	}
}

// What a script does to run the simulator and a gateway on ports the
// system picks, with quiet logs: --listen 127.0.0.1:0 and --addr-file,
// then read the file. Each address answers; the files go at exit.
func TestAddrFileNamesTheBoundPorts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	simFile, gwFile := filepath.Join(dir, "sim.addr"), filepath.Join(dir, "gw.addr")
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--addr-file", simFile, "--log-level", "warn", "--ttft", "1ms", "--itl", "1ms")
	simAddr := readAddrFile(t, sim, simFile)
	gw := start(t, "serve", "--upstream", "http://"+simAddr["api"], "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--addr-file", gwFile, "--log-level", "warn")
	gwAddr := readAddrFile(t, gw, gwFile)
	if len(simAddr) != 1 || len(gwAddr) != 2 {
		t.Fatalf("sim's file %v, gateway's %v: want api, and api and admin", simAddr, gwAddr)
	}
	for _, a := range []string{simAddr["api"], gwAddr["api"], gwAddr["admin"]} {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
			t.Fatalf("address %q, want the port bound on 127.0.0.1", a)
		}
	}
	if code, _ := chat(t, "http://"+gwAddr["api"], "sim-model"); code != 200 {
		t.Errorf("chat through the gateway's api address: %d\n%s", code, gw.log())
	}
	resp, err := http.Get("http://" + gwAddr["admin"] + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET the admin address's /metrics: %v %v", err, resp)
	}
	resp.Body.Close()
	for _, p := range []struct {
		p    *proc
		file string
	}{{gw, gwFile}, {sim, simFile}} {
		p.p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.p.done:
		case <-time.After(15 * time.Second):
			t.Fatalf("no exit after SIGTERM\n%s", p.p.log())
		}
		if _, err := os.Stat(p.file); !os.IsNotExist(err) {
			t.Errorf("%s after exit: %v, want it gone", p.file, err)
		}
	}
}

// readAddrFile waits for p's --addr-file and returns its lines as name
// to address.
func readAddrFile(t *testing.T, p *proc, path string) map[string]string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, ok := strings.Cut(line, " ")
			if !ok {
				t.Fatalf("%s: line %q, want \"name address\"", path, line)
			}
			out[k] = v
		}
		return out
	}
	t.Fatalf("no %s after 10 s\n%s", path, p.log())
	return nil
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/adminapi"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "infergate-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "infergate")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running infergate process whose stderr is collected: its
// first logCap bytes and its last tailLines lines, so a long run logging
// a line per request does not pile up in the test.
type proc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	logs    strings.Builder
	dropped int      // lines past logCap
	tail    []string // the last tailLines of them
	addr    chan string
	admin   chan string // the admin listener's address, for serve
	done    chan error
}

// adminURL waits for the admin listener's address.
func (p *proc) adminURL(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.admin:
		return "http://" + a
	case <-time.After(10 * time.Second):
		t.Fatalf("no admin listener\n%s", p.log())
	}
	return ""
}

var (
	listenRe = regexp.MustCompile(`msg="(?:infergate|sim) listening" addr=(\S+)`)
	adminRe  = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
)

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	if len(args) > 0 && args[0] == "serve" && !slices.Contains(args, "--admin-listen") {
		// Processes run side by side: none takes the default admin port.
		args = append(args, "--admin-listen", "127.0.0.1:0")
	}
	p := &proc{cmd: exec.Command(binary, args...), addr: make(chan string, 1), admin: make(chan string, 1), done: make(chan error, 1)}
	stderr, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.keep(line)
			if m := adminRe.FindStringSubmatch(line); m != nil {
				p.admin <- m[1]
			}
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case p.addr <- m[1]:
				default:
				}
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
	})
	return p
}

func (p *proc) url(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.addr:
		return "http://" + a
	case err := <-p.done:
		t.Fatalf("process exited before listening: %v\n%s", err, p.log())
	case <-time.After(10 * time.Second):
		t.Fatalf("process did not start listening\n%s", p.log())
	}
	return ""
}

const (
	logCap    = 1 << 20
	tailLines = 200
)

func (p *proc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logs.Len() < logCap {
		p.logs.WriteString(line + "\n")
		return
	}
	p.dropped++
	p.tail = append(p.tail, line)
	if len(p.tail) > tailLines {
		p.tail = slices.Delete(p.tail, 0, len(p.tail)-tailLines)
	}
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropped == 0 {
		return p.logs.String()
	}
	return fmt.Sprintf("%s[%d lines not kept; the last %d:]\n%s\n", p.logs.String(), p.dropped-len(p.tail), len(p.tail), strings.Join(p.tail, "\n"))
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("process did not exit\n%s", p.log())
	}
	return nil
}

func chat(t *testing.T, url, model string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"sim", "--help"}, {"overhead", "--help"}, {"bench", "--help"}, {"compare", "--help"}, {"probe", "--help"}, {"demo", "--help"}, {"top", "--help"}, {"ab", "--help"}, {"ab", "report", "--help"}, {"diagnose", "--help"}, {"size", "--help"}, {"config", "--help"}, {"tune", "--help"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: infergate") {
			t.Errorf("infergate %v: err %v, output %q", args, err, out)
		}
	}
	out, _ := exec.Command(binary, "sim", "--help").CombinedOutput()
	for _, want := range []string{"-max-num-seqs", "(milliseconds)", "memory-bound", "X-Sim-Fault"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sim --help lacks %q", want)
		}
	}
	if err := exec.Command(binary, "nonsense").Run(); err == nil {
		t.Error("unknown command exited 0")
	}
}

// The main job on built-in defaults: serve with no flags fronts a
// simulator, and SIGTERM exits 0.
func TestServeDefaultsAndSigterm(t *testing.T) {
	t.Parallel()
	p := start(t, "serve", "--listen", "127.0.0.1:0")
	url := p.url(t)
	code, body := chat(t, url, "sim-model")
	if code != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("status %d body %q", code, body)
	}
	// A fault the built-in sim cannot honour (this once took the whole
	// process down) gets 400, and the gateway carries on.
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Fault", "net_delay=-2ns;net_jitter=-3ns")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("negative fault delays: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, _ := chat(t, url, "sim-model"); code != 200 {
		t.Errorf("after the refused fault: %d", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.log())
	}
	if !strings.Contains(p.log(), "outcome=ok") {
		t.Errorf("no request log line:\n%s", p.log())
	}
}

func writeConfig(t *testing.T, path, simURL, model string) {
	t.Helper()
	cfg := fmt.Sprintf(`server:
  listen: 127.0.0.1:0
pools:
  gpu:
    backends:
      - url: %s
models:
  - name: %s
    pool: gpu
    upstream_model: sim-model
`, simURL, model)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestConfigFileAndReload(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "1ms", "--itl", "1ms")
	simURL := sim.url(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "infergate.yaml")
	writeConfig(t, path, simURL, "alpha")
	gw := start(t, "serve", "--config", path)
	url := gw.url(t)
	if code, body := chat(t, url, "alpha"); code != 200 {
		t.Fatalf("alpha: %d %s", code, body)
	}

	// A good reload swaps the model.
	writeConfig(t, path, simURL, "beta")
	gw.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(gw.log(), "configuration reloaded") {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Fatalf("beta after reload: %d\n%s", code, gw.log())
	}
	if code, _ := chat(t, url, "alpha"); code != 404 {
		t.Errorf("alpha after reload: %d, want 404", code)
	}

	// A bad file is refused and the running config stays.
	os.WriteFile(path, []byte("pools:\n  gpu:\n    backends:\n      - url: nope://x\nmodels:\n  - name: gamma\n    pool: gpu\n"), 0o600)
	gw.cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(gw.log(), "reload refused") {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(gw.log(), "pools.gpu.backends[0].url") {
		t.Errorf("refusal does not name the field:\n%s", gw.log())
	}
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Errorf("beta after a refused reload: %d", code)
	}

	// The gateway kept both applied configurations; a rollback through
	// the CLI brings alpha back, and is itself a new version.
	admin := gw.adminURL(t)
	out, err := exec.Command(binary, "config", "versions", "--admin", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version 2") || !strings.Contains(string(out), "sighup "+path) ||
		!strings.Contains(string(out), "models[0].name: alpha → beta") || strings.Contains(string(out), "version 3") {
		t.Fatalf("config versions: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "config", "rollback", "--admin", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "now version 3") {
		t.Fatalf("config rollback: %v\n%s", err, out)
	}
	if code, _ := chat(t, url, "alpha"); code != 200 {
		t.Errorf("alpha after the rollback: %d", code)
	}
	if code, _ := chat(t, url, "beta"); code != 404 {
		t.Errorf("beta after the rollback: %d, want 404", code)
	}
	if !strings.Contains(gw.log(), "configuration rolled back") {
		t.Errorf("the rollback was not logged:\n%s", gw.log())
	}
	// The admin API: to a named version (beta's, 2), then an unknown one.
	if v, err := (&adminapi.Client{URL: admin}).Rollback(context.Background(), adminapi.RollbackRequest{Version: 2}); err != nil || v.Version != 4 || !v.Current {
		t.Fatalf("rollback to 2: %+v %v", v, err)
	}
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Errorf("beta after rolling forward to version 2: %d", code)
	}
	// The server's refusals, raw: malformed bodies a client never sends.
	for _, tc := range []struct {
		method, body string
		status       int
	}{{"POST", `{"version":99}`, 404}, {"POST", `{"hash":"zzzz"}`, 404}, {"POST", `{"version":"x"}`, 400}, {"GET", "", 405}} {
		req, _ := http.NewRequest(tc.method, admin+"/admin/config/rollback", strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != tc.status {
			t.Errorf("%s %s: %v %v, want %d", tc.method, tc.body, resp, err, tc.status)
			continue
		}
		resp.Body.Close()
	}
	// The running configuration is still version 4's (beta).
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Errorf("beta after refused rollbacks: %d", code)
	}
}

func TestBadConfigRefusedAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "server:\n  listen: 127.0.0.1:0\n  lisen: x\n", "line 3, server.lisen: unknown key; did you mean listen?"},
		{"bad selection", "pools:\n  a:\n    selection: random\n    backends: [{url: 'http://127.0.0.1:1'}]\nmodels: [{name: m, pool: a}]\n", "pools.a.selection"},
		{"bad duration", "timeouts:\n  idle: soon\n", "idle"},
		{"missing pool", "models: [{name: m, pool: nope}]\npools:\n  a:\n    backends: [{url: 'http://127.0.0.1:1'}]\n", "models[0].pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yaml")
			os.WriteFile(path, []byte(tc.yaml), 0o600)
			out, err := exec.Command(binary, "serve", "--config", path).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("err %v output %q, want a refusal naming %q", err, out, tc.want)
			}
		})
	}
}

// The example starts on a laptop with nothing set (its backend is the
// local simulator), and its commented remote backend is valid once
// uncommented with its key set.
func TestExampleConfigIsValid(t *testing.T) {
	t.Setenv("VLLM_API_KEY", "")
	const example = "../../infergate.example.yaml"
	cfg, err := loadConfig(example)
	if err != nil {
		t.Fatalf("infergate.example.yaml with no environment: %v", err)
	}
	if bs := cfg.Pools["vllm"].Backends; len(bs) != 1 || bs[0].URL != "http://127.0.0.1:8000" {
		t.Errorf("the example's backends are %+v, want the local simulator alone", bs)
	}

	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	remote := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, "# A remote backend"):
			remote = true
			continue
		case remote && strings.HasPrefix(l, "      # "):
			l = strings.Replace(l, "# ", "", 1)
		default:
			remote = false
		}
		lines = append(lines, l)
	}
	full := filepath.Join(t.TempDir(), "full.yaml")
	if err := os.WriteFile(full, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(full); err == nil || !strings.Contains(err.Error(), "VLLM_API_KEY is empty") {
		t.Errorf("the remote backend without its key: %v", err)
	}
	t.Setenv("VLLM_API_KEY", "example")
	cfg, err = loadConfig(full)
	if err != nil {
		t.Fatalf("infergate.example.yaml with its remote backend uncommented: %v", err)
	}
	if bs := cfg.Pools["vllm"].Backends; len(bs) != 2 || bs[1].URL != "https://gpu-2.internal:8000" || bs[1].APIKeyEnv != "VLLM_API_KEY" {
		t.Errorf("uncommented, the example's backends are %+v", bs)
	}
}

// top reads a running gateway's admin listener and shows what went
// through it.
func TestTopShowsTheLiveView(t *testing.T) {
	t.Parallel()
	p := start(t, "serve", "--listen", "127.0.0.1:0")
	url := p.url(t)
	for range 3 {
		if code, body := chat(t, url, "sim-model"); code != 200 {
			t.Fatalf("status %d body %q", code, body)
		}
	}
	admin := p.adminURL(t)
	out, err := exec.Command(binary, "top", "--admin", admin, "--count", "2", "--interval", "100ms").CombinedOutput()
	if err != nil {
		t.Fatalf("top: %v\n%s", err, out)
	}
	text := string(out)
	if n := strings.Count(text, "infergate top"); n != 2 {
		t.Errorf("%d frames, want 2:\n%s", n, text)
	}
	for _, want := range []string{"requests 3 ", "sim-model", "where the time went", "closed"} {
		if !strings.Contains(text, want) {
			t.Errorf("top lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b[2J") {
		t.Error("top cleared the screen of a pipe")
	}
	if out, err := exec.Command(binary, "top", "--admin", "127.0.0.1:1", "--count", "1").CombinedOutput(); err == nil {
		t.Errorf("top against nothing exited 0: %s", out)
	}
}

// SIGTERM: /readyz answers 503 at once while an in-flight stream
// finishes, the listener keeps serving for drain_delay with connections
// closed after each answer, and the process exits 0; a second SIGTERM
// exits at once.
func TestSigtermDrains(t *testing.T) {
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "5ms", "--itl", "20ms")
	simURL := sim.url(t)
	path := filepath.Join(t.TempDir(), "infergate.yaml")
	writeConfig(t, path, simURL, "m")
	raw, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(raw), "server:\n", "server:\n  drain_delay: 700ms\n  drain_timeout: 10s\n", 1)), 0o600)

	stream := func(gw string, tokens int) (*http.Response, error) {
		return http.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(
			`{"model":"m","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`, tokens)))
	}

	t.Run("drain", func(t *testing.T) {
		p := start(t, "serve", "--config", path)
		url, admin := p.url(t), p.adminURL(t)
		resp, err := stream(url, 60) // 60 tokens, 20 ms apart: about 1.2 s
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v", err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Second)
		for {
			r, err := http.Get(admin + "/readyz")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == 503 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("/readyz did not turn 503 after SIGTERM")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Within the drain delay a new request is still served, and told
		// to close its connection.
		r, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil || r.StatusCode != 200 || !r.Close {
			t.Errorf("a request during the drain delay: %v %v, want 200 with Connection: close", r, err)
		}
		if r != nil {
			r.Body.Close()
		}
		rest, _ := io.ReadAll(br)
		if !strings.Contains(string(rest), "[DONE]") {
			t.Errorf("the in-flight stream did not finish: %q", rest)
		}
		if err := p.wait(t); err != nil {
			t.Errorf("exit after the drain: %v\n%s", err, p.log())
		}
	})

	t.Run("second signal", func(t *testing.T) {
		p := start(t, "serve", "--config", path)
		url := p.url(t)
		resp, err := stream(url, 1000) // 20 s
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(900 * time.Millisecond) // past the drain delay: the drain waits for the stream
		start := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		err = p.wait(t)
		if err == nil {
			t.Error("a forced exit exited 0")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the second SIGTERM took %v to end the process", d)
		}
	})
}

// TestWatchConfigFollowsAConfigMap lays the config out as the kubelet
// mounts a ConfigMap (config.yaml → ..data/config.yaml, ..data → a
// timestamped directory, swapped by rename) and updates it the kubelet's
// way: with --watch-config the gateway reloads on its own, once per change,
// and a broken update is refused while the running config stays.
func TestWatchConfigFollowsAConfigMap(t *testing.T) {
	t.Parallel()
	sim := start(t, "sim", "--listen", "127.0.0.1:0", "--ttft", "1ms", "--itl", "1ms")
	simURL := sim.url(t)
	dir := t.TempDir()
	update := func(gen int, body func(path string)) {
		t.Helper()
		ts := filepath.Join(dir, fmt.Sprintf("..2026_12_06_%02d", gen))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		body(filepath.Join(ts, "config.yaml"))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	update(1, func(p string) { writeConfig(t, p, simURL, "alpha") })
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink("..data/config.yaml", path); err != nil {
		t.Fatal(err)
	}
	gw := start(t, "serve", "--config", path, "--watch-config", "50ms")
	url := gw.url(t)
	if code, body := chat(t, url, "alpha"); code != 200 {
		t.Fatalf("alpha: %d %s", code, body)
	}
	waitLog := func(s string, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if strings.Count(gw.log(), s) >= n {
				return
			}
		}
		t.Fatalf("no %d× %q in the log:\n%s", n, s, gw.log())
	}
	update(2, func(p string) { writeConfig(t, p, simURL, "beta") })
	waitLog("configuration reloaded", 1)
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Fatalf("beta after the ConfigMap update: %d\n%s", code, gw.log())
	}
	update(3, func(p string) { os.WriteFile(p, []byte("pools: [\n"), 0o600) })
	waitLog("reload refused", 1)
	time.Sleep(300 * time.Millisecond) // six more checks: an unchanged file is not tried again
	if n := strings.Count(gw.log(), "reload refused"); n != 1 {
		t.Errorf("%d refusals of one broken update, want 1:\n%s", n, gw.log())
	}
	if n := strings.Count(gw.log(), "configuration reloaded"); n != 1 {
		t.Errorf("%d reloads for one good update, want 1", n)
	}
	if code, _ := chat(t, url, "beta"); code != 200 {
		t.Errorf("beta after a refused update: %d", code)
	}
	if !strings.Contains(gw.log(), "by=watch") {
		t.Errorf("the reload does not say the watch made it:\n%s", gw.log())
	}
}

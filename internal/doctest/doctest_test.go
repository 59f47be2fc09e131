//go:build linux

package doctest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lineTimeout bounds one documented line (durations already shortened);
// pageTimeout, a whole page. INFERGATE_DOCTEST_AS_WRITTEN=1 runs the
// lines as written, durations and all (scripts/tour.sh), with more time.
var (
	asWritten   = os.Getenv("INFERGATE_DOCTEST_AS_WRITTEN") == "1"
	lineTimeout = map[bool]time.Duration{false: 40 * time.Second, true: 5 * time.Minute}[asWritten]
	pageTimeout = map[bool]time.Duration{false: 3 * time.Minute, true: 30 * time.Minute}[asWritten]
)

// docsPrelude is what a docs page's blocks assume is running: the README
// tour's first two steps, the simulator on 127.0.0.1:8000 and the gateway
// in front of it on 127.0.0.1:8080 (admin 127.0.0.1:9464).
const docsPrelude = `infergate sim --decode-speedup 8 --listen 127.0.0.1:8000 2>prelude-sim.log &
until curl -sf 127.0.0.1:8000/health >/dev/null; do sleep 0.1; done
infergate serve --upstream http://127.0.0.1:8000 --health-path /health 2>prelude-gateway.log &
until curl -sf 127.0.0.1:8080/readyz >/dev/null; do sleep 0.1; done
`

// The addresses the docs use: without a network namespace of its own a
// page runs only when all are free.
var docAddrs = []string{"127.0.0.1:8000", "127.0.0.1:8080", "127.0.0.1:9464", "127.0.0.1:9001", "127.0.0.1:8081", "127.0.0.1:9465", "127.0.0.1:8082", "127.0.0.1:9466"}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds cmd/infergate once for every page.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "doctest-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "infergate"), "./cmd/infergate")
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

const repoRoot = "../.."

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// isolated reports whether a page can run in a network namespace of its
// own (unprivileged user namespaces), so pages run side by side and never
// meet another process's ports.
var isolated = sync.OnceValue(func() bool {
	if _, err := exec.LookPath("ip"); err != nil {
		return false
	}
	return exec.Command("unshare", "-rn", "ip", "link", "set", "lo", "up").Run() == nil
})

func TestREADME(t *testing.T) { runPage(t, "README.md", "") }

// TestDocs runs each docs page as a subtest. In a namespace of its own
// the whole test is parallel too: as a serial top-level test it held
// TestREADME (parallel) back until every page had run, so the package
// took the docs' time plus the README's (80 s on 2 cores) instead of
// the longer of the two.
func TestDocs(t *testing.T) {
	if isolated() {
		t.Parallel()
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(repoRoot, p)
		t.Run(filepath.Base(p), func(t *testing.T) { runPage(t, rel, docsPrelude) })
	}
}

// TestREADMEHasATour keeps the front page's tour runnable: it must exist
// as a ```sh block, or TestREADME would pass on nothing.
func TestREADMEHasATour(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := Extract(string(page))
	if len(blocks) == 0 || len(blocks[0].Lines) < 10 {
		t.Fatalf("README.md has %d runnable blocks; want the quick tour as one ```sh block", len(blocks))
	}
}

func runPage(t *testing.T, rel, prelude string) {
	page, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	blocks := Extract(string(page))
	if len(blocks) == 0 {
		t.Skip("no runnable blocks")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	bin := binary(t)
	if isolated() {
		t.Parallel()
	} else {
		for _, a := range docAddrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Skipf("%s is in use and there is no network namespace to run in: %v", a, err)
			}
			l.Close()
		}
	}
	dir := t.TempDir()
	// The files the repository ships, where the docs expect them.
	shipped, _ := filepath.Glob(filepath.Join(repoRoot, "*.yaml"))
	for _, f := range shipped {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "doctest.sh")
	if err := os.WriteFile(script, []byte(prelude+Script(blocks, !asWritten)), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if isolated() {
		cmd = exec.Command("unshare", "-rn", "bash", "-c", `ip link set lo up && exec bash "$0"`, script)
	} else {
		cmd = exec.Command("bash", script)
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, failed, err := watch(cmd, t)
	if err != nil || failed != "" {
		if err != nil {
			failed += " " + err.Error()
		}
		t.Fatalf("%s, %s\n--- its output ---\n%s", rel, failed, lastLine(out))
	}
}

// watch runs cmd, gives each documented line lineTimeout from its
// marker, and kills the process group (the background servers too) at
// the end. It returns the output, the failing line and any error.
func watch(cmd *exec.Cmd, t *testing.T) (out []string, failed string, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, "", err
	}
	w.Close()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		r.Close()
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	lineTimer := time.NewTimer(lineTimeout)
	defer lineTimer.Stop()
	pageTimer := time.NewTimer(pageTimeout)
	defer pageTimer.Stop()
	current := "the prelude"
	started := time.Now()
	slow := func() {
		if d := time.Since(started); d > 3*time.Second {
			t.Logf("%s took %v", current, d.Round(100*time.Millisecond))
		}
	}
	var waitErr error
	exited := false
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				if !exited {
					waitErr = <-done
				}
				if failed == "" && waitErr != nil {
					failed = current + ": "
				}
				return out, failed, waitErr
			}
			out = append(out, l)
			switch {
			case strings.HasPrefix(l, markLine):
				slow()
				current, started = "line "+strings.TrimPrefix(l, markLine), time.Now()
				lineTimer.Reset(lineTimeout)
			case strings.HasPrefix(l, markFail):
				failed = current + " failed (" + strings.TrimPrefix(l, markFail) + ")"
			}
		case waitErr = <-done:
			exited = true
			kill() // the background servers; the reader then sees EOF
		case <-lineTimer.C:
			failed = current + ": still running after " + lineTimeout.String()
			kill()
		case <-pageTimer.C:
			failed = "the page: still running after " + pageTimeout.String() + " at " + current
			kill()
		}
	}
}

// lastLine is the output of the last documented line to run: its first
// and last lines when it is long (an error comes first, usage after it).
func lastLine(out []string) string {
	for i := len(out) - 1; i >= 0; i-- {
		if strings.HasPrefix(out[i], markLine) {
			out = out[i:]
			break
		}
	}
	if len(out) > 30 {
		out = append(append(out[:15:15], "[...]"), out[len(out)-10:]...)
	}
	return strings.Join(out, "\n")
}

// Package llamatest starts llama.cpp's server (llama-server) for tests and
// benchmarks: the real engine, built from source by
// scripts/llamacpp-build.sh and run on the CPU with the small generated
// model of scripts/llamacpp-model.sh (seeded random weights, Llama 2's
// vocabulary, a ChatML template, f16 with Q8_0 and Q4_0 variants).
//
// Tests that need it call Start (or Require); without a built engine they
// skip, unless INFERGATE_REQUIRE_LLAMACPP is set (.ci/run sets it), when
// they fail.
package llamatest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the node-llama-cpp release whose llama.cpp source is built.
const Version = "3.21.1"

// Dir returns the directory holding bin/llama-server, bin/llama-quantize
// and models/: $INFERGATE_LLAMACPP_DIR, or the build script's default
// under the user's cache directory. It reports an error naming what is
// missing.
func Dir() (string, error) {
	dir := os.Getenv("INFERGATE_LLAMACPP_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("llamatest: %w", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "infergate-llamacpp", Version)
	}
	for _, f := range []string{"bin/llama-server", "models/infergate-tiny-f16.gguf"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("llamatest: no %s in %s (run scripts/llamacpp-model.sh): %w", f, dir, err)
		}
	}
	return dir, nil
}

// Require returns Dir, or skips tb without an engine (fails it when
// INFERGATE_REQUIRE_LLAMACPP is set).
func Require(tb testing.TB) string {
	tb.Helper()
	dir, err := Dir()
	if err != nil {
		if os.Getenv("INFERGATE_REQUIRE_LLAMACPP") != "" {
			tb.Fatalf("INFERGATE_REQUIRE_LLAMACPP is set: %v", err)
		}
		tb.Skip(err)
	}
	return dir
}

// Options choose a server's model and knobs. The zero value runs the f16
// model with one slot.
type Options struct {
	// Variant is the model's weights: "f16" (default), "q8_0" or "q4_0".
	Variant string
	// Parallel is the slot count (-np); 0 means 1.
	Parallel int
	// Context is the whole context in tokens (-c), split between the
	// slots; 0 means 2048 a slot.
	Context int
	// Predict caps every answer's tokens (-n); 0 means 1024, so a request
	// without max_tokens ends (the model never samples end-of-sequence).
	Predict int
	// Threads is the compute threads (-t); 0 means 1. ggml's threads
	// spin while they wait for each other: on a machine whose cores are
	// busy with other work (a test run, a load generator), two threads
	// decoded this model at 4 tokens/s where one did 70.
	Threads int
	// Args are further flags, appended last (a later flag wins), such as
	// "--cache-ram", "0".
	Args []string
}

// Server is a running llama-server on a loopback port.
type Server struct {
	// URL is "http://127.0.0.1:PORT", without a path.
	URL string
	// Addr is "127.0.0.1:PORT".
	Addr string
	// Parallel is its slot count.
	Parallel int
	// Model is the model file's path.
	Model string

	cmd  *exec.Cmd
	done chan struct{}
	log  *tail
	once sync.Once
}

// Start runs llama-server with o until tb ends, and returns once it
// answers /health with 200 (the model loaded). It skips tb without an
// engine (see Require).
func Start(tb testing.TB, o Options) *Server {
	tb.Helper()
	dir := Require(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Launch(ctx, dir, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("llama-server %s log (tail):\n%s", s.Addr, s.Log())
		}
	})
	return s
}

// StartN starts n servers alike.
func StartN(tb testing.TB, n int, o Options) []*Server {
	tb.Helper()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(tb, o)
	}
	return out
}

var listening = regexp.MustCompile(`listening on http://127\.0\.0\.1:(\d+)`)

// Launch runs llama-server from dir with o and waits, within ctx, until
// it is ready. The caller stops it.
func Launch(ctx context.Context, dir string, o Options) (*Server, error) {
	variant := o.Variant
	if variant == "" {
		variant = "f16"
	}
	model := filepath.Join(dir, "models", "infergate-tiny-"+variant+".gguf")
	if _, err := os.Stat(model); err != nil {
		return nil, fmt.Errorf("llamatest: model %s: %w", variant, err)
	}
	np := max(o.Parallel, 1)
	nctx := o.Context
	if nctx == 0 {
		nctx = 2048 * np
	}
	predict := o.Predict
	if predict == 0 {
		predict = 1024
	}
	threads := o.Threads
	if threads == 0 {
		threads = 1
	}
	args := []string{
		"-m", model, "--host", "127.0.0.1", "--port", "0",
		"-np", strconv.Itoa(np), "-c", strconv.Itoa(nctx), "-n", strconv.Itoa(predict),
		"-t", strconv.Itoa(threads), "--metrics", "--slots", "--no-webui", "--no-warmup",
		"--alias", "infergate-tiny",
	}
	args = append(args, o.Args...)
	cmd := exec.Command(filepath.Join(dir, "bin", "llama-server"), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("llamatest: %w", err)
	}
	cmd.Stdout = cmd.Stderr // both into the pipe
	s := &Server{Parallel: np, Model: model, cmd: cmd, done: make(chan struct{}), log: &tail{max: 64 << 10}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("llamatest: start llama-server: %w", err)
	}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.log.add(line)
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()

	select {
	case p := <-port:
		s.Addr = "127.0.0.1:" + p
		s.URL = "http://" + s.Addr
	case <-s.done:
		return nil, fmt.Errorf("llamatest: llama-server exited before listening:\n%s", s.Log())
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("llamatest: llama-server did not listen: %w\n%s", ctx.Err(), s.Log())
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitHealthy(ctx context.Context) error {
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("llamatest: llama-server exited while loading:\n%s", s.Log())
		case <-ctx.Done():
			return fmt.Errorf("llamatest: llama-server not healthy: %w\n%s", errors.Join(ctx.Err(), err), s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and waits for
// it. It is safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.cmd.Process == nil {
			return
		}
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// Log returns the last lines the server logged.
func (s *Server) Log() string { return s.log.String() }

// tail keeps the last max bytes of a log, whole lines.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
	size  int
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for t.size > t.max && len(t.lines) > 1 {
		t.size -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

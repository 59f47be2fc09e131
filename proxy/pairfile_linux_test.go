package proxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/sim/simtest"
)

// TestPairsFileSurvivesAFullDisk: the pairs file sits on a 64 KiB
// filesystem that fills up. Pairs are still recorded for /admin/pairs,
// the lines the disk refused are counted (infergate_mirror_file_lost),
// the gateway serves on, and once there is room again the file is
// reopened and recording to it resumes. The file is 0600: it holds
// prompts and answers.
func TestPairsFileSurvivesAFullDisk(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tiny tmpfs here (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })

	primary := simtest.Start(t, simtest.Fixed(time.Millisecond, time.Millisecond))
	cfg := mirrorConfig(primary.URL, primary.URL)
	cfg.Models[0].UpstreamModel = "sim-model"
	path := filepath.Join(dir, "pairs.jsonl")
	cfg.Mirror.Record.Path = path
	gw := startGateway(t, cfg)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("pairs file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	// Fill the disk.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	send := func(n int) {
		for range n {
			body := `{"model":"m","max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
			if status, _, b := post(t, gw.URL, "/v1/chat/completions", body); status != 200 {
				t.Fatalf("the gateway answered %d %s on a full disk", status, b)
			}
		}
	}
	send(10)
	pairStats(t, gw, 10) // recorded for the admin API all the same
	waitFor(t, 5*time.Second, "the lost lines counted", func() bool { return fileLost(t, gw) >= 10 })

	// Room again: the file is reopened (at most once a second) and takes
	// the next pairs.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	send(5)
	waitFor(t, 5*time.Second, "the pairs on disk again", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "\n") >= 5
	})
	if n := fileLost(t, gw); n < 10 || n > 10+2 {
		t.Errorf("infergate_mirror_file_lost %d, want the 10 the full disk refused", n)
	}
}

var fileLostLine = regexp.MustCompile(`(?m)^infergate_mirror_file_lost(?:_total)?(?:\{[^}]*\})? (\d+)`)

func fileLost(t *testing.T, gw *testGateway) int {
	resp, err := http.Get(gw.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := fileLostLine.FindSubmatch(b)
	if m == nil {
		t.Fatal(errors.New("no infergate_mirror_file_lost in /metrics"))
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

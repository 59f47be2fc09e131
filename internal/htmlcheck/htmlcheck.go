// Package htmlcheck opens a report page in headless Chromium, as a person
// would on a machine with no network, and checks that it drew: the
// screenshot holds chart lines, and the browser logged no error. Tests
// use it; it skips when no Chromium is installed, unless
// INFERGATE_REQUIRE_CHROMIUM is set (CI sets it, having installed
// Debian's chromium).
package htmlcheck

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browser finds Chromium.
func browser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromium returns the browser, or skips t (fails it when CI requires one).
func chromium(t testing.TB) string {
	t.Helper()
	bin := browser()
	if bin == "" {
		if os.Getenv("INFERGATE_REQUIRE_CHROMIUM") != "" {
			t.Fatal("no chromium, and INFERGATE_REQUIRE_CHROMIUM is set")
		}
		t.Skip("no chromium installed (Debian: apt-get install chromium)")
	}
	return bin
}

// browse opens the page at path in headless Chromium with flags added
// to those of a closed machine (no background traffic, no first-run
// work, a profile of its own) and returns what it wrote to stdout and
// stderr.
func browse(t testing.TB, path string, flags ...string) (stdout, stderr string) {
	t.Helper()
	bin := chromium(t)
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--user-data-dir=" + filepath.Join(t.TempDir(), "profile")}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+abs)...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(flags, " "), err, errs.String())
	}
	return out.String(), errs.String()
}

// DOM loads the page at path in headless Chromium, lets its scripts (if
// any could run) do their work, and returns the document as the browser
// holds it then: what a script wrote shows in it.
func DOM(t testing.TB, path string) string {
	t.Helper()
	dom, _ := browse(t, path, "--virtual-time-budget=2000", "--dump-dom")
	return dom
}

// Check renders the page at path and fails t when it did not draw lines
// of chartColour (an "#rrggbb" the charts use) or the browser logged an
// error.
func Check(t testing.TB, path, chartColour string) {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "page.png")
	_, stderr := browse(t, path, "--enable-logging=stderr", "--v=0", "--window-size=1280,4000", "--screenshot="+shot)
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("the page logged: %s", line)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := countColour(img, chartColour); n < 200 {
		t.Errorf("the screenshot has %d pixels of the charts' colour %s: the charts did not draw", n, chartColour)
	}
}

// countColour counts the pixels within a small distance of hex.
func countColour(img image.Image, hex string) int {
	var r0, g0, b0 int
	fmt.Sscanf(strings.TrimPrefix(hex, "#"), "%02x%02x%02x", &r0, &g0, &b0)
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			dr, dg, db := int(r>>8)-r0, int(g>>8)-g0, int(b>>8)-b0
			if dr*dr+dg*dg+db*db < 400 {
				n++
			}
		}
	}
	return n
}

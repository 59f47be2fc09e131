package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsageConventions holds the command line to the conventions
// docs/flags.md states: help on stdout with status 0, a mistyped flag or
// command gets one line and the nearest name with status 2 (3 for
// compare and ab, whose 2 is a verdict), and no arguments is a usage error.
func TestUsageConventions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		code       int
		stdout     string // contained in stdout
		stderr     string // contained in stderr
		stderrMax  int    // lines at most on stderr (0: any)
		stdoutNone bool
	}{
		{args: []string{"bench", "--help"}, code: 0, stdout: "Usage: infergate bench"},
		{args: []string{"help", "probe"}, code: 0, stdout: "Usage: infergate probe"},
		{args: []string{"--help"}, code: 0, stdout: "Commands:"},
		{args: []string{"config", "--help"}, code: 0, stdout: "-admin-key"},
		{args: []string{"ab", "--help"}, code: 0, stdout: "-admin-key"},
		{args: []string{"bench", "--concurency", "4"}, code: 2, stderr: "did you mean --concurrency?", stderrMax: 3, stdoutNone: true},
		{args: []string{"tune", "--sloo", "ttft=1s"}, code: 2, stderr: "did you mean --slo?", stderrMax: 3, stdoutNone: true},
		{args: []string{"size", "--tp", "x"}, code: 2, stderr: `invalid value "x" for flag -tp`, stderrMax: 2},
		{args: []string{"compare", "--forse"}, code: 3, stderr: "did you mean --force?", stderrMax: 3},
		{args: []string{"demo", "--url", "http://127.0.0.1:1", "--dir", "/nonexistent/x"}, code: 2, stderr: "--url is not the demo's", stderrMax: 1},
		{args: []string{"bnech"}, code: 2, stderr: "did you mean bench?", stderrMax: 3},
		{args: nil, code: 2, stderr: "Commands:", stdoutNone: true},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		name := strings.Join(tc.args, " ")
		if code != tc.code {
			t.Errorf("infergate %s: exit %d, want %d\nstderr: %s", name, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("infergate %s: stdout lacks %q: %q", name, tc.stdout, stdout.String())
		}
		if !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("infergate %s: stderr lacks %q: %q", name, tc.stderr, stderr.String())
		}
		if n := strings.Count(stderr.String(), "\n"); tc.stderrMax > 0 && n > tc.stderrMax {
			t.Errorf("infergate %s: %d lines on stderr, want at most %d: %q", name, n, tc.stderrMax, stderr.String())
		}
		if tc.stdoutNone && stdout.Len() > 0 {
			t.Errorf("infergate %s: wrote to stdout: %q", name, stdout.String())
		}
	}
}

// TestRenamedFlags: a retired name still works for a release, says so,
// and maps to the one name the concept now has.
func TestRenamedFlags(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	got := renameFlags("bench", []string{"--url", "x", "--gateway-admin=http://a", "-json", "--", "--json"}, &w)
	want := []string{"--url", "x", "--admin=http://a", "-json-workload", "--", "--json"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
	if !strings.Contains(w.String(), "--gateway-admin is now --admin") || !strings.Contains(w.String(), "--json is now --json-workload") {
		t.Errorf("no deprecation lines: %q", w.String())
	}
	// Every new name is one the command defines.
	for cmd, names := range renamedFlags {
		var help bytes.Buffer
		words := []string{cmd, "--help"}
		switch cmd {
		case "ab":
			words = []string{"ab", "report", "--help"}
		case "config":
			words = []string{"config", "versions", "--help"}
		}
		run(context.Background(), words, &help, &help)
		for old, now := range names {
			if !strings.Contains(help.String(), "\n  -"+now+" ") && !strings.Contains(help.String(), "\n  -"+now+"\n") {
				t.Errorf("%s: --%s is renamed to --%s, which it does not define", cmd, old, now)
			}
		}
	}
	// The one name per concept: no command defines a retired name.
	var all bytes.Buffer
	if err := writeFlagsDoc(context.Background(), &all); err != nil {
		t.Fatal(err)
	}
	for _, retired := range []string{"gateway", "gateway-admin", "gateway-admin-key", "max-tokens"} {
		if strings.Contains(all.String(), "\n  -"+retired+" ") {
			t.Errorf("a command still defines --%s", retired)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestFlagsDocCurrent holds docs/flags.md to the commands' flag
// definitions: a flag added, renamed or redescribed without regenerating
// the reference fails here.
func TestFlagsDocCurrent(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("../../docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := writeFlagsDoc(context.Background(), &got); err != nil {
		t.Fatal(err)
	}
	if got.String() == string(want) {
		return
	}
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/flags.md is stale (run go generate ./cmd/infergate): line %d\n the flags: %q\n the file:  %q", i+1, g, w)
		}
	}
}

// TestFlagsDocListsEveryCommand checks the reference has a section for
// every command the usage lists.
func TestFlagsDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	var got bytes.Buffer
	if err := writeFlagsDoc(context.Background(), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		if !strings.Contains(got.String(), "\n## infergate "+c.name) {
			t.Errorf("no section for %s", c.name)
		}
	}
	if !strings.Contains(got.String(), "-concurrency int") {
		t.Error("bench's --concurrency is not listed")
	}
}

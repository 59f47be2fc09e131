package jsonl

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWritesRotatesAndKeeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pairs.jsonl")
	w, err := Open(Config{Path: path, MaxBytes: 100, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 39)) // 40 bytes with its newline: two fit a file
	for range 7 {
		w.Write(line)
		w.Flush()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600 (the file holds what clients sent)", name, st.Mode().Perm())
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third rotated file was kept with MaxFiles 2")
	}
	if w.Written() != 7 || w.Lost() != 0 {
		t.Errorf("written %d lost %d, want 7 and 0", w.Written(), w.Lost())
	}
}

// fakeFile fails its writes once full (a full disk), like a real file
// on a full filesystem.
type fakeFile struct {
	buf   *bytes.Buffer
	space int
}

func (f *fakeFile) Write(p []byte) (int, error) {
	if len(p) > f.space {
		n := f.space
		f.buf.Write(p[:n])
		f.space = 0
		return n, errors.New("no space left on device")
	}
	f.space -= len(p)
	return f.buf.Write(p)
}
func (f *fakeFile) Close() error { return nil }
func (f *fakeFile) Stat() (os.FileInfo, error) {
	return os.Stat(os.DevNull)
}

func TestSurvivesAFullDiskAndAFailedRotation(t *testing.T) {
	var disk bytes.Buffer
	space := 100
	failOpen := false
	opens := 0
	w, err := open(Config{Path: filepath.Join(t.TempDir(), "p"), MaxBytes: 1 << 20}, func(string) (File, error) {
		opens++
		if failOpen {
			return nil, errors.New("read-only file system")
		}
		return &fakeFile{buf: &disk, space: space}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("y", 29)) // 30 bytes a line
	for range 3 {
		w.Write(line)
	}
	w.Flush() // 90 bytes: fits
	w.Write(line)
	w.Flush() // the disk fills: this line is lost and the file closed
	if w.Written() != 3 || w.Lost() != 1 {
		t.Fatalf("after a full disk: written %d lost %d, want 3 and 1", w.Written(), w.Lost())
	}
	// The file cannot be opened again for now: lines are lost, counted,
	// never waited for.
	failOpen = true
	w.lastTry = time.Time{}
	w.Write(line)
	w.Write(line)
	if w.Lost() != 3 {
		t.Fatalf("lost %d while the file cannot open, want 3", w.Lost())
	}
	// Space again: the next try (a second on) opens it and carries on.
	failOpen = false
	w.lastTry = time.Now().Add(-2 * time.Second)
	w.Write(line)
	w.Flush()
	if w.Written() != 4 || w.Lost() != 3 {
		t.Errorf("after recovery: written %d lost %d, want 4 and 3", w.Written(), w.Lost())
	}
	if opens < 3 {
		t.Errorf("opened %d times, want a reopen after the failure", opens)
	}
}

func TestFailedRotationRecovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p")
	fail := false
	w, err := open(Config{Path: path, MaxBytes: 50, MaxFiles: 1}, func(name string) (File, error) {
		if fail {
			return nil, errors.New("too many open files")
		}
		return os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("z", 29))
	w.Write(line)
	fail = true
	w.Write(line) // rotation: the new file does not open
	if w.Lost() != 1 {
		t.Fatalf("lost %d, want the line of the failed rotation", w.Lost())
	}
	fail = false
	w.lastTry = time.Time{}
	w.Write(line)
	_ = w.Close() // reports the failed rotation's error, kept

	if w.Written() != 2 {
		t.Errorf("written %d, want 2 (one before the rotation, one after it recovered)", w.Written())
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != 30 {
		t.Errorf("the new file holds %d bytes (%v), want the one line after recovery", len(b), err)
	}
}

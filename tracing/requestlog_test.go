package tracing

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func TestRequestLogWritesAndRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	l, err := OpenRequestLog(LogConfig{Path: path, MaxBytes: 1000, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 30 {
		l.Log(Entry{Time: t0.Add(time.Duration(i) * time.Second), ID: "r" + strings.Repeat("x", 10), Model: "m", Status: 200, Outcome: "ok", OutputTokens: i})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Log(Entry{}) // after Close: dropped, no panic
	if l.Dropped() != 1 || l.Written() != 30 {
		t.Errorf("written %d dropped %d, want 30 and 1", l.Written(), l.Dropped())
	}
	cur, one, two := lines(t, path), lines(t, path+".1"), lines(t, path+".2")
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third rotated file kept with max_files 2")
	}
	if len(cur) == 0 || len(one) == 0 || len(two) == 0 {
		t.Fatalf("files hold %d, %d, %d lines", len(cur), len(one), len(two))
	}
	for _, f := range []string{path, path + ".1"} {
		if st, _ := os.Stat(f); st.Size() > 1000 {
			t.Errorf("%s is %d bytes, past max_bytes 1000", f, st.Size())
		}
	}
	var e Entry
	if err := json.Unmarshal([]byte(cur[len(cur)-1]), &e); err != nil || e.OutputTokens != 29 || !e.Time.Equal(t0.Add(29*time.Second)) {
		t.Errorf("last line %q: %v", cur[len(cur)-1], err)
	}
}

func TestRequestLogSampling(t *testing.T) {
	l, err := OpenRequestLog(LogConfig{Path: filepath.Join(t.TempDir(), "r.jsonl"), SampleRate: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	for range 4000 {
		if l.Sample() {
			n++
		}
	}
	if n < 850 || n > 1150 {
		t.Errorf("%d of 4000 sampled at 0.25", n)
	}
	l.SetSampleRate(0)
	if l.Sample() {
		t.Error("sampled at rate 0")
	}
}

// The log's file is private, and a write error (here a full device)
// counts the lines lost without stopping the log.
func TestRequestLogModeAndWriteErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	l, err := OpenRequestLog(LogConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Entry{ID: "a"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("request log created %v, want 0600", m)
	}

	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	full, err := OpenRequestLog(LogConfig{Path: "/dev/full"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		full.Log(Entry{ID: fmt.Sprint(i)})
	}
	waitLost := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); full.Lost() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("lost %d lines, want %d", full.Lost(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLost(3) // flushed on the second's tick, which fails
	time.Sleep(1100 * time.Millisecond)
	full.Log(Entry{ID: "later"}) // the log reopened and tries again
	waitLost(4)
	if err := full.Close(); err == nil {
		t.Error("Close reported no write error")
	}
	if full.Written() != 0 {
		t.Errorf("%d lines counted written to a full device", full.Written())
	}
}

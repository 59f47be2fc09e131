package engine

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/llamatest"
)

// TestLlamaCppFixtures holds the recorded /metrics, /props and /slots
// the unit tests read to what the server emits: the same metric names
// and types, and the fields the parsers read.
func TestLlamaCppFixtures(t *testing.T) {
	s := llamatest.Start(t, llamatest.Options{Parallel: 2})
	get := func(path string) []byte {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
		}
		return b
	}
	typesOf := func(b []byte) []string {
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllSubmatch(b, -1) {
			out = append(out, string(m[1])+" "+string(m[2]))
		}
		sort.Strings(out)
		return out
	}
	fixture, err := os.ReadFile("testdata/llamacpp.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := typesOf(get("/metrics")), typesOf(fixture); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the server's metrics:\n%s\nthe fixture's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sl, err := ParseProps(get("/props")); err != nil || sl.Total != 2 || sl.Context <= 0 {
		t.Errorf("/props: %+v, %v; want 2 slots with a context", sl, err)
	}
	if sl, err := ParseSlots(get("/slots")); err != nil || sl.Total != 2 || sl.Busy != 0 || sl.Context <= 0 {
		t.Errorf("/slots: %+v, %v; want 2 idle slots with a context", sl, err)
	}
	// Every field of the server's answers is in the fixtures (whose slot
	// was busy, and so has its task's fields too).
	for _, path := range []string{"/props", "/slots"} {
		fix, err := os.ReadFile("testdata" + path + ".json")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := keys(t, get(path)), keys(t, fix); !subset(got, want) {
			t.Errorf("%s: the server's fields %v are not all in the fixture's %v", path, got, want)
		}
	}
}

// keys are the top-level fields of a JSON object, or of an array's first
// object.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(b, &arr); err != nil || len(arr) == 0 {
			t.Fatalf("%s: %v", b, err)
		}
		b = arr[0]
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%.200s: %v", b, err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func subset(a, b []string) bool {
	have := map[string]bool{}
	for _, k := range b {
		have[k] = true
	}
	for _, k := range a {
		if !have[k] {
			return false
		}
	}
	return true
}

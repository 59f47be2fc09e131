package engine

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// The fixtures were captured from llama-server (node-llama-cpp 3.21.1's
// source) run with -np 1 -c 2048 --metrics --slots under 8 clients.

// TestReadLlamaCppCounters reads what the current server's /metrics
// adds beyond running and waiting: the prefix cache's hits and the
// decode counters whose ratio is the batch.
func TestReadLlamaCppCounters(t *testing.T) {
	t.Parallel()
	r := Read(scrapeFile(t, "llamacpp.txt"))
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"prefix queries", r.PrefixQueries, 49},
		{"prefix hits", r.PrefixHits, 0},
		{"decodes", r.Decodes, 64},
		{"busy slot decodes", r.BusySlotDecodes, 64},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !math.IsNaN(r.Slots) {
		t.Errorf("slots %v from /metrics alone, which does not say them", r.Slots)
	}
}

func TestParseProps(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/props.json")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := ParseProps(b)
	if err != nil {
		t.Fatal(err)
	}
	if sl.Total != 1 || sl.Context != 2048 || sl.Busy != -1 {
		t.Errorf("props: %+v, want 1 slot of 2048 tokens, busy unknown", sl)
	}
	for _, tc := range []struct {
		name, body string
		noSlots    bool
	}{
		{"not json", "<html>", false},
		{"no total_slots", `{"model_alias":"x"}`, true},
		{"zero slots", `{"total_slots":0}`, false},
		{"negative", `{"total_slots":-3}`, false},
		{"huge", `{"total_slots":1000000000}`, false},
		{"fraction", `{"total_slots":1.5}`, false},
		{"a string", `{"total_slots":"4"}`, false},
	} {
		_, err := ParseProps([]byte(tc.body))
		if err == nil {
			t.Errorf("%s: %s parsed", tc.name, tc.body)
		} else if errors.Is(err, ErrNoSlots) != tc.noSlots {
			t.Errorf("%s: %v, want ErrNoSlots %v", tc.name, err, tc.noSlots)
		}
	}
}

func TestParseSlots(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/slots.json")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := ParseSlots(b)
	if err != nil {
		t.Fatal(err)
	}
	if sl.Total != 1 || sl.Busy != 1 || sl.Context != 2048 {
		t.Errorf("slots: %+v, want 1 slot of 2048 tokens, busy", sl)
	}
	for _, body := range []string{`[]`, `{}`, `[{"n_ctx":5}]`, `null`, `[1,2]`} {
		if _, err := ParseSlots([]byte(body)); err == nil {
			t.Errorf("%s parsed", body)
		}
	}
}

func TestSibling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"/metrics", "/props"},
		{"/v1/metrics", "/v1/props"},
		{"/metrics?model=tiny", "/props?model=tiny"},
		{"/stats/prometheus", "/props"},
		{"", "/props"},
	} {
		if got := Sibling(tc.in, "props"); got != tc.want {
			t.Errorf("Sibling(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParseProps and FuzzParseSlots: whatever a server answers, the
// parse returns a slot count in bounds or an error, never a panic.
func FuzzParseProps(f *testing.F) {
	if b, err := os.ReadFile("testdata/props.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"total_slots":4,"default_generation_settings":{"n_ctx":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sl, err := ParseProps(b)
		if err == nil && (sl.Total < 1 || sl.Total > maxSlots || sl.Context < 0) {
			t.Fatalf("%q → %+v", b, sl)
		}
	})
}

func FuzzParseSlots(f *testing.F) {
	if b, err := os.ReadFile("testdata/slots.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`[{"id":0,"n_ctx":-5,"is_processing":true}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sl, err := ParseSlots(b)
		if err == nil && (sl.Total < 1 || sl.Total > maxSlots || sl.Busy < 0 || sl.Busy > sl.Total || sl.Context < 0) {
			t.Fatalf("%q → %+v", b, sl)
		}
	})
}

// TestFetchSlots: /props first, /slots when /props fails or names no
// slots, the metrics path's query kept on both, and when neither
// answers, one error naming both paths.
func TestFetchSlots(t *testing.T) {
	t.Parallel()
	props, err := os.ReadFile("testdata/props.json")
	if err != nil {
		t.Fatal(err)
	}
	slots, err := os.ReadFile("testdata/slots.json")
	if err != nil {
		t.Fatal(err)
	}
	notFound := errors.New("status 404")
	for _, tc := range []struct {
		name     string
		answers  map[string][]byte // path → body; absent: notFound
		want     int               // slots; 0: an error
		wantBusy int
	}{
		{"props", map[string][]byte{"/v1/props?model=m": props, "/v1/slots?model=m": slots}, 1, -1},
		{"slots when props fails", map[string][]byte{"/v1/slots?model=m": slots}, 1, 1},
		{"slots when props names none", map[string][]byte{"/v1/props?model=m": []byte(`{}`), "/v1/slots?model=m": slots}, 1, 1},
		{"neither", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			sl, err := FetchSlots("/v1/metrics?model=m", func(path string) ([]byte, error) {
				asked = append(asked, path)
				if b, ok := tc.answers[path]; ok {
					return b, nil
				}
				return nil, notFound
			})
			if tc.want == 0 {
				if err == nil || !errors.Is(err, notFound) || !strings.Contains(err.Error(), "/v1/props?model=m: status 404; /v1/slots?model=m: status 404") {
					t.Fatalf("asked %q: %+v, %v; want an error naming both paths", asked, sl, err)
				}
				return
			}
			if err != nil || sl.Total != tc.want || sl.Busy != tc.wantBusy {
				t.Fatalf("asked %q: %+v, %v; want %d slots, busy %d", asked, sl, err, tc.want, tc.wantBusy)
			}
		})
	}
}

package mirror

import (
	"fmt"
	"testing"
)

// TestSampleIsAShareOfAnyIDs: the sample takes its share of ids that
// differ only in their last characters, and the same ids every time.
func TestSampleIsAShareOfAnyIDs(t *testing.T) {
	t.Parallel()
	m := Live(Rule{Name: "s", Sample: 0.1, MaxInFlight: 1})
	n := 0
	for i := range 10000 {
		r := Request{ID: fmt.Sprintf("req-%d", i)}
		if m.Takes(&r) {
			n++
		}
		if m.Takes(&r) != m.Takes(&r) {
			t.Fatal("a request id sampled differently twice")
		}
	}
	if n < 900 || n > 1100 {
		t.Errorf("%d of 10000 sampled at 0.1", n)
	}
}

func TestCopyLeavesThePrimaryAlone(t *testing.T) {
	t.Parallel()
	m := Live(Rule{Name: "c", MaxInFlight: 1, Overrides: Overrides{Model: "cand", Fields: map[string]any{"temperature": 0}}})
	body := []byte(`{"model":"m","messages":[]}`)
	orig := string(body)
	c := m.Copy(body)
	if string(body) != orig {
		t.Errorf("the primary's body changed: %s", body)
	}
	if want := `{"model":"cand","messages":[],"temperature":0}`; string(c) != want {
		t.Errorf("copy %s, want %s", c, want)
	}
	if !m.Acquire() || m.Acquire() {
		t.Error("a cap of one took two")
	}
	m.Release()
	if m.InFlight() != 0 {
		t.Error("release did not give the slot back")
	}
}

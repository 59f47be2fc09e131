package bench

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/infergate/infergate/verdict"
)

// A record holds each SLO's bound in nanoseconds under "max", as records
// always have: one written before verdict.SLO became the one SLO type
// reads back the same, and a new one is what an older binary reads.
func TestRecordSLOsKeepTheirForm(t *testing.T) {
	t.Parallel()
	c := Conditions{SLOs: []verdict.SLO{{Metric: "ttft", MaxMs: 500}, {Metric: "tpot", MaxMs: 0.25}}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		SLOs []map[string]any `json:"slos"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{{"metric": "ttft", "max": 5e8}, {"metric": "tpot", "max": 2.5e5}}
	if !reflect.DeepEqual(raw.SLOs, want) {
		t.Errorf("slos written as %v, want %v", raw.SLOs, want)
	}
	var back Conditions
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.SLOs, c.SLOs) {
		t.Errorf("read back %v (%v), want %v", back.SLOs, err, c.SLOs)
	}
	if b, _ := json.Marshal(Conditions{}); containsKey(b, "slos") {
		t.Errorf("no SLOs written as %s", b)
	}
}

func containsKey(b []byte, k string) bool {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	_, ok := m[k]
	return ok
}

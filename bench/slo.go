package bench

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/infergate/infergate/verdict"
)

// SLOs are the SLOs a run was judged at (verdict.SLO, the one SLO type),
// as records hold them: each bound in nanoseconds under "max", as records
// have held it from the first (verdict's own JSON is "max_ms"). A
// []verdict.SLO is assignable to it and back.
type SLOs []verdict.SLO

// recordSLO is one SLO in a record's JSON.
type recordSLO struct {
	Metric string        `json:"metric"` // ttft, ttft_sched, tpot, e2e
	Max    time.Duration `json:"max"`
}

func (s SLOs) records() []recordSLO {
	out := make([]recordSLO, len(s))
	for i, o := range s {
		out[i] = recordSLO{Metric: o.Metric, Max: time.Duration(o.MaxMs * 1e6)}
	}
	return out
}

// MarshalJSON writes the record form.
func (s SLOs) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	return json.Marshal(s.records())
}

// UnmarshalJSON reads the record form.
func (s *SLOs) UnmarshalJSON(b []byte) error {
	var rs []recordSLO
	if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	if rs == nil {
		*s = nil
		return nil
	}
	*s = make(SLOs, len(rs))
	for i, r := range rs {
		(*s)[i] = verdict.SLO{Metric: r.Metric, MaxMs: float64(r.Max) / 1e6}
	}
	return nil
}

// String writes each SLO as its metric and bound ("[{ttft 500ms}]").
func (s SLOs) String() string { return fmt.Sprint(s.records()) }

// met reports whether the row meets every SLO (verdict.Met's rule).
func (w *row) met(slos []verdict.SLO) bool {
	return verdict.Met(slos, func(m string) float64 { return float64(w.metric(m)) / 1e6 })
}

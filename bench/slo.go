package bench

import (
	"time"

	"github.com/infergate/infergate/verdict"
)

// SLO is one service-level objective on a per-request latency metric.
type SLO struct {
	Metric string        `json:"metric"` // ttft, ttft_sched, tpot, e2e
	Max    time.Duration `json:"max"`
}

// ParseSLOs reads "ttft=500ms,tpot=50ms" (verdict.ParseSLOs' syntax).
func ParseSLOs(s string) ([]SLO, error) {
	vs, err := verdict.ParseSLOs(s)
	if err != nil {
		return nil, err
	}
	out := make([]SLO, len(vs))
	for i, v := range vs {
		out[i] = SLO{Metric: v.Metric, Max: time.Duration(v.MaxMs * 1e6)}
	}
	return out, nil
}

// VerdictSLOs is slos as package verdict judges them.
func VerdictSLOs(slos []SLO) []verdict.SLO {
	out := make([]verdict.SLO, len(slos))
	for i, s := range slos {
		out[i] = verdict.SLO{Metric: s.Metric, MaxMs: float64(s.Max) / 1e6}
	}
	return out
}

// met reports whether the row meets every SLO (verdict.Met's rule).
func (w *row) met(slos []verdict.SLO) bool {
	return verdict.Met(slos, func(m string) float64 { return float64(w.metric(m)) / 1e6 })
}

package diagnose

import (
	"fmt"
	"math"
)

// notMeasured starts the detail of a signal whose figure was unknown.
const notMeasured = "not measured: "

// rule is one verdict's test: its signals (a NaN figure is not
// measurable and left out of the score) and whether the verdict holds.
type rule struct {
	name     string
	findings []Finding
	measured int
	held     int
	holds    bool
}

// check adds a signal: v is its figure (NaN: not measured, and missing
// says why instead of detail); detail is formatted with args, any
// unknown figure among them printed as "?".
func (r *rule) check(signal string, v float64, holds bool, missing, detail string, args ...any) {
	if math.IsNaN(v) {
		r.findings = append(r.findings, Finding{Signal: signal, Detail: notMeasured + missing})
		return
	}
	r.measured++
	if holds {
		r.held++
	}
	r.findings = append(r.findings, Finding{Signal: signal, Holds: holds, Detail: say(detail, args...)})
}

func (r *rule) score() float64 {
	if r.measured == 0 {
		return 0
	}
	return float64(r.held) / float64(r.measured)
}

func pct(v float64) float64 { return v * 100 }

// unknownFig prints as "?" under any verb: a figure not reported.
type unknownFig struct{}

func (unknownFig) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("?")) }

// say is fmt.Sprintf with every unknown (NaN or infinite) float printed
// as "?": no report prints NaN.
func say(format string, args ...any) string {
	for i, a := range args {
		switch v := a.(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				args[i] = unknownFig{}
			}
		case Num:
			if !v.Known() || math.IsInf(float64(v), 0) {
				args[i] = unknownFig{}
			}
		}
	}
	return fmt.Sprintf(format, args...)
}

package tune

import (
	"fmt"
	"math"
	"time"

	"github.com/infergate/infergate/bench"
	"github.com/infergate/infergate/verdict"
)

// maxFailed is the share of a measurement's requests that may fail
// (refused, shed, errors) for it to be judged at all (bench.Unjudged):
// a refused request is not an answer, so a measurement's answers are at
// least its requests × (1 − maxFailed) whenever it is judged.
const maxFailed = 0.5

// Size is how big each measurement of a walk is, and what it can settle.
type Size struct {
	// Requests is each measurement's count of requests; 0 when a closed
	// loop is bounded by time until the baseline shows its pace.
	Requests int `json:"requests,omitempty"`
	// Duration is the time bound of a closed loop (0 in open loop).
	Duration time.Duration `json:"duration,omitempty"`
	// Answers is the fewest answers a judged measurement of this size
	// has: Requests × (1 − maxFailed).
	Answers int `json:"answers"`
	// Settle is the fewest answers each run needs for a quality rate seen
	// in none of them, in both runs, to be shown to have risen by at most
	// Tolerance (verdict.SettlingSize).
	Settle    int     `json:"settle"`
	Tolerance float64 `json:"tolerance"`
	// Stated is the size the load stated, when it was too small and was
	// raised; 0 otherwise.
	Stated int `json:"stated,omitempty"`
}

// SizeLoad bounds each measurement of load l by a count of requests
// large enough that the quality tolerance tol can be settled from the
// answers it will get: the settling size of a rate at 0 in both runs,
// doubled, as up to half of the requests may be refused and the run
// still be judged. In open loop the count is the larger of that and what
// the stated rate and duration (or --requests) would send, and it
// replaces the duration, so every measurement sends exactly as many. A
// closed loop's count depends on the server's pace: its duration stays,
// and the walk lengthens it once the baseline shows the pace
// (Size.Requests is what it must reach).
func SizeLoad(l bench.LoadSpec, tol float64) (bench.LoadSpec, Size) {
	s := Size{Settle: verdict.SettlingSize(tol), Tolerance: tol}
	need := int(math.Ceil(float64(s.Settle) / (1 - maxFailed)))
	switch l.Mode {
	case "open":
		n := l.Requests
		if n == 0 {
			n = int(math.Round(l.Rate * l.Duration.Seconds()))
		}
		if n < need {
			s.Stated, n = n, need
		}
		l.Requests, l.Duration = n, 0
		s.Requests = n
	case "closed":
		if l.Requests > 0 && l.Requests < need {
			s.Stated, l.Requests = l.Requests, need
		}
		s.Requests, s.Duration = max(l.Requests, need), l.Duration
	default:
		// Replay and sessions are sized by their own workload.
		s.Requests = l.Requests
	}
	s.Answers = int(float64(s.Requests) * (1 - maxFailed))
	return l, s
}

// String states the size and the tolerance it settles.
func (s Size) String() string {
	var what string
	switch {
	case s.Duration > 0:
		what = fmt.Sprintf("each measurement runs %v at the server's pace and needs at least %d requests (if the baseline sends fewer, every measurement is lengthened and the baseline measured again)", s.Duration, s.Requests)
	case s.Requests > 0:
		what = fmt.Sprintf("each measurement sends %d requests", s.Requests)
	default:
		return fmt.Sprintf("each measurement is sized by its workload; a quality rate at 0 in both runs settles within %.3g points from %d answers a run", s.Tolerance*100, s.Settle)
	}
	if s.Stated > 0 {
		what += fmt.Sprintf(" (the load stated %d, too few)", s.Stated)
	}
	return fmt.Sprintf("%s: a run is judged only when at most %.0f%% of its requests failed or were refused, so it has at least %d answers; "+
		"%d answers a run settle a quality rate at 0 in both runs within the %.3g-point tolerance", what, maxFailed*100, s.Answers, s.Settle, s.Tolerance*100)
}

// Rule states when a step is kept, at the walk's size and tolerance.
func Rule(s Size) string {
	return fmt.Sprintf("a step is kept when the verdict at the SLOs is KEEP and goodput (open loop) or attainment (closed loop) rose beyond doubt, "+
		"on two measurements; a quality rate that rose beyond %.3g points vetoes it; a quality rate at 0 of N answers in both runs, N at least %d, "+
		"holds; a figure not settled rolls the step back, and the verdict names it with its counts", s.Tolerance*100, s.Settle)
}

// answersLine says how many answers a measurement got against the size
// that settles the tolerance.
func answersLine(r *bench.Record, s Size) string {
	st := r.Stages[0]
	switch {
	case st.OK >= s.Settle:
		return fmt.Sprintf("  %d answers (%d of %d requests failed or were refused): at least the %d that settle a quality rate at 0 in both runs within %.3g points",
			st.OK, st.Failed, st.Requests, s.Settle, s.Tolerance*100)
	default:
		return fmt.Sprintf("  %d answers (%d of %d requests failed or were refused): fewer than the %d that settle a quality rate at 0 in both runs within %.3g points",
			st.OK, st.Failed, st.Requests, s.Settle, s.Tolerance*100)
	}
}

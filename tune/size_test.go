package tune

import (
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/bench"
)

// Each measurement is sized before it runs so the quality tolerance can
// be settled from the answers it will get, refused requests left out.
func TestSizeLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		in           bench.LoadSpec
		tol          float64
		requests     int
		stated       int
		keepDuration time.Duration
	}{
		// 8 s at 24/s is 192 requests: too few for 2 × 146.
		{"open, too short", bench.LoadSpec{Mode: "open", Rate: 24, Duration: 8 * time.Second}, 0.02, 292, 192, 0},
		// 30 s at 20/s already sends more: kept, as a count.
		{"open, long enough", bench.LoadSpec{Mode: "open", Rate: 20, Duration: 30 * time.Second}, 0.02, 600, 0, 0},
		{"open, a count", bench.LoadSpec{Mode: "open", Rate: 20, Requests: 50}, 0.05, 114, 50, 0},
		// A closed loop keeps its time; the size is what it must reach.
		{"closed, by time", bench.LoadSpec{Mode: "closed", Concurrency: 8, Duration: 15 * time.Second}, 0.02, 292, 0, 15 * time.Second},
		{"closed, a count", bench.LoadSpec{Mode: "closed", Concurrency: 8, Requests: 100}, 0.02, 292, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, s := SizeLoad(tc.in, tc.tol)
			if s.Requests != tc.requests || s.Stated != tc.stated || l.Duration != tc.keepDuration {
				t.Fatalf("%+v: size %+v, load %+v", tc.in, s, l)
			}
			if tc.in.Mode == "open" && l.Requests != tc.requests {
				t.Errorf("the load sends %d requests, the size says %d", l.Requests, s.Requests)
			}
			if s.Answers*2 != s.Requests && s.Answers*2 != s.Requests-1 || s.Answers < s.Settle {
				t.Errorf("%+v: a judged run's answers are half its requests, at least the settling size", s)
			}
			text := s.String()
			if !strings.Contains(text, "tolerance") || (tc.stated > 0) != strings.Contains(text, "too few") {
				t.Errorf("%q", text)
			}
		})
	}
}

package verdict

import (
	"strings"
	"testing"
)

// TestCacheTally: answers that did not report are left out, a cached
// count above the prompt counts as the prompt, and nothing reported is
// no share at all (nil), never 0%.
func TestCacheTally(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answers [][2]int // prompt, cached (-1: not reported)
		want    float64  // -1: nil
		n       int
	}{
		{"none reported", [][2]int{{100, -1}, {50, -1}}, -1, 0},
		{"nothing counted", nil, -1, 0},
		{"token-weighted", [][2]int{{100, 50}, {300, 0}}, 50.0 / 400, 2},
		{"silent answers left out", [][2]int{{100, 80}, {900, -1}}, 0.8, 1},
		{"more cached than the prompt is the prompt", [][2]int{{100, 150}, {100, 0}}, 0.5, 2},
		{"no prompt count", [][2]int{{0, 10}, {100, 10}}, 0.1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c CacheTally
			for _, a := range tc.answers {
				c.Add(a[0], a[1])
			}
			got := c.Share()
			if (got == nil) != (tc.want < 0) || got != nil && *got != tc.want || c.Answers() != tc.n {
				t.Errorf("%v: share %v over %d answers, want %v over %d", tc.answers, ShareText(got), c.Answers(), tc.want, tc.n)
			}
		})
	}
}

func TestCacheRefusal(t *testing.T) {
	t.Parallel()
	p := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name       string
		a, b       *float64
		refused    bool
		unknown    bool
		wantInText string
	}{
		{"alike", p(0.02), p(0.05), false, false, ""},
		{"within the tolerance", p(0.10), p(0.19), false, false, ""},
		{"apart", p(0.95), p(0.03), true, false, "primary 95.0% (warm), candidate 3.0%: one side's server held more"},
		{"one silent", p(0.95), nil, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, unknown := CacheRefusal(Cached{Name: "primary", Note: "warm", Share: tc.a}, Cached{Name: "candidate", Share: tc.b}, DefaultCacheTolerance)
			if (reason != "") != tc.refused || unknown != tc.unknown || !strings.Contains(reason, tc.wantInText) {
				t.Errorf("%s against %s: reason %q, unknown %v", ShareText(tc.a), ShareText(tc.b), reason, unknown)
			}
		})
	}
}

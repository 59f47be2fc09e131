package bench

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 0 ", 0},
		{"-3", 0},
		{"1.5", 0},
		{"86400", MaxRetryAfter},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"soon", 0},
	} {
		if got := retryAfter([]byte(c.in), now); got != c.want {
			t.Errorf("Retry-After %q: %v, want %v", c.in, got, c.want)
		}
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "1", "4294967296", "Sun, 06 Dec 2026 12:00:05 GMT", "\x00"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		if d := retryAfter([]byte(s), now); d < 0 || d > MaxRetryAfter {
			t.Fatalf("Retry-After %q: %v, outside [0, %v]", s, d, MaxRetryAfter)
		}
	})
}

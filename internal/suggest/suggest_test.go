package suggest

import "testing"

func TestNearest(t *testing.T) {
	names := []string{"concurrency", "rate", "duration", "output-tokens", "out", "slo"}
	for in, want := range map[string]string{
		"concurency":   "concurrency",
		"concurrnecy":  "concurrency",
		"durration":    "duration",
		"output-token": "output-tokens",
		"rat":          "rate",
		"xyz":          "",
		"banana":       "",
	} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}

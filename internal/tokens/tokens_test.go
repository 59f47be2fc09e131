package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestWordsMakeExactLengths(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	words := tok.Words()
	if len(words) < 1000 {
		t.Fatalf("%d one-token words, want at least 1000", len(words))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 128, 1000, 4000} {
		var sb strings.Builder
		for range n {
			sb.WriteString(words[rng.IntN(len(words))])
		}
		if got := tok.Count(sb.String()); got != n {
			t.Errorf("%d random words counted as %d tokens", n, got)
		}
	}
}

func TestCount(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    string
		want int
	}{{"", 0}, {"hello world", 2}, {" the", 1}} {
		if got := tok.Count(tc.s); got != tc.want {
			t.Errorf("Count(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

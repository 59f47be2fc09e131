package tokens

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func benchProse(tok *Tokenizer, n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := tok.Words()
	var sb strings.Builder
	for range n {
		w := vocab[rng.IntN(len(vocab))]
		switch rng.IntN(12) {
		case 0:
			w = " " + strings.ToUpper(w[1:2]) + w[2:]
		case 1:
			w += ","
		case 2:
			w += "."
		case 3:
			w = fmt.Sprintf(" %d", rng.IntN(5000))
		}
		sb.WriteString(w)
	}
	return sb.String()
}

// BenchmarkCount counts 10k words of English-like prose: with the word
// cache holding them (cached), from an empty cache (cold), and by the
// pieces alone (uncached), against the library.
func BenchmarkCount(b *testing.B) {
	tok, err := New()
	if err != nil {
		b.Fatal(err)
	}
	s := benchProse(tok, 10000)
	n := tok.libraryCount(s)
	for _, tc := range []struct {
		name string
		f    func() int
	}{
		{"cached", func() int { return tok.Count(s) }},
		{"cold", func() int { b.StopTimer(); tok.ResetCache(); b.StartTimer(); return tok.Count(s) }},
		{"uncached", func() int { return tok.countUncached(s) }},
		{"library", func() int { return tok.libraryCount(s) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				if got := tc.f(); got != n {
					b.Fatalf("%d tokens, want %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}

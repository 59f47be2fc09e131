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

// chunkTexts are texts that stress the cut rule: runs of spaces, newlines,
// contractions, digits beside letters, punctuation, non-Latin scripts,
// marks and mixed case (o200k_base splits on case).
var chunkTexts = []string{
	"The quick brown fox jumps over the lazy dog.",
	"it's   they're  I'LL we've 'd x'S",
	"a  b   c\n\nd \n e\t\tf \r\n g",
	"12345 678 9a 1,000,000 3.14159 2026-12-03T08:00Z",
	"HelloWorld camelCase HTTPServer XMLHttpRequest iPhone",
	"日本語のテキスト と 中文 混合 text 한국어 문장",
	"Ünïcödé naïve café résumé e\u0301 a\u0308b",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n",
	"    indented code   \n    more  ",
	"emoji 🙂 🚀🚀 done ",
	"x /path/to/file.go:12 a/b c//d",
	" leading space and trailing space ",
	"<|endoftext|> special tokens count as text <|im_start|>",
}

func TestChunkedCountIsExact(t *testing.T) {
	for _, enc := range []string{CL100K, O200K} {
		tok, err := Load(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range chunkTexts {
			for range 2 { // the second time from the cache
				if got, want := tok.Count(s), tok.countUncached(s); got != want {
					t.Errorf("%s: Count(%q) = %d, the library counts %d", enc, s, got, want)
				}
			}
		}
	}
}

func FuzzChunkedCount(f *testing.F) {
	for _, s := range chunkTexts {
		f.Add(s)
	}
	cl, err := Load(CL100K)
	if err != nil {
		f.Fatal(err)
	}
	o2, err := Load(O200K)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 2048 {
			return
		}
		for _, tok := range []*Tokenizer{cl, o2} {
			if got, want := tok.Count(s), tok.countUncached(s); got != want {
				t.Fatalf("%s: Count(%q) = %d, the library counts %d", tok.Name(), s, got, want)
			}
		}
	})
}

func TestLoadRefusesUnknownEncoding(t *testing.T) {
	if _, err := Load("p99k_base"); err == nil || !strings.Contains(err.Error(), "p99k_base") {
		t.Fatalf("Load(p99k_base) = %v, want an error naming it", err)
	}
}

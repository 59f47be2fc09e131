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
				if got, want := tok.Count(s), tok.libraryCount(s); got != want {
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
			if got, want := tok.Count(s), tok.libraryCount(s); got != want {
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

// TestSplitMatchesLibrary holds the written-out pre-tokenizers to the
// library's regular expressions: the same pieces, not only the same count.
func TestSplitMatchesLibrary(t *testing.T) {
	for _, enc := range []string{CL100K, O200K} {
		tok, err := Load(enc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range chunkTexts {
			var ours []string
			for i := 0; i < len(s); {
				e := tok.piece(s, i)
				ours = append(ours, s[i:e])
				i = e
			}
			var lib []string
			for _, id := range tok.enc.EncodeOrdinary(s) {
				lib = append(lib, tok.enc.Decode([]int{id}))
			}
			// Pieces hold one or more tokens: compare the joined text at
			// piece boundaries by counting.
			n := 0
			for _, p := range ours {
				n += tok.bpe.count(p)
			}
			if n != len(lib) || strings.Join(ours, "") != s {
				t.Errorf("%s: %q: pieces %q count %d, library %d tokens %q", enc, s, ours, n, len(lib), lib)
			}
		}
	}
}

func TestLongPieces(t *testing.T) {
	tok, err := Load(CL100K)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{strings.Repeat("-", 3000), strings.Repeat("ab", 2000), strings.Repeat("日本", 800), strings.Repeat(" ", 5000) + "x"} {
		if got, want := tok.Count(s), tok.libraryCount(s); got != want {
			t.Errorf("%.20q×%d: %d, library %d", s, len(s), got, want)
		}
	}
}

// TestRandomScripts draws strings from runes of every class the patterns
// tell apart (cased and uncased letters, titlecase, modifier letters,
// marks, the three kinds of numbers, Unicode spaces, newlines,
// apostrophes, slashes, punctuation) and holds the count to the library's.
func TestRandomScripts(t *testing.T) {
	alphabet := []rune("aZ'sStTrReEvVmMlLdD \t\n\r\v\f/.,!?-_\"(0123456789" +
		"\u00e9\u0301\u0308\u01c5\u02b0\u05d0\u4e2d\u3042\u0660\u2163\u00bd\u00a0\u2003\u3000\u2028\u0085" +
		"\u0391\u03b1\u0416\u0436\u1e9e\u00df\U0001F600\u200b\u00ad")
	rng := rand.New(rand.NewPCG(7, 11))
	for _, enc := range []string{CL100K, O200K} {
		tok, err := Load(enc)
		if err != nil {
			t.Fatal(err)
		}
		for range 3000 {
			rs := make([]rune, 1+rng.IntN(24))
			for i := range rs {
				rs[i] = alphabet[rng.IntN(len(alphabet))]
			}
			s := string(rs)
			if got, want := tok.countUncached(s), tok.libraryCount(s); got != want {
				t.Fatalf("%s: %q (%+q): %d, library %d", enc, s, s, got, want)
			}
		}
	}
}

func TestBlocksCountsAsCountAndCutsEverySize(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	words := tok.Words()
	var sb strings.Builder
	for i := range 100 {
		sb.WriteString(words[i%len(words)])
	}
	s := sb.String() // 100 one-token words
	var ends []int
	n := tok.Blocks(s, 4, 16, func(end int) { ends = append(ends, end) })
	if n != 100 || n != tok.Count(s) {
		t.Fatalf("Blocks counted %d, Count %d, want 100", n, tok.Count(s))
	}
	// 4 tokens before the text: blocks end after words 12, 28, 44, 60, 76, 92.
	if len(ends) != 6 {
		t.Fatalf("ends %v, want 6 blocks", ends)
	}
	for i, e := range ends {
		if got := tok.Count(s[:e]); got != 12+16*i {
			t.Errorf("block %d ends after %d tokens of text, want %d", i, got, 12+16*i)
		}
	}
}

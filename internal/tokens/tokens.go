// Package tokens counts and builds text in tokens of a real BPE vocabulary
// (cl100k_base, shipped inside tiktoken-go-loader, so nothing is
// downloaded at run time). The simulator counts prompts with it and the
// load generator builds prompts of an exact length with it.
package tokens

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Tokenizer is cl100k_base. It is safe for concurrent use.
type Tokenizer struct {
	enc *tiktoken.Tiktoken

	wordsOnce sync.Once
	words     []string
}

// New loads cl100k_base (about 150 ms).
func New() (*Tokenizer, error) {
	// SetBpeLoader is the library's own process-wide setting.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("cl100k_base")
	if err != nil {
		return nil, fmt.Errorf("tokens: cl100k_base: %w", err)
	}
	return &Tokenizer{enc: enc}, nil
}

// Count returns the number of tokens of s.
func (t *Tokenizer) Count(s string) int {
	if s == "" {
		return 0
	}
	return len(t.enc.EncodeOrdinary(s))
}

// Words returns lower-case words, each with a leading space, that are one
// token each whatever precedes them: the pre-tokenizer of cl100k_base
// splits " word" off as a unit, and the word is one entry of the
// vocabulary. So n of them, concatenated, are exactly n tokens, which is
// how the load generator makes a prompt of an exact length. The list is
// built once, in vocabulary order, and is the same on every machine.
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

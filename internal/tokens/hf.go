package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Hugging Face tokenizer.json files of byte-level BPE models: Llama 3,
// Qwen 2 and later, GPT-2 and the models that kept its pre-tokenizer.
// No well-kept Go library for tokenizer.json is served here, so the file
// is read for what these models need (the vocabulary, the merges, the
// pre-tokenizer's pattern) and counted with the same split and merge as
// the tiktoken encodings. A file of another kind (SentencePiece models
// with a normalizer, WordPiece, a pattern not listed) is refused with the
// reason; the backend's /tokenize counts those.

// The pre-tokenizer patterns understood, as tokenizer.json writes them.
var hfPatterns = map[string]func(s string, i int) int{
	// Llama 3 (and cl100k_base).
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: pieceCL100K,
	// Qwen 2, 2.5 and 3: digits one by one.
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: pieceQwen2,
	// o200k_base's.
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`: pieceO200K,
}

// maxTokenizerFile bounds the file read (Llama 3's is 9 MB, Qwen's 11 MB).
const maxTokenizerFile = 64 << 20

type hfFile struct {
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer *hfPre          `json:"pre_tokenizer"`
	Model        struct {
		Type         string          `json:"type"`
		Merges       json.RawMessage `json:"merges"`
		IgnoreMerges bool            `json:"ignore_merges"`
		ByteFallback bool            `json:"byte_fallback"`
	} `json:"model"`
}

type hfPre struct {
	Type          string   `json:"type"`
	Pretokenizers []*hfPre `json:"pretokenizers"`
	Pattern       struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior     string `json:"behavior"`
	Invert       bool   `json:"invert"`
	UseRegex     *bool  `json:"use_regex"`
	AddPrefix    bool   `json:"add_prefix_space"`
	IndividualDg bool   `json:"individual_digits"`
}

// LoadHF reads a tokenizer.json. Its name is "hf:" and the path.
func LoadHF(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenizerFile+1))
	if err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", path, err)
	}
	if len(b) > maxTokenizerFile {
		return nil, fmt.Errorf("tokens: %s: larger than %d MiB", path, maxTokenizerFile>>20)
	}
	t, err := parseHF(b)
	if err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", path, err)
	}
	t.name = "hf:" + path
	return t, nil
}

func parseHF(b []byte) (*Tokenizer, error) {
	var h hfFile
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if h.Model.Type != "BPE" {
		return nil, fmt.Errorf("model type %q: only byte-level BPE models are read (Llama 3, Qwen 2+, GPT-2); count this model with tokenizer: backend", h.Model.Type)
	}
	if n := strings.TrimSpace(string(h.Normalizer)); n != "" && n != "null" {
		return nil, errors.New("a normalizer (a SentencePiece model): only byte-level BPE models are read; count this model with tokenizer: backend")
	}
	piece, err := hfSplitter(h.PreTokenizer)
	if err != nil {
		return nil, err
	}
	dec := byteDecoder()
	decode := func(tok string) (string, bool) {
		out := make([]byte, 0, len(tok))
		for _, r := range tok {
			c, ok := dec[r]
			if !ok {
				return "", false
			}
			out = append(out, c)
		}
		return string(out), true
	}
	// The merges give the ranks: a token made by the n-th merge has rank
	// n, so the byte-pair merge joins what the model's trainer joined first.
	var pairs [][2]string
	var flat []string
	if err := json.Unmarshal(h.Model.Merges, &flat); err == nil {
		for i, m := range flat {
			a, c, ok := strings.Cut(m, " ")
			if !ok {
				return nil, fmt.Errorf("merges[%d]: %q is not two tokens", i, m)
			}
			pairs = append(pairs, [2]string{a, c})
		}
	} else if err := json.Unmarshal(h.Model.Merges, &pairs); err != nil {
		return nil, fmt.Errorf("merges: neither \"a b\" strings nor pairs: %w", err)
	}
	ranks := make(map[string]int, len(pairs)+256)
	for i, p := range pairs {
		a, ok1 := decode(p[0])
		c, ok2 := decode(p[1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("merges[%d]: not byte-level tokens", i)
		}
		if _, seen := ranks[a+c]; !seen {
			ranks[a+c] = i
		}
	}
	if len(ranks) == 0 {
		return nil, errors.New("no merges")
	}
	t := &Tokenizer{bpe: bpe{ranks: ranks, noShortcut: !h.Model.IgnoreMerges}, piece: piece, cache: newChunkCache()}
	return t, nil
}

// hfSplitter finds the pre-tokenizer: a Split on a known pattern followed
// by ByteLevel without its own regex, or a ByteLevel with GPT-2's.
func hfSplitter(p *hfPre) (func(string, int) int, error) {
	if p == nil {
		return nil, errors.New("no pre_tokenizer: only byte-level BPE models are read")
	}
	steps := []*hfPre{p}
	if p.Type == "Sequence" {
		steps = p.Pretokenizers
	}
	var split func(string, int) int
	byteLevel := false
	for _, s := range steps {
		switch s.Type {
		case "Split":
			if split != nil || s.Pattern.Regex == nil || s.Invert || !strings.EqualFold(s.Behavior, "isolated") {
				return nil, errors.New("pre_tokenizer: a Split this reader does not know; count this model with tokenizer: backend")
			}
			f, ok := hfPatterns[*s.Pattern.Regex]
			if !ok {
				return nil, fmt.Errorf("pre_tokenizer: the pattern %.60q… is not one this reader knows (Llama 3's, Qwen 2's, o200k's, GPT-2's); count this model with tokenizer: backend", *s.Pattern.Regex)
			}
			split = f
		case "ByteLevel":
			if s.AddPrefix {
				return nil, errors.New("pre_tokenizer: ByteLevel with add_prefix_space is not read; count this model with tokenizer: backend")
			}
			if s.UseRegex == nil || *s.UseRegex {
				if split != nil {
					return nil, errors.New("pre_tokenizer: two patterns")
				}
				split = pieceGPT2
			}
			byteLevel = true
		default:
			return nil, fmt.Errorf("pre_tokenizer: %s is not read; count this model with tokenizer: backend", s.Type)
		}
	}
	if !byteLevel || split == nil {
		return nil, errors.New("pre_tokenizer: not a byte-level BPE; count this model with tokenizer: backend")
	}
	return split, nil
}

// byteDecoder inverts GPT-2's bytes_to_unicode: the printable bytes stand
// for themselves, the others for the code points from 256 on, in order.
func byteDecoder() map[rune]byte {
	m := make(map[rune]byte, 256)
	n := 0
	for c := 0; c < 256; c++ {
		if '!' <= c && c <= '~' || 0xA1 <= c && c <= 0xAC || 0xAE <= c && c <= 0xFF {
			m[rune(c)] = byte(c)
			continue
		}
		m[rune(256+n)] = byte(c)
		n++
	}
	return m
}

// pieceQwen2 is Llama 3's pattern with digits one at a time.
func pieceQwen2(s string, i int) int {
	if r, n := at(s, i); isN(r) && contraction(s, i) < 0 {
		return i + n
	}
	return pieceCL100K(s, i)
}

// pieceGPT2 is GPT-2's pattern:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (case-sensitive contractions).
func pieceGPT2(s string, i int) int {
	if i+1 < len(s) && s[i] == '\'' {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	j := i
	if s[i] == ' ' {
		j = i + 1
	}
	r, _ := at(s, j)
	switch {
	case isL(r):
		return run(s, j, isL)
	case isN(r):
		return run(s, j, isN)
	case isPunct(r):
		return run(s, j, isPunct)
	}
	return spaceRun(s, i, run(s, i, isS))
}

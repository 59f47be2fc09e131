package policy

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/tokens"
)

// Counter counts the tokens of a text.
type Counter interface{ Count(s string) int }

// The tokenizers a model may name.
const (
	TokenizerCL100K   = tokens.CL100K
	TokenizerO200K    = tokens.O200K
	TokenizerBackend  = "backend"
	TokenizerEstimate = "estimate"
)

// TokenizerFile prefixes the path of a Hugging Face tokenizer.json.
const TokenizerFile = "hf:"

func validTokenizer(field, name string) error {
	switch name {
	case "", TokenizerCL100K, TokenizerO200K, TokenizerBackend, TokenizerEstimate:
		return nil
	}
	if p, ok := strings.CutPrefix(name, TokenizerFile); ok && p != "" {
		return nil
	}
	return fmt.Errorf("%s: %q is not cl100k_base, o200k_base, hf:PATH (a tokenizer.json), backend or estimate", field, name)
}

// Estimate counts without a vocabulary: a token per 4 bytes of ASCII
// (cl100k_base's average on English prose and code) and one per other
// character (CJK scripts run at about one token a character; accented
// Latin letters cost more than their bytes / 4). It is the count of last
// resort: a model that names no tokenizer is counted this way, and the
// request log says so (input_tokens_estimated).
type Estimate struct{}

// Count implements Counter.
func (Estimate) Count(s string) int {
	ascii, other := 0, 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
		other++
	}
	return (ascii+3)/4 + other
}

// template is a chat template's framing, in tokens: what each message
// costs beyond its role's and content's tokens, what a name adds, and what
// priming the reply costs.
type template struct {
	perMessage, perName, reply int
}

// The templates a model may name. OpenAI documents its own (the cookbook's
// num_tokens_from_messages: 3, 1 and 3); the others follow the special
// tokens of their templates:
//
//	chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n, reply <|im_start|>assistant\n
//	llama3: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>,
//	        <|begin_of_text|> once and the assistant header to reply
var templates = map[string]template{
	"openai": {perMessage: 3, perName: 1, reply: 3},
	"chatml": {perMessage: 4, perName: 0, reply: 3},
	"llama3": {perMessage: 4, perName: 0, reply: 5},
	"none":   {},
}

func validTemplate(field, name string) error {
	if _, ok := templates[name]; ok || name == "" {
		return nil
	}
	return fmt.Errorf("%s: %q is not openai, chatml, llama3 or none", field, name)
}

// counter counts a model's messages: its tokenizer and its template.
type counter struct {
	tok       Counter
	tpl       template
	name      string // the tokenizer's name, for the log
	estimated bool   // the count is an estimate
	backend   bool   // the backend's /tokenize gives the exact total
	// cache remembers messages' counts (cache.go); nil when not counting.
	cache *countCache
}

// noCount counts nothing: parsing a message whose counts are cached.
type noCount struct{}

func (noCount) Count(string) int { return 0 }

// structureOnly is c without counting or caching.
func (c *counter) structureOnly() *counter {
	return &counter{tok: noCount{}, tpl: template{}, name: c.name}
}

func (c *counter) text(s string) int {
	if s == "" {
		return 0
	}
	return c.tok.Count(s)
}

// json counts a JSON value (tool-call functions, tool definitions) as
// its text: an estimate of how a template renders it.
func (c *counter) json(v []byte) int { return c.text(string(v)) }

// tokenizers loads each named tokenizer once; a reload passes the last
// policy's so nothing is loaded twice. A tokenizer.json is looked at
// again at every reload: read again when it changed, and the reload
// refused when it is gone.
type tokenizers map[string]loaded

type loaded struct {
	c Counter
	// the file's size and time when read, for hf: tokenizers
	size int64
	mod  time.Time
}

func (t tokenizers) get(name string) (Counter, error) {
	path, file := strings.CutPrefix(name, TokenizerFile)
	var st os.FileInfo
	if file {
		var err error
		if st, err = os.Stat(path); err != nil {
			return nil, err
		}
	}
	if l, ok := t[name]; ok && (!file || l.size == st.Size() && l.mod.Equal(st.ModTime())) {
		return l.c, nil
	}
	var l loaded
	switch {
	case name == TokenizerEstimate || name == TokenizerBackend:
		l.c = Estimate{}
	case file:
		tok, err := tokens.LoadHF(path)
		if err != nil {
			return nil, err
		}
		l = loaded{c: tok, size: st.Size(), mod: st.ModTime()}
	default:
		tok, err := tokens.Load(name)
		if err != nil {
			return nil, err
		}
		l.c = tok
	}
	t[name] = l
	return l.c, nil
}

package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example of OpenAI's cookbook "How to count tokens with tiktoken"
// (num_tokens_from_messages), whose published counts the API itself
// reported: 129 prompt tokens for gpt-3.5-turbo and gpt-4 (cl100k_base),
// 124 for gpt-4o and gpt-4o-mini (o200k_base).
var cookbookMessages = []msg{
	{"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
	{"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
	{"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
	{"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
	{"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
	{"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
}

func TestCountsMatchOpenAIReference(t *testing.T) {
	p := mustCompile(t, Config{Models: map[string]Model{
		"gpt-4":  {Tokenizer: TokenizerCL100K},
		"gpt-4o": {Tokenizer: TokenizerO200K},
	}})
	for model, want := range map[string]int{"gpt-4": 129, "gpt-4o": 124} {
		body := chatBody(t, model, cookbookMessages, nil)
		env := scan(t, body)
		d, err := p.Apply(Request{Model: model, Body: body, Env: env, Chat: true, Count: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.InputTokens != want || d.Estimated {
			t.Errorf("%s: %d tokens (estimated %v), OpenAI counts %d", model, d.InputTokens, d.Estimated, want)
		}
		if d.Body != nil {
			t.Errorf("%s: counting changed the body", model)
		}
	}
}

func TestEstimateIsDocumented(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abcd": 1, "abcde": 2, "日本語": 3, "café": 2} {
		if got := (Estimate{}).Count(s); got != want {
			t.Errorf("Estimate(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestTokenizerFile: a model counted by a tokenizer.json; a reload whose
// file is gone is refused, naming the model and the file.
func TestTokenizerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	// A byte-level BPE of four merges with GPT-2's pattern: "hello" is
	// one token, " hello" two (Ġ and hello).
	tj := `{"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
		"model":{"type":"BPE","ignore_merges":false,"merges":["h e","l l","he ll","hell o"]}}`
	if err := os.WriteFile(path, []byte(tj), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Template: "none", Models: map[string]Model{"tiny": {Tokenizer: "hf:" + path}}}
	p := mustCompile(t, c)
	body := chatBody(t, "tiny", []msg{{"role": "hello", "content": "hello hello"}}, nil)
	d, err := p.Apply(Request{Model: "tiny", Body: body, Env: scan(t, body), Chat: true, Count: true})
	if err != nil || d.InputTokens != 4 || d.Estimated || d.Tokenizer != "hf:"+path {
		t.Fatalf("%+v %v: want 1 (role) + 3 (content) tokens", d, err)
	}
	os.Remove(path)
	_, err = Compile(c, p)
	if err == nil || !strings.Contains(err.Error(), "policy.models.tiny.tokenizer") || !strings.Contains(err.Error(), path) {
		t.Fatalf("a reload without the file: %v", err)
	}
}

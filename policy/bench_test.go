package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
)

// body4K is a 4 KiB chat request.
func body4K(b *testing.B) ([]byte, openai.Envelope) {
	msgs := []msg{{"role": "system", "content": "You are a helpful assistant."}}
	for i := 0; ; i++ {
		body := chatBody(b, "m", msgs, map[string]any{"max_tokens": 256, "temperature": 0.7})
		if len(body) >= 4096 {
			return body, scan(b, body)
		}
		msgs = append(msgs, msg{"role": "user", "content": words(20, i)})
	}
}

// BenchmarkPassThrough is the decision for a request no policy changes,
// with auth on: the key looked up, the tenant's and model's limits
// found, the output under its ceiling and the prompt under its limit by
// its bytes alone.
func BenchmarkPassThrough(b *testing.B) {
	tenants := map[string]Tenant{}
	for i := range 100 {
		tenants[fmt.Sprintf("t%d", i)] = Tenant{APIKeys: []string{fmt.Sprintf("sk-tenant-key-%04d-abcdefghijklmnop", i)}}
	}
	body, env := body4K(b)
	auth := []byte("Bearer sk-tenant-key-0042-abcdefghijklmnop")
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"auth", Config{Auth: Auth{Required: true}, Tenants: tenants}},
		{"auth+limits", Config{Auth: Auth{Required: true}, Tenants: tenants, Tokenizer: TokenizerCL100K,
			Limits: Limits{MaxInputTokens: 8192, Trim: DropOldest, MaxOutputTokens: 1024}}},
	} {
		p := mustCompile(b, tc.c)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				id, err := p.Identify(auth)
				if err != nil {
					b.Fatal(err)
				}
				if p.Needs(id.Tenant, env.Model, env.Stream) {
					d, err := p.Apply(Request{Tenant: id.Tenant, Model: env.Model, Body: body, Env: env, Chat: true})
					if err != nil || d.Body != nil {
						b.Fatalf("%v %s", err, d.Body)
					}
				}
			}
		})
	}
}

// prose is n words of English-like text: words drawn from 4096 common
// ones, with capitals, numbers and punctuation, as chat text has.
func prose(b *testing.B, n int, rng *rand.Rand) string {
	if vocab == nil {
		tok, err := tokens.New()
		if err != nil {
			b.Fatal(err)
		}
		vocab = tok.Words()
	}
	var sb strings.Builder
	for i := range n {
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
		if i == 0 {
			w = w[1:]
		}
		sb.WriteString(w)
	}
	return sb.String()
}

var vocab []string // 4096 words of one token

// proseChat is a system prompt and turns user/assistant pairs of about
// per tokens each.
func proseChat(b *testing.B, turns, per int, rng *rand.Rand) []msg {
	msgs := []msg{{"role": "system", "content": "You are a careful assistant. " + prose(b, 40, rng)}}
	for range turns {
		msgs = append(msgs, msg{"role": "user", "content": prose(b, per, rng)}, msg{"role": "assistant", "content": prose(b, per, rng)})
	}
	return msgs
}

// BenchmarkTrim trims a 100-turn, 38k-token conversation to 8k tokens
// (drop_oldest), and a conversation with a 30k-token document in it
// (truncate_middle). repeat: the conversation was counted before, as a
// chat's history is at its every turn (its messages are in the policy's
// message cache); words: the messages are new but their words are in the
// tokenizer's word cache; cold: both caches are empty, every word is
// split and merged.
func BenchmarkTrim(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	chat := proseChat(b, 100, 140, rng)
	doc := append(proseChat(b, 3, 100, rng), msg{"role": "user", "content": "Summarise: " + prose(b, 30000, rng)})
	for _, s := range []Strategy{DropOldest, TruncateMiddle} {
		in := chat
		if s == TruncateMiddle {
			in = doc
		}
		body := chatBody(b, "m", in, nil)
		env := scan(b, body)
		for _, state := range []string{"repeat", "words", "cold"} {
			p := mustCompile(b, Config{Tokenizer: TokenizerCL100K, Limits: Limits{MaxInputTokens: 8192, Trim: s}})
			tok := p.def.count.tok.(*tokens.Tokenizer)
			b.Run(string(s)+"/"+state, func(b *testing.B) {
				total := 0
				b.ReportAllocs()
				for b.Loop() {
					if state != "repeat" {
						b.StopTimer()
						p.def.count.cache = newCountCache()
						if state == "cold" {
							tok.ResetCache()
						}
						b.StartTimer()
					}
					d, err := p.Apply(Request{Model: "m", Body: body, Env: env, Chat: true})
					if err != nil || d.InputTokens > 8192 || d.TrimmedTokens == 0 {
						b.Fatalf("%+v %v", d, err)
					}
					total = d.InputTokens + d.TrimmedTokens
				}
				b.ReportMetric(float64(total), "tokens-in")
			})
		}
	}
}

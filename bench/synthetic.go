package bench

import (
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/infergate/infergate/quality"
)

// synthetic makes prompts of an exact length from one-token words.
type synthetic struct {
	spec    *WorkloadSpec
	in, out lengths
	words   []string
	model   []byte // spec.Model, quoted
	// tools is the tools member every request carries (`,"tools":[...]`),
	// nil without --tools.
	tools []byte
}

// newSynthetic makes the synthetic workload of s, its tools drawn once.
func newSynthetic(s *WorkloadSpec, in, out lengths, words []string, model []byte) *synthetic {
	w := &synthetic{spec: s, in: in, out: out, words: words, model: model}
	w.tools = w.toolsMember()
	return w
}

func (w *synthetic) Len() int { return 0 }

func (w *synthetic) Request(i int) Request {
	rng := rand.New(rand.NewPCG(w.spec.Seed, uint64(i)))
	r := Request{InputTokens: w.in.Sample(rng), MaxTokens: w.out.Sample(rng), At: -1, Ask: quality.Ask{JSON: w.spec.JSON}}
	if g := w.spec.PrefixGroups; g > 0 {
		question := w.prompt(rng, r.InputTokens)
		r.Body = w.appendTools(w.spec.appendGroupBody(nil, w.model, w.groupPrefix(i%g), question, r.MaxTokens))
		r.InputTokens += w.spec.PrefixTokens
		return r
	}
	r.Body = w.appendTools(w.spec.appendBody(nil, w.model, w.prompt(rng, r.InputTokens), r.MaxTokens))
	return r
}

// groupPrefix is group g's system prompt: PrefixTokens words of its own
// stream, the same in every request of the group and the seed.
func (w *synthetic) groupPrefix(g int) []byte {
	rng := rand.New(rand.NewPCG(w.spec.Seed^0x9e3779b97f4a7c15, uint64(g)))
	b := make([]byte, 0, w.spec.PrefixTokens*8)
	for range w.spec.PrefixTokens {
		b = append(b, w.words[rng.IntN(len(w.words))]...)
	}
	return b
}

// appendGroupBody appends a chat request of a system message (the
// group's prefix) and a user message (the question).
func (s *WorkloadSpec) appendGroupBody(b, model, system, question []byte, maxTokens int) []byte {
	b = append(b, `{"model":`...)
	b = append(b, model...)
	b = append(b, s.messagesKey()...)
	b = append(b, `{"role":"system","content":"`...)
	b = append(b, system...)
	b = append(b, `"},{"role":"user","content":"`...)
	b = append(b, question...)
	b = append(b, `"}]`...)
	return s.appendOptions(b, maxTokens)
}

// prompt is n words: the shared prefix (the same for every request of
// the seed), then words of this request's own stream.
func (w *synthetic) prompt(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n*8)
	shared := min(w.spec.SharedPrefix, n)
	if shared > 0 {
		pre := rand.New(rand.NewPCG(w.spec.Seed, math.MaxUint64))
		for range shared {
			b = append(b, w.words[pre.IntN(len(w.words))]...)
		}
	}
	for range n - shared {
		b = append(b, w.words[rng.IntN(len(w.words))]...)
	}
	return b
}

// appendBody appends a request body carrying prompt (plain ASCII words).
func (s *WorkloadSpec) appendBody(b, model, prompt []byte, maxTokens int) []byte {
	b = append(b, `{"model":`...)
	b = append(b, model...)
	if s.Endpoint == "completions" {
		b = append(b, `,"prompt":"`...)
		b = append(b, prompt...)
		b = append(b, '"')
	} else {
		b = append(b, s.messagesKey()...)
		b = append(b, `{"role":"user","content":"`...)
		b = append(b, prompt...)
		b = append(b, `"}]`...)
	}
	return s.appendOptions(b, maxTokens)
}

// appendOptions appends the fields every request of the spec carries and
// closes the object.
func (s *WorkloadSpec) appendOptions(b []byte, maxTokens int) []byte {
	responses := s.Endpoint == "responses"
	switch {
	case s.Stream && responses: // a Responses stream always ends with its usage
		b = append(b, `,"stream":true`...)
	case s.Stream:
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	default:
		b = append(b, `,"stream":false`...)
	}
	if maxTokens > 0 {
		if responses {
			b = append(b, `,"max_output_tokens":`...)
		} else {
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, int64(maxTokens), 10)
		if s.ForceOutputLength {
			b = append(b, `,"min_tokens":`...)
			b = strconv.AppendInt(b, int64(maxTokens), 10)
			b = append(b, `,"ignore_eos":true`...)
		}
	}
	if s.JSON && responses {
		b = append(b, `,"text":{"format":{"type":"json_object"}}`...)
	} else if s.JSON {
		b = append(b, `,"response_format":{"type":"json_object"}`...)
	}
	return append(b, '}')
}

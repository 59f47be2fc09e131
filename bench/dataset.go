package bench

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/infergate/infergate/internal/tokens"
)

// fixedSet is a list of prepared requests, sampled with the seed
// (dataset) or taken in order (replay).
type fixedSet struct {
	reqs   []Request
	perm   []int
	replay bool
}

func (w *fixedSet) Len() int {
	if w.replay {
		return len(w.reqs)
	}
	return 0
}

func (w *fixedSet) Request(i int) Request {
	if w.replay {
		return w.reqs[i%len(w.reqs)]
	}
	return w.reqs[w.perm[i%len(w.perm)]]
}

// hashFile returns the file's bytes and their SHA-256.
func hashFile(path string) ([]byte, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	sum := sha256.Sum256(raw)
	return raw, hex.EncodeToString(sum[:]), nil
}

// lines splits JSONL, or a JSON array of objects, into raw objects.
func lines(raw []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var all []json.RawMessage
		if err := json.Unmarshal(trimmed, &all); err != nil {
			return nil, err
		}
		return all, nil
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		if !json.Valid(l) {
			return nil, fmt.Errorf("line %d is not JSON", n)
		}
		out = append(out, json.RawMessage(bytes.Clone(l)))
	}
	return out, sc.Err()
}

// datasetItems reads s.Dataset's objects (lines), recording its hash.
func (s *WorkloadSpec) datasetItems() ([]json.RawMessage, error) {
	raw, sum, err := hashFile(s.Dataset)
	if err != nil {
		return nil, err
	}
	s.DatasetSHA256 = sum
	items, err := lines(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: dataset %s: %w", s.Dataset, err)
	}
	return items, nil
}

// loadDataset reads one OpenAI request per line (messages or prompt), or
// ShareGPT conversations (the first human turn is the prompt; the first
// reply's length, counted, is max_tokens unless --output-tokens is set).
func loadDataset(s *WorkloadSpec, out lengths, tok *tokens.Tokenizer) (Workload, error) {
	items, err := s.datasetItems()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 1))
	w := &fixedSet{}
	for n, it := range items {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, fmt.Errorf("bench: dataset %s entry %d: not an object", s.Dataset, n+1)
		}
		var r Request
		var ok bool
		if conv, isShareGPT := obj["conversations"]; isShareGPT {
			r, ok = s.shareGPT(conv, out, rng, tok)
		} else {
			r, ok, err = s.openAIRequest(obj, out, rng)
			if err != nil {
				return nil, fmt.Errorf("bench: dataset %s entry %d: %w", s.Dataset, n+1, err)
			}
		}
		if ok {
			r.At = -1
			w.reqs = append(w.reqs, r)
		}
	}
	if len(w.reqs) == 0 {
		return nil, fmt.Errorf("bench: dataset %s holds no usable request", s.Dataset)
	}
	w.perm = rng.Perm(len(w.reqs))
	return w, nil
}

func (s *WorkloadSpec) shareGPT(conv json.RawMessage, out lengths, rng *rand.Rand, tok *tokens.Tokenizer) (Request, bool) {
	var turns []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	if json.Unmarshal(conv, &turns) != nil {
		return Request{}, false
	}
	var prompt, reply string
	for _, t := range turns {
		switch {
		case prompt == "" && (t.From == "human" || t.From == "user"):
			prompt = t.Value
		case prompt != "" && reply == "" && (t.From == "gpt" || t.From == "assistant"):
			reply = t.Value
		}
	}
	if prompt == "" {
		return Request{}, false
	}
	maxTokens := out.Sample(rng)
	if out.zero() && reply != "" {
		maxTokens = max(1, tok.Count(reply))
	}
	q, _ := json.Marshal(s.Salt + prompt)
	b, _ := json.Marshal(s.Model)
	body := append([]byte(`{"model":`), b...)
	if s.Endpoint == "completions" {
		body = append(append(body, `,"prompt":`...), q...)
	} else {
		body = append(append(append(append(body, s.messagesKey()...), `{"role":"user","content":`...), q...), "}]"...)
	}
	return Request{Body: s.appendOptions(body, maxTokens), InputTokens: tok.Count(prompt), MaxTokens: maxTokens}, true
}

// openAIRequest takes a request object, setting the run's model, stream
// and output length over its own.
func (s *WorkloadSpec) openAIRequest(obj map[string]json.RawMessage, out lengths, rng *rand.Rand) (Request, bool, error) {
	_, hasMsgs := obj["messages"]
	_, hasPrompt := obj["prompt"]
	_, hasInput := obj["input"]
	if !hasMsgs && !hasPrompt && !hasInput {
		return Request{}, false, errors.New("neither messages, prompt nor input")
	}
	var r Request
	if s.Model != "" {
		obj["model"], _ = json.Marshal(s.Model)
	}
	obj["stream"], _ = json.Marshal(s.Stream)
	delete(obj, "stream_options")
	if s.Stream {
		obj["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	if n := out.Sample(rng); n > 0 {
		obj["max_tokens"], _ = json.Marshal(n)
		delete(obj, "max_completion_tokens")
		if s.ForceOutputLength {
			obj["min_tokens"], obj["ignore_eos"] = obj["max_tokens"], json.RawMessage("true")
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if v, ok := obj[k]; ok {
			_ = json.Unmarshal(v, &r.MaxTokens)
		}
	}
	if s.JSON {
		obj["response_format"] = json.RawMessage(`{"type":"json_object"}`)
	}
	if s.Salt != "" {
		saltRequest(obj, s.Salt)
	}
	if s.Endpoint == "responses" {
		asResponse(obj)
	}
	var err error
	r.Body, err = json.Marshal(obj)
	return r, true, err
}

// saltRequest starts the text of the request's first message (or its
// prompt, or its input) with salt; a prompt of token ids stays as it is.
func saltRequest(obj map[string]json.RawMessage, salt string) {
	for _, k := range []string{"messages", "input", "prompt"} {
		v, ok := obj[k]
		if !ok {
			continue
		}
		var text string
		if json.Unmarshal(v, &text) == nil {
			obj[k], _ = json.Marshal(salt + text)
			return
		}
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil || len(items) == 0 {
			return
		}
		if json.Unmarshal(items[0], &text) == nil { // a list of prompts
			items[0], _ = json.Marshal(salt + text)
		} else {
			var msg map[string]json.RawMessage
			if json.Unmarshal(items[0], &msg) != nil {
				return
			}
			if json.Unmarshal(msg["content"], &text) == nil {
				msg["content"], _ = json.Marshal(salt + text)
			} else if parts := []json.RawMessage{}; json.Unmarshal(msg["content"], &parts) == nil {
				kind := "text"
				if len(parts) > 0 && bytes.Contains(parts[0], []byte(`"input_text"`)) {
					kind = "input_text" // the Responses API's part
				}
				part, _ := json.Marshal(map[string]string{"type": kind, "text": salt})
				msg["content"], _ = json.Marshal(append([]json.RawMessage{part}, parts...))
			} else {
				return
			}
			items[0], _ = json.Marshal(msg)
		}
		obj[k], _ = json.Marshal(items)
		return
	}
}

// asResponse rewrites a chat or completion request object as the
// Responses API request it amounts to: messages (or a prompt) become the
// input, max_tokens max_output_tokens, response_format text.format; a
// Responses request stays as it is.
func asResponse(obj map[string]json.RawMessage) {
	if m, ok := obj["messages"]; ok {
		obj["input"] = m
		delete(obj, "messages")
	}
	if p, ok := obj["prompt"]; ok {
		if _, has := obj["input"]; !has {
			obj["input"] = p
		}
		delete(obj, "prompt")
	}
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if v, ok := obj[k]; ok {
			obj["max_output_tokens"] = v
			delete(obj, k)
		}
	}
	delete(obj, "stream_options")
	if f, ok := obj["response_format"]; ok {
		obj["text"] = json.RawMessage(`{"format":` + string(f) + `}`)
		delete(obj, "response_format")
	}
}

package bench

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
)

// An agent's requests carry its tool list, the same on every call: a
// server renders it into the prompt's start (the chat template's system
// part), so it is part of the prefix a cache and a router see. --tools N
// sends N function definitions, drawn from the seed: a name, a
// description of toolWords words and one string parameter, about 100
// cl100k_base tokens each as JSON.

// maxTools bounds --tools.
const maxTools = 1000

// toolWords is the length of a tool's description, in words.
const toolWords = 64

// toolsMember is the `,"tools":[...]` member of the spec's requests
// (the Responses API's flat function shape for responses), nil for none.
func (w *synthetic) toolsMember() []byte {
	n := w.spec.Tools
	if n <= 0 {
		return nil
	}
	type params struct {
		Type       string                       `json:"type"`
		Properties map[string]map[string]string `json:"properties"`
		Required   []string                     `json:"required"`
	}
	type fn struct {
		Type        string `json:"type,omitempty"`
		Name        string `json:"name"`
		Description string `json:"description"`
		Parameters  params `json:"parameters"`
	}
	type chatTool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	rng := rand.New(rand.NewPCG(w.spec.Seed^0x7001, 0x7001))
	var tools []any
	for k := range n {
		var d strings.Builder
		for range toolWords {
			d.WriteString(w.words[rng.IntN(len(w.words))])
		}
		f := fn{Name: "tool_" + strconv.Itoa(k), Description: strings.TrimSpace(d.String()), Parameters: params{Type: "object",
			Properties: map[string]map[string]string{"query": {"type": "string", "description": "what to look up"}}, Required: []string{"query"}}}
		if w.spec.Endpoint == "responses" {
			f.Type = "function"
			tools = append(tools, f)
		} else {
			tools = append(tools, chatTool{Type: "function", Function: f})
		}
	}
	raw, _ := json.Marshal(tools)
	return append([]byte(`,"tools":`), raw...)
}

// appendTools adds the tools member to a body appendOptions closed.
func (w *synthetic) appendTools(b []byte) []byte {
	if len(w.tools) == 0 || len(b) == 0 || b[len(b)-1] != '}' {
		return b
	}
	b = append(b[:len(b)-1], w.tools...)
	return append(b, '}')
}

package openai

import "encoding/json"

// Message is one chat message. Content is kept raw: it may be a string or
// an array of content parts.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// StreamOptions is the request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat is the request's response_format.
type ResponseFormat struct {
	Type string `json:"type"`
}

// Request is the union of the chat and legacy completion request bodies,
// with the vLLM extensions benchmarks use (min_tokens, ignore_eos). Pointer
// fields distinguish absent from zero.
type Request struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages,omitempty"`
	Prompt              json.RawMessage `json:"prompt,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	MinTokens           *int            `json:"min_tokens,omitempty"`
	IgnoreEOS           bool            `json:"ignore_eos,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	N                   *int            `json:"n,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	// Tools is the request's tools array as sent (nil without one): a
	// server renders it into the prompt, so it counts as prompt tokens.
	Tools json.RawMessage `json:"tools,omitempty"`
}

// OutputLimit returns max_completion_tokens, else max_tokens, else nil.
func (r *Request) OutputLimit() *int {
	if r.MaxCompletionTokens != nil {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails says how much of the prompt the server found in
	// its prefix cache (OpenAI; vLLM with prefix caching); HasDetails
	// whether the server said (a value, not a pointer: the relay reads a
	// usage per request without allocating).
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details,omitzero"`
	HasDetails          bool                `json:"-"`
	// CompletionTokensDetails says how many of the completion tokens were
	// a reasoning model's thinking (output_tokens_details of the
	// Responses API).
	CompletionTokensDetails CompletionTokensDetails `json:"completion_tokens_details,omitzero"`
}

// CompletionTokensDetails is the breakdown of a usage's completion tokens.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// PromptTokensDetails is the breakdown of a usage's prompt tokens.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Cached returns the prompt tokens the server reported cached, and
// whether it reported them.
func (u Usage) Cached() (int, bool) {
	return u.PromptTokensDetails.CachedTokens, u.HasDetails
}

// ChatResponse is a non-streaming chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChatChoice is one choice of a ChatResponse.
type ChatChoice struct {
	Index        int          `json:"index"`
	Message      ChatMessage  `json:"message"`
	FinishReason *string      `json:"finish_reason"`
	Logprobs     *interface{} `json:"logprobs"`
}

// ChatMessage is the assistant message of a ChatChoice. A reasoning
// model's thinking comes in ReasoningContent (vLLM, SGLang, DeepSeek) or
// Reasoning (newer vLLM).
type ChatMessage struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// CompletionResponse is a non-streaming legacy completion.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a CompletionResponse.
type CompletionChoice struct {
	Index        int          `json:"index"`
	Text         string       `json:"text"`
	FinishReason *string      `json:"finish_reason"`
	Logprobs     *interface{} `json:"logprobs"`
}

// Chunk is one streamed chunk, chat or completion, as a client decodes it.
type Chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
	Error   *Error        `json:"error,omitempty"`
}

// ChunkChoice is one choice of a Chunk.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	Text         string     `json:"text"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is the delta of a chat ChunkChoice.
type ChunkDelta struct {
	Role             string `json:"role,omitempty"`
	Content          string `json:"content,omitempty"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

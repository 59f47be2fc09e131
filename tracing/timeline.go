package tracing

import (
	"time"

	"github.com/infergate/infergate/openai"
)

// Timeline is one request's monotonic stamps (see DESIGN.md, "The
// timeline"). A zero stamp means the request never got there. It is owned
// by one goroutine at a time: the handler, then the stream writer.
type Timeline struct {
	Received      time.Time // the request was fully read
	Asked         time.Time // its own setup done, it asked for a slot
	Admitted      time.Time // a slot was granted
	UpstreamStart time.Time // a backend was picked and the call started
	Connected     time.Time // a backend connection was in hand
	Sent          time.Time // the request was written to the backend
	Headers       time.Time // the backend's response headers arrived
	FirstTokenIn  time.Time // the first event carrying content arrived
	FirstTokenOut time.Time // that event was flushed to the client
	LastTokenIn   time.Time // the last content event arrived
	// FirstOutputIn is when the first content event that was not a
	// reasoning model's thinking arrived, FirstOutputOut when it was
	// flushed to the client: the first output token, where FirstTokenIn
	// is the first token of any kind.
	FirstOutputIn, FirstOutputOut time.Time
	Done                          time.Time // the response was complete

	// TLSHandshake is the handshake time of Connected's dial, when it was
	// a fresh one (NewConn, below).
	TLSHandshake time.Duration
	// UpstreamRTT is the kernel's round-trip time of the backend
	// connection (TCP_INFO) when the request was sent; 0 when unknown.
	UpstreamRTT time.Duration
	// Events counts relayed events, ContentEvents those carrying output;
	// Relay sums, over each read from the backend, the time from the read
	// to flushing what it brought to the client, and RelayMax is the
	// longest of those.
	Events, ContentEvents int
	Relay, RelayMax       time.Duration
	// Attempts counts upstream calls, failovers included.
	Attempts int
	// PromptTokens and OutputTokens are the backend's usage, when it
	// reported one.
	PromptTokens, OutputTokens int
	// CachedTokens is the prompt tokens the backend found in its prefix
	// cache (usage.prompt_tokens_details.cached_tokens), when it said so
	// (CachedReported).
	CachedTokens   int
	CachedReported bool
	// NewConn tells whether Connected is a fresh dial rather than a pooled
	// connection. Beside CachedReported: two flags in one word, where
	// each alone took one (the gateway's per-request exchange holds a
	// Timeline, and stays in its allocation size class by it).
	NewConn bool
	// ReasoningEvents counts the content events that carried only
	// thinking; ReasoningTokens is the backend's count of them (usage's
	// reasoning_tokens), when it reported one.
	ReasoningEvents, ReasoningTokens int
	// FinishReason is the backend's finish_reason, when it sent one.
	FinishReason string
	// PolicyTime is the time the policy took (counting, trimming), between
	// receipt and admission: gateway time, not queueing.
	PolicyTime time.Duration
	// Policy is what the policy did to the request.
	Policy PolicyNote
	// Server is the backend's own account of its time (vLLM's
	// per-request metrics, llama.cpp's timings, TGI's headers); Source is
	// empty when it gave none.
	Server openai.ServerTiming
}

// Reset clears t for reuse.
func (t *Timeline) Reset() { *t = Timeline{} }

// since returns b-a, or 0 when either stamp is missing.
func since(a, b time.Time) time.Duration {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// TTFT is the gateway-side time to first token: received to the first
// content event flushed to the client.
func (t *Timeline) TTFT() time.Duration { return since(t.Received, t.FirstTokenOut) }

// TTFO is the gateway-side time to first output token: received to the
// first content event that was not thinking flushed to the client. For a
// model that does not think first it is TTFT.
func (t *Timeline) TTFO() time.Duration { return since(t.Received, t.FirstOutputOut) }

// Reasoning is how long the model thought before its first output token:
// first token in to first output token in; zero when it did not think.
func (t *Timeline) Reasoning() time.Duration {
	if t.ReasoningEvents == 0 {
		return 0
	}
	return max(since(t.FirstTokenIn, t.FirstOutputIn), 0)
}

// Duration is received to done.
func (t *Timeline) Duration() time.Duration { return since(t.Received, t.Done) }

// Connect is the time to get a backend connection, new or pooled.
func (t *Timeline) Connect() time.Duration { return since(t.UpstreamStart, t.Connected) }

// ModelTTFT is request sent to first content event in, which includes the
// network round trip to the backend.
func (t *Timeline) ModelTTFT() time.Duration { return since(t.Sent, t.FirstTokenIn) }

// QueueWait is the time the request waited for an admission slot: from
// asking for it to admission. Without an Asked stamp it is from receipt
// to admission, less the policy's work; that also counts the gateway's
// own setup of the request (parsing, headers), tens of microseconds that
// are not a queue.
func (t *Timeline) QueueWait() time.Duration {
	if !t.Asked.IsZero() {
		return since(t.Asked, t.Admitted)
	}
	return max(0, since(t.Received, t.Admitted)-t.PolicyTime)
}

// PolicyNote is what the gateway's policy did to a request (package
// policy); its zero value is a request it left alone.
type PolicyNote struct {
	// InputTokens is the prompt as the policy counted it (after any
	// trim); Estimated is set when no tokenizer counted it exactly.
	InputTokens int  `json:"input_tokens,omitempty"`
	Estimated   bool `json:"estimated,omitempty"`
	// TrimmedTokens and TrimmedMessages are what trimming removed.
	TrimmedTokens   int `json:"trimmed_tokens,omitempty"`
	TrimmedMessages int `json:"trimmed_messages,omitempty"`
	// MaxTokens is the output limit the policy set (clamped or defaulted),
	// 0 when it set none; RequestedMaxTokens is what the client asked
	// for, -1 when it asked for none.
	MaxTokens          int `json:"max_tokens,omitempty"`
	RequestedMaxTokens int `json:"requested_max_tokens,omitempty"`
	// UnknownHistory is set when the request continues a stored response
	// (previous_response_id): InputTokens counts only what was sent; the
	// history the backend prepends is unknown to the gateway.
	UnknownHistory bool `json:"unknown_history,omitempty"`
}

// LengthByPolicy reports whether a finish_reason "length" is the policy's
// doing: it set the output limit the model ran into.
func (t *Timeline) LengthByPolicy() bool {
	return t.FinishReason == "length" && t.Policy.MaxTokens > 0
}

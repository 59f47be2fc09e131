package bench

import (
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/quality"
)

// Result is one request as the client saw it. Durations are from Sent;
// zero means the moment did not happen (no content, no event).
type Result struct {
	// Index is the request's number in the run, warm-up included.
	Index  int
	Stage  int
	Warmup bool
	// Prime marks a request of a warm pass (Config.Cache warm): sent to
	// fill the server's cache, in no figure (Warmup is set too).
	Prime bool
	// Intended is when the schedule meant to send it (open loop, replay);
	// equal to Sent in a closed loop. Sent is when it was sent.
	Intended, Sent time.Time
	// TTFB is the response headers' arrival; FirstEvent the first SSE
	// event of any kind (a role-only chunk counts here); TTFT the first
	// event carrying content, reasoning content or tool calls; LastToken
	// the last such event; End the response's end ([DONE], usage and the
	// body's end included).
	TTFB, FirstEvent, TTFT, LastToken, End time.Duration
	// TTFO is the first output token, the first content event that was
	// not a reasoning model's thinking (reasoning_content, reasoning, the
	// Responses API's reasoning deltas); equal to TTFT for a model that
	// does not think first. ReasoningTokens is the usage's count of the
	// thinking tokens (of OutputTokens), -1 without one.
	TTFO            time.Duration
	ReasoningTokens int
	// ReasoningEvents counts the content events that were thinking.
	ReasoningEvents int
	// Class is the service_tier the request sent (a class mix), "" for
	// none; ServedClass the class an infergate gateway says it served
	// (X-Infergate-Class: one of Classes, "other", "" when it did not
	// say). ShedReason is why a 429 or 503 was refused ("503 preempted",
	// "429 tenant_limit_reached": refusalReason), "" otherwise.
	Class, ServedClass, ShedReason string
	// Requeued is set when the gateway preempted the request and queued
	// it again before serving it (X-Infergate-Requeued).
	Requeued bool
	// Session and Turn say which session (from 0) and which of its
	// turns (from 1) the request was; Turn 0 outside sessions.
	Session, Turn int
	// CachedTokens is the prompt tokens the server found cached (usage's
	// cached_tokens), -1 when it did not say.
	CachedTokens int
	// ServerTTFT is the server's own time to first token when it reports
	// one (the simulator's sim_timing, asked for with X-Sim-Timing).
	ServerTTFT time.Duration
	// Gateway is an infergate gateway's own account of the request (asked
	// for with X-Infergate-Timing), nil when there was none: on its usage
	// chunk ("infergate_timing", milliseconds), its own TTFT and the split
	// of the request's time (tracing.Attribution).
	Gateway *openai.Timing
	Status  int
	// RetryAfter is what a 429 or 503 answer's Retry-After asked for (at
	// most MaxRetryAfter), 0 without one.
	RetryAfter time.Duration
	// ContentEvents counts events that carried content.
	ContentEvents int
	// OutputTokens is UsageTokens when the server reported usage, else
	// CountedTokens. UsageTokens is -1 without usage; CountedTokens -1
	// when the text was not counted.
	OutputTokens, UsageTokens, CountedTokens int
	// PromptTokens is the server's usage.prompt_tokens, -1 without usage.
	PromptTokens int
	// InputTokens and MaxTokens are what the request asked for (0 unknown).
	InputTokens, MaxTokens int
	Finish                 string
	// ClampedByGateway is set when a gateway's policy set the request's
	// output limit (X-Infergate-Max-Tokens-Clamped): a finish "length"
	// is then the policy's doing, not the model's.
	ClampedByGateway bool
	// ErrClass is empty for a success; Err the error's text.
	ErrClass, Err string
	// Quality signals of a successful answer (package quality, the judge
	// the mirror uses too); Ask is what the request asked of its form.
	quality.Signals
	Ask quality.Ask
	// Events are the times of the content events from Sent, kept only
	// when the run keeps events.
	Events []time.Duration
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.ErrClass == "" }

// TPOT is (last content − first content) / (N − 1), N = output tokens;
// zero when N < 2.
func (r *Result) TPOT() time.Duration {
	if r.OutputTokens < 2 || r.TTFT == 0 {
		return 0
	}
	return (r.LastToken - r.TTFT) / time.Duration(r.OutputTokens-1)
}

// E2E is the last content event (the whole body when not streaming) from
// the send.
func (r *Result) E2E() time.Duration {
	if r.LastToken > 0 {
		return r.LastToken
	}
	return r.End
}

// TTFTSched is TTFT measured from the intended send time: it includes any
// time the request waited in the client (coordinated omission).
func (r *Result) TTFTSched() time.Duration {
	if r.TTFT == 0 {
		return 0
	}
	return r.TTFT + r.SendLag()
}

// SendLag is how late the request left against its schedule.
func (r *Result) SendLag() time.Duration {
	if r.Intended.IsZero() {
		return 0
	}
	return r.Sent.Sub(r.Intended)
}

// Speed is the request's output speed after its first token, tokens/s:
// (N − 1) / (last content − first content).
func (r *Result) Speed() float64 {
	d := r.LastToken - r.TTFT
	if r.OutputTokens < 2 || d <= 0 {
		return 0
	}
	return float64(r.OutputTokens-1) / d.Seconds()
}

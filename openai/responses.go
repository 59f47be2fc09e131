package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
)

// The Responses API (POST /v1/responses), OpenAI's main API and served
// by vLLM and SGLang. A stream is a sequence of typed events, each an
// "event:" line naming its type and a data line holding a JSON object
// whose "type" member says it again:
//
//	event: response.output_text.delta
//	data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hel","sequence_number":7}
//
// The answer's text comes in response.output_text.delta (and
// response.refusal.delta), a reasoning model's thinking in
// response.reasoning_text.delta (and response.reasoning_summary_text.delta),
// a tool call's arguments in response.function_call_arguments.delta. The
// stream ends with response.completed, response.incomplete or
// response.failed, whose "response" carries the usage (input_tokens,
// output_tokens, output_tokens_details.reasoning_tokens), and no [DONE].

// ResponsesPath is the Responses API's route.
const ResponsesPath = "/v1/responses"

// EventName returns the value of an event's "event:" line, nil when it
// has none (chat streams do not name their events).
func EventName(ev []byte) []byte { return fieldValue(ev, eventPrefix) }

var eventPrefix = []byte("event:")

var typePrefix = []byte(`{"type":"`)

// ResponseEventType returns the top-level "type" of a Responses event's
// data, raw (event types carry no escapes); nil when the data is not an
// object with a string type. OpenAI and vLLM write the type first, which
// is read without a scan; elsewhere in the object it is found by walking
// the top-level members of valid JSON only, so a nested item's "type"
// never counts.
func ResponseEventType(data []byte) []byte {
	if rest, ok := bytes.CutPrefix(data, typePrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return rest[:i]
		}
		return nil
	}
	if !validJSON(data) {
		return nil
	}
	var typ []byte
	EachMember(data, func(key []byte, f Field) bool {
		if !keyIs(key, "type") {
			return true
		}
		if v := f.Of(data); len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
			typ = v[1 : len(v)-1]
		}
		return false
	})
	return typ
}

// responseKind is what a Responses event type is to a Tally.
type responseKind uint8

const (
	respOther responseKind = iota
	respText
	respReasoning
	respTool
	respCompleted
	respIncomplete
	respFailed
	respCreated
)

func kindOfResponseEvent(typ []byte) responseKind {
	switch string(typ) {
	case "response.output_text.delta", "response.refusal.delta":
		return respText
	case "response.reasoning_text.delta", "response.reasoning_summary_text.delta", "response.reasoning.delta":
		return respReasoning
	case "response.function_call_arguments.delta":
		return respTool
	case "response.completed":
		return respCompleted
	case "response.incomplete":
		return respIncomplete
	case "response.failed", "error":
		return respFailed
	case "response.created":
		return respCreated
	}
	return respOther
}

var keyDelta = []byte(`"delta"`)

// addResponse is Add for a Responses stream's event.
func (t *Tally) addResponse(data []byte, at time.Time) (Kind, bool) {
	if len(data) == 0 {
		return KindOther, false
	}
	if t.Finished() {
		return KindTrailer, false
	}
	switch kindOfResponseEvent(ResponseEventType(data)) {
	case respText:
		if valueIsString(data, keyDelta, true) {
			t.output(at)
			if len(t.Text) < t.TextLimit {
				t.Text = appendStringValues(t.Text, data, keyDelta)
			}
			return KindContent, false
		}
	case respReasoning:
		if valueIsString(data, keyDelta, true) {
			t.reasoning(at)
			return KindContent, false
		}
	case respTool:
		if valueIsString(data, keyDelta, true) {
			t.output(at)
			t.ToolCalls = true
			return KindContent, false
		}
	case respCompleted:
		t.Finish = "stop"
		if t.ToolCalls || bytes.Contains(data, []byte(`"type":"function_call"`)) {
			t.Finish = "tool_calls"
		}
		return KindFinish, t.usage(data)
	case respIncomplete:
		t.Finish = "length"
		if bytes.Contains(data, []byte(`"reason":"content_filter"`)) {
			t.Finish = "content_filter"
		}
		return KindFinish, t.usage(data)
	case respFailed:
		t.ErrorEvent = true
		return KindError, t.usage(data)
	case respCreated:
		if id := ResponseID(data); id != nil {
			t.ResponseID = xxhash.Sum64(id)
		}
	}
	return KindOther, false
}

// ResponseID returns the id of a Responses API response, as its JSON
// holds it (unquoted): a response body's own id, or that of the
// "response" a stream's lifecycle event (response.created) carries; nil
// when there is none, it is not a string or data is not valid JSON.
// Nothing is allocated.
func ResponseID(data []byte) []byte {
	if !validJSON(data) {
		return nil
	}
	return responseID(data)
}

func responseID(data []byte) []byte {
	var id []byte
	EachMember(data, func(key []byte, f Field) bool {
		v := f.Of(data)
		switch {
		case keyIs(key, "id"):
			id = stringContent(v)
		case keyIs(key, "response") && len(v) > 0 && v[0] == '{':
			id = responseID(v)
		}
		return id == nil
	})
	return id
}

// stringContent is the inside of a JSON string value, nil for another
// value or an empty string.
func stringContent(v []byte) []byte {
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil
	}
	return v[1 : len(v)-1]
}

// Response is a Responses API response object: the body of a
// non-streaming call and the "response" of the stream's lifecycle events.
type Response struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Model              string          `json:"model"`
	Output             []ResponseItem  `json:"output"`
	Usage              *ResponseUsage  `json:"usage"`
	IncompleteDetails  *IncompleteInfo `json:"incomplete_details"`
	Error              *ResponseError  `json:"error"`
	PreviousResponseID *string         `json:"previous_response_id"`
}

// IncompleteInfo says why a response is incomplete.
type IncompleteInfo struct {
	Reason string `json:"reason"`
}

// ResponseError is the error of a failed response.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UnmarshalJSON reads a code that is a string or, as llama.cpp writes
// it, an integer (400 as "400"), so a failed response whose code is a
// number is still read.
func (e *ResponseError) UnmarshalJSON(b []byte) error {
	var raw struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	e.Message, e.Code = raw.Message, ""
	if c := scalarString(raw.Code); c != nil {
		e.Code = *c
	}
	return nil
}

// ResponseItem is one output item: a message, a reasoning item or a
// function call.
type ResponseItem struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status,omitempty"`
	Role    string         `json:"role,omitempty"`
	Content []ResponsePart `json:"content,omitempty"`
	Summary []ResponsePart `json:"summary,omitempty"`
	// A function call's name, arguments and call id.
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	CallID    string `json:"call_id,omitempty"`
}

// ResponsePart is a part of an item's content: output_text, refusal,
// reasoning_text or summary_text.
type ResponsePart struct {
	Type        string            `json:"type"`
	Text        string            `json:"text,omitempty"`
	Refusal     string            `json:"refusal,omitempty"`
	Annotations []json.RawMessage `json:"annotations,omitempty"`
}

// ResponseUsage is a response's token accounting.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// OutputText is the answer's text: every output_text part (and refusal)
// of the message items, in order.
func (r *Response) OutputText() string {
	var b []byte
	for _, it := range r.Output {
		if it.Type != "message" {
			continue
		}
		for _, p := range it.Content {
			b = append(b, p.Text...)
			b = append(b, p.Refusal...)
		}
	}
	return string(b)
}

// Finish is the chat finish_reason a response's status amounts to:
// stop, tool_calls, length or content_filter; "" while in progress or
// when it failed.
func (r *Response) Finish() string {
	switch r.Status {
	case "completed":
		for _, it := range r.Output {
			if it.Type == "function_call" {
				return "tool_calls"
			}
		}
		return "stop"
	case "incomplete":
		if r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "content_filter" {
			return "content_filter"
		}
		return "length"
	}
	return ""
}

// addResponseBody is AddBody for a whole Responses body.
func (t *Tally) addResponseBody(body []byte, at time.Time) {
	var r Response
	if json.Unmarshal(body, &r) != nil {
		return
	}
	if r.Error != nil && r.Status == "failed" {
		t.ErrorEvent = true
	}
	text := r.OutputText()
	reasoned := false
	for _, it := range r.Output {
		switch it.Type {
		case "reasoning":
			reasoned = true
		case "function_call":
			t.ToolCalls = true
		}
	}
	if reasoned {
		t.reasoning(at)
	}
	if text != "" || t.ToolCalls {
		t.output(at)
		if len(t.Text) < t.TextLimit {
			t.Text = append(t.Text, text...)
		}
	}
	t.Finish = r.Finish()
	t.usage(body)
	if r.ID != "" {
		t.ResponseID = xxhash.Sum64String(r.ID)
	}
}

// AppendResponsesSSEError appends the Responses API's error event, the
// way a Responses stream that fails after its first byte is ended:
//
//	event: error
//	data: {"type":"error","code":...,"message":...,"param":null}
func AppendResponsesSSEError(dst []byte, code, msg string) []byte {
	type errorEvent struct {
		Type    string  `json:"type"`
		Code    *string `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
	}
	e := errorEvent{Type: "error", Message: msg}
	if code != "" {
		e.Code = &code
	}
	b, _ := json.Marshal(e) // only strings: it cannot fail
	dst = append(dst, "event: error\ndata: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// ResponsesRequest is a Responses API request body, with the vLLM
// extensions benchmarks use (min_tokens, ignore_eos). Input is a string or
// an array of input items, kept raw.
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input,omitempty"`
	Instructions       *string         `json:"instructions,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	MaxOutputTokens    *int            `json:"max_output_tokens,omitempty"`
	MinTokens          *int            `json:"min_tokens,omitempty"`
	IgnoreEOS          bool            `json:"ignore_eos,omitempty"`
	Temperature        *float64        `json:"temperature,omitempty"`
	PreviousResponseID *string         `json:"previous_response_id,omitempty"`
	Text               *ResponsesText  `json:"text,omitempty"`
}

// ResponsesText is a request's text options: the output format.
type ResponsesText struct {
	Format *ResponseFormat `json:"format,omitempty"`
}

// InputItem is one item of a Responses request's input: a message (type
// "message" or absent, with a role and content), or a function call or
// its output carried over from an earlier turn.
type InputItem struct {
	Type      string          `json:"type,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Name      string          `json:"name,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
}

// InputMessages returns a Responses request's instructions and input as
// the chat messages a server would template: the instructions as a system
// message, a string input as one user message, each input item as a
// message of its role (a function call as the assistant's, its output as
// the tool's). Content parts keep their shape: a chat reader takes the
// text of input_text and output_text parts alike.
func InputMessages(instructions *string, input json.RawMessage) ([]Message, error) {
	var msgs []Message
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	if instructions != nil && *instructions != "" {
		msgs = append(msgs, Message{Role: "system", Content: str(*instructions)})
	}
	if len(input) == 0 || string(input) == "null" {
		return msgs, nil
	}
	var s string
	if json.Unmarshal(input, &s) == nil {
		return append(msgs, Message{Role: "user", Content: str(s)}), nil
	}
	var items []InputItem
	if err := json.Unmarshal(input, &items); err != nil {
		return nil, errors.New("input must be a string or an array of input items")
	}
	for i, it := range items {
		switch it.Type {
		case "", "message":
			if it.Role == "" {
				return nil, fmt.Errorf("input[%d]: a message needs a role", i)
			}
			msgs = append(msgs, Message{Role: it.Role, Content: it.Content})
		case "function_call":
			msgs = append(msgs, Message{Role: "assistant", Content: str(it.Name + it.Arguments)})
		case "function_call_output":
			out := it.Output
			if len(out) > 0 && out[0] != '"' && out[0] != '[' {
				out = str(string(out))
			}
			msgs = append(msgs, Message{Role: "tool", Content: out})
		case "reasoning", "item_reference":
			// Thinking from an earlier turn, or a stored item: no text
			// a server templates.
		default:
			return nil, fmt.Errorf("input[%d]: unknown item type %q", i, it.Type)
		}
	}
	return msgs, nil
}

// ChatRequest returns the chat request r amounts to: the same model,
// limits and options, its input as messages (InputMessages).
func (r *ResponsesRequest) ChatRequest() (Request, error) {
	msgs, err := InputMessages(r.Instructions, r.Input)
	if err != nil {
		return Request{}, err
	}
	c := Request{Model: r.Model, Messages: msgs, Stream: r.Stream, MaxTokens: r.MaxOutputTokens,
		MinTokens: r.MinTokens, IgnoreEOS: r.IgnoreEOS, Temperature: r.Temperature}
	if r.Text != nil && r.Text.Format != nil {
		c.ResponseFormat = r.Text.Format
	}
	return c, nil
}

// ResponseFinish returns the chat finish_reason a whole Responses body
// amounts to (Response.Finish), "" when it is not a response.
func ResponseFinish(body []byte) string {
	var r struct {
		Status            string          `json:"status"`
		IncompleteDetails *IncompleteInfo `json:"incomplete_details"`
		Output            []struct {
			Type string `json:"type"`
		} `json:"output"`
	}
	if json.Unmarshal(body, &r) != nil {
		return ""
	}
	full := Response{Status: r.Status, IncompleteDetails: r.IncompleteDetails}
	for _, it := range r.Output {
		full.Output = append(full.Output, ResponseItem{Type: it.Type})
	}
	return full.Finish()
}

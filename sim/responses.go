package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/infergate/infergate/openai"
	"github.com/valyala/fasthttp"
)

// The Responses API (POST /v1/responses), streamed as OpenAI's reference
// writes it: typed events, each named on an event: line and numbered by
// sequence_number, a reasoning item first when the simulator thinks, then
// the message; response.completed (or response.incomplete, at the output
// limit) carries the usage. Responses are not stored: a request that
// continues one (previous_response_id) is answered 404, as a server that
// does not hold it answers.

// decodeResponses reads a Responses API request as the chat request it
// amounts to.
func (s *Server) decodeResponses(rc *fasthttp.RequestCtx, req *openai.Request) bool {
	var rr openai.ResponsesRequest
	if err := json.Unmarshal(rc.PostBody(), &rr); err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return false
	}
	if rr.Model != s.cfg.Model {
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", rr.Model))
		return false
	}
	if rr.PreviousResponseID != nil {
		vllmError(rc, fasthttp.StatusNotFound, "NotFoundError", fmt.Sprintf("Response with id '%s' not found.", *rr.PreviousResponseID))
		return false
	}
	c, err := rr.ChatRequest()
	if err != nil {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", err.Error())
		return false
	}
	if len(c.Messages) == 0 {
		vllmError(rc, fasthttp.StatusBadRequest, "BadRequestError", "input: field required")
		return false
	}
	*req = c
	return true
}

// responseUsage is the usage object of a Responses answer.
func (r *request) responseUsage() *openai.ResponseUsage {
	u := &openai.ResponseUsage{InputTokens: r.promptTokens, OutputTokens: r.ans.tokens, TotalTokens: r.promptTokens + r.ans.tokens}
	u.OutputTokensDetails.ReasoningTokens = r.ans.think
	if r.prefixCaching {
		u.InputTokensDetails.CachedTokens = r.src.cachedTokens()
	}
	return u
}

// response is the response object in the given status, with the output
// written so far (thinking and text; nil for none yet).
func (r *request) response(status string, thinking, text *string) openai.Response {
	resp := openai.Response{ID: r.id, Object: "response", CreatedAt: r.created, Status: status, Model: r.model, Output: []openai.ResponseItem{}}
	if thinking != nil {
		resp.Output = append(resp.Output, r.reasoningItem(*thinking, "completed"))
	}
	if text != nil {
		resp.Output = append(resp.Output, r.messageItem(*text, "completed"))
	}
	switch status {
	case "completed":
		resp.Usage = r.responseUsage()
	case "incomplete":
		resp.Usage = r.responseUsage()
		resp.IncompleteDetails = &openai.IncompleteInfo{Reason: "max_output_tokens"}
	}
	return resp
}

func (r *request) reasoningItem(text, status string) openai.ResponseItem {
	it := openai.ResponseItem{Type: "reasoning", ID: "rs_" + r.id[len("resp_"):], Summary: []openai.ResponsePart{}, Status: status}
	if text != "" {
		it.Content = []openai.ResponsePart{{Type: "reasoning_text", Text: text}}
	}
	return it
}

func (r *request) messageItem(text, status string) openai.ResponseItem {
	it := openai.ResponseItem{Type: "message", ID: "msg_" + r.id[len("resp_"):], Status: status, Role: "assistant", Content: []openai.ResponsePart{}}
	if status == "completed" {
		it.Content = []openai.ResponsePart{outputText(text)}
	}
	return it
}

func outputText(text string) openai.ResponsePart {
	return openai.ResponsePart{Type: "output_text", Text: text, Annotations: []json.RawMessage{}}
}

// finalStatus is the response's status once the answer is whole.
func (r *request) finalStatus() string {
	if r.ans.finish == "length" {
		return "incomplete"
	}
	return "completed"
}

// responseBody is the whole answer as a Responses body.
func (r *request) responseBody() []byte {
	thinking, text := r.ans.thoughts(), r.ans.text()
	var th *string
	if r.ans.think > 0 {
		th = &thinking
	}
	b, _ := json.Marshal(r.response(r.finalStatus(), th, &text))
	return b
}

// streamResponse writes the answer as a Responses stream, one delta
// event per token, each flushed as it is due.
func (s *Server) streamResponse(w *bufio.Writer, r *request) {
	seq := 0
	var buf []byte
	// event writes one typed event; ok is false once the client is gone.
	event := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		data, _ := json.Marshal(fields)
		buf = append(append(append(append(append(buf[:0], "event: "...), typ...), "\ndata: "...), data...), "\n\n"...)
		if d := r.faults.netDelay(); d > 0 {
			time.Sleep(d)
		}
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return w.Flush() == nil
	}
	inProgress := r.response("in_progress", nil, nil)
	if !event("response.created", map[string]any{"response": inProgress}) || !event("response.in_progress", map[string]any{"response": inProgress}) {
		r.src.abort()
		return
	}
	var thinking, text []byte
	out := 0 // the output index of the item being written
	msgID := "msg_" + r.id[len("resp_"):]
	rsID := "rs_" + r.id[len("resp_"):]
	sent, ok := 0, true
	var tok []byte
	for sent < r.ans.tokens {
		var n int
		n, ok = r.src.wait(sent)
		if !ok {
			return // aborted or shutting down: end without response.completed
		}
		for ; sent < n; sent++ {
			if !r.tokenFaults(sent) {
				return
			}
			var good bool
			switch {
			case sent == 0 && r.ans.think > 0:
				good = event("response.output_item.added", map[string]any{"output_index": out, "item": r.reasoningItem("", "in_progress")})
			case sent == r.ans.think:
				if r.ans.think > 0 {
					good = event("response.reasoning_text.done", map[string]any{"item_id": rsID, "output_index": out, "content_index": 0, "text": string(thinking)}) &&
						event("response.output_item.done", map[string]any{"output_index": out, "item": r.reasoningItem(string(thinking), "completed")})
					out++
				} else {
					good = true
				}
				good = good && event("response.output_item.added", map[string]any{"output_index": out, "item": r.messageItem("", "in_progress")}) &&
					event("response.content_part.added", map[string]any{"item_id": msgID, "output_index": out, "content_index": 0, "part": outputText("")})
			default:
				good = true
			}
			tok = r.ans.token(tok[:0], sent)
			if r.ans.thinking(sent) {
				thinking = append(thinking, tok...)
				good = good && event("response.reasoning_text.delta", map[string]any{"item_id": rsID, "output_index": out, "content_index": 0, "delta": string(tok)})
			} else {
				text = append(text, tok...)
				good = good && event("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": out, "content_index": 0, "delta": string(tok), "logprobs": []any{}})
			}
			if !good {
				r.src.abort()
				return
			}
			if sent == 0 && r.timing {
				r.firstOut = time.Now()
			}
		}
	}
	s.recordFinish(r)
	t := string(text)
	event("response.output_text.done", map[string]any{"item_id": msgID, "output_index": out, "content_index": 0, "text": t, "logprobs": []any{}})
	event("response.content_part.done", map[string]any{"item_id": msgID, "output_index": out, "content_index": 0, "part": outputText(t)})
	event("response.output_item.done", map[string]any{"output_index": out, "item": r.messageItem(t, "completed")})
	var th *string
	if r.ans.think > 0 {
		s := string(thinking)
		th = &s
	}
	status := r.finalStatus()
	final := map[string]any{"response": r.response(status, th, &t)}
	if r.timing && !r.firstOut.IsZero() {
		final["sim_timing"] = json.RawMessage(`{"ttft_us":` + strconv.FormatInt(r.firstOut.Sub(r.received).Microseconds(), 10) + `}`)
	}
	event("response."+status, final)
}

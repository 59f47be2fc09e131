package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/openai"
)

// TestResponsesStream: a reasoning model's Responses stream has OpenAI's
// event sequence (numbered, the reasoning item before the message), the
// thinking takes its tokens' time before the first answer token, and
// response.completed's usage counts the reasoning tokens apart.
func TestResponsesStream(t *testing.T) {
	cfg := fixedConfig(20*time.Millisecond, 5*time.Millisecond)
	cfg.Output.ReasoningTokens = 6
	url, _ := startSim(t, cfg)
	body := `{"model":"sim-model","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Why cache?"}]}],"stream":true,"max_output_tokens":16,"ignore_eos":true}`
	resp, evs, err := streamRequest(t, url, "/v1/responses", body, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	var types []string
	ta := openai.Tally{Responses: true, TextLimit: 1 << 10}
	for i, ev := range evs {
		var v struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(ev.data), &v); err != nil || v.Seq != i {
			t.Fatalf("event %d %s: %v, sequence %d", i, ev.data, err, v.Seq)
		}
		types = append(types, v.Type)
		ta.Add([]byte(ev.data), ev.at)
	}
	want := "response.created response.in_progress response.output_item.added response.reasoning_text.delta"
	if got := strings.Join(types, " "); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "response.output_text.done response.content_part.done response.output_item.done response.incomplete") {
		t.Errorf("event types: %s", got)
	}
	if ta.ReasoningEvents != 6 || ta.ContentEvents != 16 || ta.Finish != "length" || ta.Usage.CompletionTokens != 16 || ta.Usage.CompletionTokensDetails.ReasoningTokens != 6 {
		t.Errorf("tally %+v", ta)
	}
	// Six tokens of thinking at 5 ms each come before the first answer
	// token (a scheduler's jitter aside).
	if d := ta.ReasoningTime(); d < 25*time.Millisecond || d > 60*time.Millisecond {
		t.Errorf("reasoning time %v, want about 30 ms", d)
	}
	var last struct{ Response openai.Response }
	if err := json.Unmarshal([]byte(evs[len(evs)-1].data), &last); err != nil || len(last.Response.Output) != 2 || last.Response.OutputText() != string(ta.Text) {
		t.Errorf("final response %+v (%v), streamed text %q", last.Response, err, ta.Text)
	}
}

func TestResponsesWholeAndErrors(t *testing.T) {
	cfg := fixedConfig(0, 0)
	cfg.Output.ReasoningTokens = 3
	cfg.Output.ReasoningField = "reasoning"
	url, _ := startSim(t, cfg)
	post := func(path, body string) (int, []byte) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b
	}
	code, b := post("/v1/responses", `{"model":"sim-model","input":"hello","max_output_tokens":200}`)
	var r openai.Response
	if err := json.Unmarshal(b, &r); code != 200 || err != nil || r.Object != "response" || r.Status != "completed" || r.OutputText() == "" || r.Output[0].Type != "reasoning" ||
		r.Usage.OutputTokensDetails.ReasoningTokens != 3 || r.Usage.InputTokens == 0 {
		t.Errorf("whole: %d %s", code, b)
	}
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{"model":"sim-model","input":"x","previous_response_id":"resp_gone"}`, 404},
		{`{"model":"sim-model","input":42}`, 400},
		{`{"model":"sim-model","input":[{"type":"telepathy"}]}`, 400},
		{`{"model":"sim-model"}`, 400},
		{`{"model":"other","input":"x"}`, 404},
	} {
		if code, b := post("/v1/responses", tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.body, code, b, tc.code)
		}
	}
	// A chat answer names its thinking as configured, apart from the content.
	code, b = post("/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`)
	var c openai.ChatResponse
	if err := json.Unmarshal(b, &c); code != 200 || err != nil || c.Choices[0].Message.Reasoning == "" || c.Choices[0].Message.ReasoningContent != "" || c.Choices[0].Message.Content == "" {
		t.Errorf("chat whole: %d %s", code, b)
	}
	_, evs, _ := streamRequest(t, url, "/v1/chat/completions", chatBody(`,"max_tokens":8,"ignore_eos":true`), nil)
	ta := openai.Tally{}
	for _, ev := range evs {
		ta.Add([]byte(ev.data), ev.at)
	}
	if ta.ReasoningEvents != 3 || ta.ContentEvents != 8 || !strings.Contains(evs[1].data, `"reasoning":"`) {
		t.Errorf("chat stream: %+v; second event %s", ta, evs[1].data)
	}
}

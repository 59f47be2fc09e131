package proxy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/llamatest"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/policy"
)

// llamaCountBodies are chat requests of many shapes: turns of every role,
// short and long, unicode, content parts, tools.
func llamaCountBodies() []string {
	msg := func(role, content string) string {
		b, _ := json.Marshal(map[string]string{"role": role, "content": content})
		return string(b)
	}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog near the riverbank. ", 40)
	tool := `{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	tool2 := `{"type":"function","function":{"name":"get_time","description":"Local time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}`
	sets := [][]string{
		{msg("user", "hi")},
		{msg("user", "What is the capital of France?")},
		{msg("system", "You are terse."), msg("user", "Name three colours.")},
		{msg("system", "You are terse."), msg("user", "Hello"), msg("assistant", "Hi! How can I help?"), msg("user", "Tell me a joke.")},
		{msg("user", long)},
		{msg("system", long), msg("user", "Summarise the above.")},
		{msg("user", "Ünïcödé: 東京タワー, Москва, naïve café, emoji 🚀🎉 and ∑∫√ math")},
		{msg("user", "code:\n```go\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n```\n\n\n  indented\ttabs")},
		{msg("system", ""), msg("user", "an empty system message before me")},
		{msg("developer", "Answer in French."), msg("user", "Good morning")},
		{msg("user", "a"), msg("assistant", "b"), msg("user", "c"), msg("assistant", "d"), msg("user", "e"), msg("assistant", "f"), msg("user", "g")},
		{`{"role":"user","content":[{"type":"text","text":"content as parts"},{"type":"text","text":" and a second part"}]}`},
		{msg("user", "<|im_start|> markers typed by a user <|im_end|>")},
		{msg("user", strings.Repeat("ab", 300))},
		{msg("user", "numbers 1234567890 3.14159 -42 1e10")},
		{msg("system", "Tools may help."), msg("user", "weather in Paris?")},
	}
	var out []string
	for i, s := range sets {
		body := `{"model":"m","max_tokens":1,"messages":[` + strings.Join(s, ",") + `]`
		switch i {
		case 1:
			body += `,"tools":[` + tool + `]`
		case 15:
			body += `,"tools":[` + tool + `,` + tool2 + `],"tool_choice":"auto"`
		}
		out = append(out, body+`}`)
	}
	// Two of the same with and without tools, and streamed: the count
	// does not depend on how the answer is sent.
	out = append(out,
		`{"model":"m","max_tokens":1,"tools":[`+tool+`],"messages":[`+msg("user", "weather in Rome?")+`]}`,
		`{"model":"m","max_tokens":1,"messages":[`+msg("user", "weather in Rome?")+`]}`,
		`{"model":"m","max_tokens":1,"temperature":0.5,"messages":[`+msg("user", "sampling options do not count")+`]}`,
		`{"model":"m","max_tokens":1,"stream":false,"response_format":{"type":"text"},"messages":[`+msg("assistant", "an assistant turn alone")+`]}`,
	)
	return out
}

// TestLlamaBackendCountIsExact: with tokenizer backend in front of the
// real llama.cpp server, the gateway's count of 20 chat requests of
// different shapes is the server's own usage.prompt_tokens, by its
// input_tokens form, learned on the first request; the older form
// (/apply-template, then /tokenize) gives the same counts.
func TestLlamaBackendCountIsExact(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 2, Context: 8192})
	cfg := testConfig(srv.URL)
	cfg.Policy = policy.Config{Tokenizer: policy.TokenizerBackend}
	cfg.Shaping.Global.MaxTokens = 1 << 30
	gw := startGateway(t, cfg)
	b := gw.state.Load().pools["p"].backends[0]
	bodies := llamaCountBodies()
	if len(bodies) != 20 {
		t.Fatalf("%d bodies", len(bodies))
	}
	for i, body := range bodies {
		counted, served := countedVsServed(t, gw, "/v1/chat/completions", body)
		if counted != served || served == 0 {
			t.Errorf("request %d: the gateway counted %d, llama.cpp %d: %.200s", i, counted, served, body)
		}
		t.Logf("request %d: %d prompt tokens", i, served)
		in := policy.ExactInput{Body: []byte(body)}
		if n, err := b.countBy(formApplyTemplate, "m", in, 10e9); err != nil || n != served {
			t.Errorf("request %d: /apply-template and /tokenize counted %d (%v), llama.cpp %d", i, n, err, served)
		}
	}
	if f := countForm(b.counts.form.Load()); f != formInputTokens || b.counts.by[formInputTokens].Load() != 20 || b.counts.by[formNone].Load() != 0 {
		t.Errorf("form %s: %d by input_tokens, %d estimated", f, b.counts.by[formInputTokens].Load(), b.counts.by[formNone].Load())
	}
}

// TestLlamaResponsesCutInPairs: llama.cpp says completed of a Responses
// answer that max_output_tokens cut; the mirror's pairs count both arms
// truncated, streamed or not, and a cap the gateway's policy set as the
// policy's.
func TestLlamaResponsesCutInPairs(t *testing.T) {
	t.Parallel()
	srv := llamatest.Start(t, llamatest.Options{Parallel: 2})
	cfg := mirrorConfig(srv.URL, srv.URL)
	cfg.Mirror.Record.Recent = 10
	gw := startGateway(t, cfg)
	for i := range 4 {
		body := fmt.Sprintf(`{"model":"m","max_output_tokens":8,"stream":%v,"input":"Tell me a long story, number %d."}`, i%2 == 0, i)
		status, _, resp := post(t, gw.URL, "/v1/responses", body)
		if status != 200 || !strings.Contains(resp, `"status":"completed"`) {
			t.Fatalf("%d %s", status, resp)
		}
	}
	for _, p := range pairStats(t, gw, 4).Pairs {
		for name, a := range map[string]mirror.Arm{"primary": p.Primary, "candidate": p.Candidate} {
			if !a.Truncated || a.LengthByPolicy || a.OutputTokens != 8 {
				t.Errorf("stream %v: the %s's answer (status %d, finish %q, %d tokens) truncated %v, by policy %v",
					p.Stream, name, a.Status, a.Finish, a.OutputTokens, a.Truncated, a.LengthByPolicy)
			}
		}
	}
	// The policy caps the output at 5: the cut is the policy's.
	cfg.Policy = policy.Config{Limits: policy.Limits{MaxOutputTokens: 5}}
	if err := gw.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	status, h, resp := post(t, gw.URL, "/v1/responses", `{"model":"m","max_output_tokens":8,"input":"Another story."}`)
	if clamped, _ := strconv.Atoi(h.Get("X-Infergate-Max-Tokens-Clamped")); status != 200 || clamped != 5 {
		t.Fatalf("%d clamped %q: %s", status, h.Get("X-Infergate-Max-Tokens-Clamped"), resp)
	}
	s := pairStats(t, gw, 5)
	last := s.Pairs[len(s.Pairs)-1]
	if pr, c := last.Primary, last.Candidate; !pr.Truncated || !pr.LengthByPolicy || !c.Truncated || !c.LengthByPolicy || pr.OutputTokens != 5 {
		t.Errorf("at the policy's cap: primary %d tokens truncated %v by policy %v, candidate %d %v %v",
			pr.OutputTokens, pr.Truncated, pr.LengthByPolicy, c.OutputTokens, c.Truncated, c.LengthByPolicy)
	}
}

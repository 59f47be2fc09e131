package llamatest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The engine behaves as ENGINES.md says and the fixes elsewhere assume:
// answers are valid UTF-8 (the model never samples a byte-fallback
// token), run to max_tokens, report usage with cached tokens and timings,
// and the server closes a connection after a streamed answer although its
// headers offer keep-alive.
func TestEngineFacts(t *testing.T) {
	s := Start(t, Options{Parallel: 2})

	body := `{"model":"x","max_tokens":48,"messages":[{"role":"user","content":"Tell me about the sea."}]}`
	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Timings struct {
			PromptN    *int `json:"prompt_n"`
			PredictedN int  `json:"predicted_n"`
		} `json:"timings"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if len(r.Choices) != 1 || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 48 {
		t.Errorf("want 48 tokens ending at the cap, got %+v", r)
	}
	if c := r.Choices[0].Message.Content; !utf8.ValidString(c) || c == "" {
		t.Errorf("content %q: empty or invalid UTF-8", c)
	}
	if r.Usage.PromptTokens < 5 || r.Usage.PromptTokensDetails.CachedTokens == nil || r.Timings.PromptN == nil {
		t.Errorf("usage or timings missing: %s", raw)
	}

	// A streamed answer on a raw connection: after it, the server closes.
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream := `{"model":"x","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.Addr, len(stream), stream)
	br := bufio.NewReader(conn)
	sresp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	events, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if !strings.Contains(string(events), "data: [DONE]") {
		t.Fatalf("stream did not end with [DONE]: %s", events)
	}
	if ka := sresp.Header.Get("Keep-Alive"); !strings.Contains(ka, "timeout=") {
		t.Logf("Keep-Alive header now %q", ka)
	}
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := br.ReadByte(); err == nil {
		t.Logf("the server kept the connection open after a stream (read %q): its habit changed, see ENGINES.md", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Logf("the server kept the connection open after a stream: its habit changed, see ENGINES.md")
	}
}

func TestStartN(t *testing.T) {
	servers := StartN(t, 2, Options{Variant: "q4_0"})
	if servers[0].Addr == servers[1].Addr {
		t.Fatalf("two servers on one address %s", servers[0].Addr)
	}
	for _, s := range servers {
		resp, err := http.Get(s.URL + "/props")
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			TotalSlots int `json:"total_slots"`
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || p.TotalSlots != 1 {
			t.Errorf("%s /props: total_slots %d, %v", s.Addr, p.TotalSlots, err)
		}
	}
}

// slotsBusy counts the slots /slots reports processing.
func slotsBusy(t *testing.T, s *Server) int {
	t.Helper()
	resp, err := http.Get(s.URL + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		t.Fatalf("/slots: %v", err)
	}
	n := 0
	for _, sl := range slots {
		if sl.IsProcessing {
			n++
		}
	}
	return n
}

// TestClientCloseFreesSlot: what a gateway's preemption before the first
// byte relies on: a client that closes its connection before its first
// token gets its slot freed (/slots shows it idle), and how soon. A
// stream in its prompt's prefill: llama-server notices a closed client by
// polling it every HTTP_POLLING_SECONDS (1 s, server-context.cpp) while
// it waits for results, and cancels the task between batches, so the
// slot frees within about a second plus the batch in flight (-b 256
// here), not at vLLM's next step; held to 2.5 s (1.19 s measured). A
// whole (non-streamed) answer: 3.21.1 does not cancel it for a client
// that left but generates it to its end (599 of 600 tokens, no "cancel
// task" in its log; slot idle 2.97 s after the close), so a gateway that
// preempts a non-streamed request frees nothing on llama.cpp until then;
// the test holds it to the generation's length.
func TestClientCloseFreesSlot(t *testing.T) {
	s := Start(t, Options{Predict: 4096, Context: 8192, Args: []string{"-b", "256", "-ub", "256"}})
	long := strings.Repeat("The sea is wide and the ships are slow. ", 150) // ~1,500 tokens of prefill
	tests := []struct {
		name, body string
		bound      time.Duration
	}{
		{"stream in prefill", fmt.Sprintf(`{"model":"x","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":%q}]}`, long), 2500 * time.Millisecond},
		// 600 tokens: a few seconds of generation, the longest it may hold the slot.
		{"whole answer mid-generation", `{"model":"x","max_tokens":600,"messages":[{"role":"user","content":"Tell me about the sea."}]}`, 15 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.Addr, len(tc.body), tc.body)
			deadline := time.Now().Add(10 * time.Second)
			for slotsBusy(t, s) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the request never took a slot")
				}
				time.Sleep(2 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // well into the prefill, or the generation
			// Headers (and a stream's role chunk) may be out; no token is.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			got, _ := io.ReadAll(conn)
			if strings.Contains(string(got), `"content":"`) && !strings.Contains(string(got), `"content":""`) || strings.Contains(string(got), `"choices"`) && !strings.Contains(string(got), "data:") {
				t.Fatalf("a token reached the client before it closed; the prompt prefilled too fast to test this: %.300s", got)
			}
			closed := time.Now()
			conn.Close()
			var freed time.Duration
			for {
				if slotsBusy(t, s) == 0 {
					freed = time.Since(closed)
					break
				}
				if time.Since(closed) > tc.bound {
					t.Fatalf("%v after the client closed, its slot is still processing", tc.bound)
				}
				time.Sleep(2 * time.Millisecond)
			}
			t.Logf("%s: slot idle %v after the client closed (vLLM frees at its next step: the 100 ms target)", tc.name, freed)
		})
	}
}

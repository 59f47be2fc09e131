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
// byte relies on. A client that closes its connection before it has
// received anything (a stream still in its prompt's prefill; a whole
// answer mid-generation) gets its slot freed: /slots shows it idle. The
// time it takes is logged: llama-server notices a closed client by
// polling it every HTTP_POLLING_SECONDS (1 s in server-context.cpp) while
// it waits for results, so up to about a second, not vLLM's immediate
// abort; the test holds it to that bound (1.5 s with the batch in flight).
func TestClientCloseFreesSlot(t *testing.T) {
	s := Start(t, Options{Predict: 4096, Context: 8192})
	long := strings.Repeat("The sea is wide and the ships are slow. ", 150) // ~1,500 tokens of prefill
	tests := []struct {
		name, body string
	}{
		{"stream in prefill", fmt.Sprintf(`{"model":"x","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":%q}]}`, long)},
		{"whole answer mid-generation", `{"model":"x","max_tokens":4000,"messages":[{"role":"user","content":"Tell me about the sea."}]}`},
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
			// Nothing has reached the client: the first byte of a stream
			// comes with its first token, a whole answer at its end.
			_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
			if n, _ := conn.Read(make([]byte, 1)); n > 0 {
				t.Fatal("the client got a byte before it closed; the prompt prefilled too fast to test this")
			}
			closed := time.Now()
			conn.Close()
			var freed time.Duration
			for {
				if slotsBusy(t, s) == 0 {
					freed = time.Since(closed)
					break
				}
				if time.Since(closed) > 5*time.Second {
					t.Fatal("5 s after the client closed, its slot is still processing")
				}
				time.Sleep(2 * time.Millisecond)
			}
			t.Logf("%s: slot idle %v after the client closed (vLLM-like target: 100ms; llama-server polls closed clients every 1 s)", tc.name, freed)
			if freed > 1500*time.Millisecond {
				t.Errorf("slot freed %v after the client closed, want within llama-server's 1 s poll (1.5 s)", freed)
			}
		})
	}
}

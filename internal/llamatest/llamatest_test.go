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

// firstTokenAfter is how long a one-token stream waits for its token
// (its own prefill and anything ahead of it in the one slot).
func firstTokenAfter(t *testing.T, s *Server) time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"x","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "data: [DONE]") {
		t.Fatalf("the next request did not complete: %.300s", b)
	}
	return time.Since(start)
}

// TestClientCloseFreesSlot: what a gateway's preemption before the first
// byte relies on: a client that closes its connection before its first
// token gets its slot freed, and how soon: the next request (one slot)
// gets its token that much later than on an idle server. The server is
// not polled meanwhile: llama-server notices a closed client only when
// its wait for results times out (HTTP_POLLING_SECONDS, 1 s), and other
// requests' results (a /slots or /metrics poll every few ms) keep
// restarting that wait, so a polled server kept a closed plain request
// generating to its end (6.3 s for 1,000 tokens). A stream in its
// prompt's prefill, and a plain answer mid-generation, are both let go
// within about a second (not at vLLM's next step: the 100 ms target is
// the simulator's); held to 2.5 s.
func TestClientCloseFreesSlot(t *testing.T) {
	s := Start(t, Options{Predict: 4096, Context: 8192, Args: []string{"-b", "256", "-ub", "256"}})
	base := firstTokenAfter(t, s)
	long := strings.Repeat("The sea is wide and the ships are slow. ", 150) // ~1,500 tokens of prefill
	tests := []struct {
		name, body string
	}{
		{"stream in prefill", fmt.Sprintf(`{"model":"x","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":%q}]}`, long)},
		{"whole answer mid-generation", `{"model":"x","max_tokens":2000,"messages":[{"role":"user","content":"Tell me about the sea."}]}`},
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
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // well into the prefill, or the generation
			// Headers (and a stream's role chunk) may be out; no token is.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			got, _ := io.ReadAll(conn)
			if strings.Contains(string(got), `"content":"`) && !strings.Contains(string(got), `"content":""`) || strings.Contains(string(got), `"choices"`) && !strings.Contains(string(got), "data:") {
				t.Fatalf("a token reached the client before it closed; the prompt prefilled too fast to test this: %.300s", got)
			}
			conn.Close()
			freed := firstTokenAfter(t, s) - base
			t.Logf("%s: the slot was let go about %v after the client closed (the next request's token %v later than on an idle server)", tc.name, freed.Round(time.Millisecond), freed.Round(time.Millisecond))
			if freed > 2500*time.Millisecond {
				t.Errorf("the slot was held %v after the client closed, want within llama-server's 1 s poll (2.5 s)", freed)
			}
		})
	}
}

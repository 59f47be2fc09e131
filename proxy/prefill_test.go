package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/openai"
	"github.com/infergate/infergate/sim/simtest"
)

// longBody is a chat request of about n×11 prompt tokens (n×43 bytes of
// text, at the gateway's 4 bytes a token); shortBody one of a few.
func longBody(n int) string {
	content, _ := json.Marshal(strings.Repeat("Summarise this paragraph of a long report. ", n))
	return `{"model":"m","messages":[{"role":"user","content":` + string(content) + `}]}`
}

func shortBody(i int) string {
	return `{"model":"m","messages":[{"role":"user","content":"short question ` + string(rune('a'+i)) + `"}]}`
}

// With selection load, a backend busy prefilling one long prompt weighs
// more than one holding two short requests: while a long prompt is in
// flight on one backend, every short request goes to the other, though
// counting requests alone would send the third short one to the backend
// with the long prompt (one request against two).
func TestLoadCountsPromptTokensToPrefill(t *testing.T) {
	t.Parallel()
	a, b := newVLLMBackend(t), newVLLMBackend(t)
	for _, be := range []*vllmBackend{a, b} {
		be.delay.Store(int64(1500 * time.Millisecond))
	}
	gw := routingGateway(t, LoadPolicy, []*vllmBackend{a, b}, nil)
	inFlight := func() int64 { return a.inFlight.Load() + b.inFlight.Load() }
	var wg sync.WaitGroup
	send := func(body string) {
		n := inFlight()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, got := post(t, gw.URL, "/v1/chat/completions", body); code != 200 {
				t.Errorf("status %d %s", code, got)
			}
		}()
		waitFor(t, 3*time.Second, "the request in flight", func() bool { return inFlight() > n })
	}
	long := longBody(750) // about 8,000 tokens
	send(long)
	holder, other := a, b
	if b.inFlight.Load() == 1 {
		holder, other = b, a
	}
	st := backendStates(gw)[holder.URL]
	if st.Load == nil || st.Load.PrefillTokens < float64(len(long)/4-10) {
		t.Errorf("backend with the long prompt: %+v; want about %d prompt tokens to prefill", st.Load, len(long)/4)
	}
	for i := range 3 {
		send(shortBody(i))
	}
	wg.Wait()
	holder.mu.Lock()
	onHolder := len(holder.prompts)
	holder.mu.Unlock()
	other.mu.Lock()
	onOther := len(other.prompts)
	other.mu.Unlock()
	if onHolder != 1 || onOther != 3 {
		t.Errorf("the backend prefilling the long prompt got %d requests, the other %d; want 1 and the 3 short ones", onHolder, onOther)
	}
	for name, s := range backendStates(gw) {
		if s.Load.PrefillTokens != 0 {
			t.Errorf("%s: %v prompt tokens to prefill after every request ended, want 0", name, s.Load.PrefillTokens)
		}
	}
}

// A stream's prompt stops counting at its first token, while the stream
// goes on; a plain answer's at its end.
func TestPrefillEndsAtTheFirstToken(t *testing.T) {
	t.Parallel()
	cfg := simtest.Fixed(0, 50*time.Millisecond)
	cfg.Model = "m"
	s := simtest.Start(t, cfg)
	c := testConfig(s.URL)
	p := c.Pools["p"]
	p.Selection = LoadPolicy
	c.Pools["p"] = p
	gw := startGateway(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := strings.Replace(longBody(300), `"model":"m",`, `"model":"m","stream":true,"max_tokens":200,"ignore_eos":true,`, 1)
	req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	er := openai.NewEventReader(resp.Body, nil, 1<<20)
	for {
		ev, err := er.Next()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if strings.Contains(string(openai.EventData(ev)), `"content":"`) {
			break
		}
	}
	be := gw.state.Load().pools["p"].backends[0]
	waitFor(t, 2*time.Second, "the prompt's tokens given back at the first token", func() bool { return be.prefilling.Load() == 0 })
	if be.Outstanding() != 1 {
		t.Errorf("outstanding %d while the stream goes on, want 1", be.Outstanding())
	}
}

// A client that leaves before its first token gives its prompt's tokens
// back with its slot: a backend's count of prompt tokens to prefill never
// keeps the requests of clients that are gone.
func TestPrefillGivenBackWhenTheClientLeaves(t *testing.T) {
	t.Parallel()
	cfg := simtest.Fixed(5*time.Second, 50*time.Millisecond)
	cfg.Model = "m"
	s := simtest.Start(t, cfg)
	c := testConfig(s.URL)
	p := c.Pools["p"]
	p.Selection = LoadPolicy
	c.Pools["p"] = p
	gw := startGateway(t, c)
	be := gw.state.Load().pools["p"].backends[0]
	for _, stream := range []string{`"stream":true,`, ``} {
		ctx, cancel := context.WithCancel(context.Background())
		body := strings.Replace(longBody(300), `"model":"m",`, `"model":"m",`+stream, 1)
		req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitFor(t, 3*time.Second, "the prompt counted as prefilling", func() bool { return be.prefilling.Load() > 0 })
		cancel()
		<-done
		waitFor(t, 3*time.Second, "the prompt's tokens given back when its client left ("+stream+")", func() bool {
			return be.prefilling.Load() == 0 && be.Outstanding() == 0
		})
	}
}

// A backend's cost counts its prompt tokens to prefill in requests' worth
// (load.prefill_tokens each): two backends with as many requests, one
// prefilling three 8,000-token prompts and one three 50-token ones, and
// every pick goes to the second. Without the tokens, picks would split.
func TestCheapestWeighsPrefillTokens(t *testing.T) {
	t.Parallel()
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
	pc := cfg.Pools["p"]
	pc.Selection = LoadPolicy
	pc.Load.Interval, pc.Load.StaleAfter = time.Hour, time.Hour
	cfg.Pools["p"] = pc
	cfg.Defaults()
	p, err := newPool("p", cfg.Pools["p"], time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	busy, light := p.backends[0], p.backends[1]
	for _, tc := range []struct {
		name              string
		busyTok, lightTok int64
		wantLight         int // -1: split, each at least 5
	}{
		{"long prompts against short ones", 3 * 8000, 3 * 50, 20},
		{"equal prompts", 150, 150, -1},
	} {
		busy.outstanding.Store(3)
		light.outstanding.Store(3)
		busy.prefilling.Store(tc.busyTok)
		light.prefilling.Store(tc.lightTok)
		got := 0
		for range 20 {
			b, permit, _, _, err := p.pick(nil, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			b.settle(permit, true)
			if b == light {
				got++
			}
		}
		if got != tc.wantLight && (tc.wantLight >= 0 || got < 5 || got > 15) {
			t.Errorf("%s: %d of 20 picks to the lighter backend, want %d", tc.name, got, tc.wantLight)
		}
	}
}

// uncached takes off the share of a prompt's prefix blocks the index
// expects the backend to hold.
func TestUncached(t *testing.T) {
	t.Parallel()
	k := &affinity.Key{Blocks: 8}
	for _, tc := range []struct {
		k      *affinity.Key
		blocks int
		want   int64
	}{{nil, 0, 1000}, {k, 0, 1000}, {k, 2, 750}, {k, 8, 0}, {k, 9, 0}, {&affinity.Key{}, 3, 1000}} {
		if got := uncached(1000, tc.k, tc.blocks); got != tc.want {
			t.Errorf("uncached(1000, %+v, %d) = %d, want %d", tc.k, tc.blocks, got, tc.want)
		}
	}
}

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/policy"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// The whole-request benchmark: what one request costs the gateway end to
// end, from the client's bytes in to the last byte out, with the
// gateway's defaults (metrics on, no request log, no spans). The client
// reaches the gateway over an in-memory listener; the backend is a
// minimal HTTP/1.1 responder on loopback that answers every request with
// the same pre-rendered bytes, so nearly all the time and every
// allocation counted is the gateway's (the fasthttp client and the
// responder allocate nothing per request once warm).

// benchEvents is the number of content events of a streamed answer.
const benchEvents = 20

// rawBackend serves resp to every request on a loopback port until the
// test ends.
func rawBackend(tb testing.TB, resp []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				var req fasthttp.Request
				for {
					if err := req.Read(br); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// streamResponseBytes is a chunked SSE answer of n events, vLLM-like.
func streamResponseBytes(n int) []byte {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	put := func(ev string) { fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev) }
	for i := range n {
		put(chunk("tok" + strconv.Itoa(i)))
	}
	put(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+3) + "}}\n\n")
	put(doneEvent)
	b.WriteString("0\r\n\r\n")
	return []byte(b.String())
}

const plainAnswer = `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func plainResponseBytes() []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(plainAnswer)) + "\r\n\r\n" + plainAnswer)
}

// benchGateway is a gateway in front of a raw backend, and a client that
// reaches it in memory.
type benchGateway struct {
	g   *Gateway
	hc  *fasthttp.HostClient
	req *fasthttp.Request
	res *fasthttp.Response
}

func newBenchGateway(tb testing.TB, stream bool) *benchGateway {
	return newBenchGatewayWith(tb, stream, nil, "")
}

// newBenchGatewayWith is newBenchGateway with the config changed by
// setup and the request body, when not empty, replaced.
func newBenchGatewayWith(tb testing.TB, stream bool, setup func(*Config), reqBody string) *benchGateway {
	tb.Helper()
	return newBenchGatewayLogging(tb, stream, setup, reqBody, slog.New(slog.DiscardHandler))
}

// newBenchGatewayLogging is newBenchGatewayWith logging to log.
func newBenchGatewayLogging(tb testing.TB, stream bool, setup func(*Config), reqBody string, log *slog.Logger) *benchGateway {
	tb.Helper()
	resp, body := plainResponseBytes(), plainBody
	if stream {
		resp, body = streamResponseBytes(benchEvents), streamBody
	}
	if reqBody != "" {
		body = reqBody
	}
	cfg := testConfig(rawBackend(tb, resp))
	if setup != nil {
		setup(&cfg)
	}
	g, err := New(cfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	go g.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g.Shutdown(ctx)
		ln.Close()
	})
	bg := &benchGateway{g: g, req: fasthttp.AcquireRequest(), res: fasthttp.AcquireResponse(),
		hc: &fasthttp.HostClient{Addr: "gateway", Dial: func(string) (net.Conn, error) { return ln.Dial() }, MaxConns: 1}}
	bg.req.Header.SetMethod("POST")
	bg.req.SetRequestURI("http://gateway/v1/chat/completions")
	bg.req.Header.SetContentType("application/json")
	bg.req.SetBodyString(body)
	return bg
}

// do sends one request and checks its answer.
func (bg *benchGateway) do(tb testing.TB) {
	if err := bg.hc.Do(bg.req, bg.res); err != nil {
		tb.Fatal(err)
	}
	if bg.res.StatusCode() != 200 || len(bg.res.Body()) == 0 {
		tb.Fatalf("status %d, body %q", bg.res.StatusCode(), bg.res.Body())
	}
}

// BenchmarkGatewayPolicy is the plain request with the policy on: auth
// required (100 tenants), limits on input (cl100k_base, drop_oldest) and
// output, and a 4 KiB chat body. none: the same body without a policy,
// the baseline; pass: nothing to change, the bytes go as received; clamp:
// max_tokens above the cap, the body rewritten.
//
//	go test ./proxy -run '^$' -bench BenchmarkGatewayPolicy -benchmem
func BenchmarkGatewayPolicy(b *testing.B) {
	var msgs strings.Builder
	msgs.WriteString(`{"role":"system","content":"You are a helpful assistant."}`)
	for i := 0; msgs.Len() < 4000; i++ {
		fmt.Fprintf(&msgs, `,{"role":"user","content":"question %d about the queue, the batch and the memory of the model"}`, i)
	}
	for _, tc := range []struct {
		name, maxTokens string
	}{{"none", "256"}, {"pass", "256"}, {"clamp", "4096"}} {
		b.Run(tc.name, func(b *testing.B) {
			body := `{"model":"m","messages":[` + msgs.String() + `],"max_tokens":` + tc.maxTokens + `}`
			bg := newBenchGatewayWith(b, false, func(c *Config) {
				if tc.name == "none" {
					return
				}
				c.Auth.Required = true
				c.Tenants = map[string]TenantConfig{}
				for i := range 100 {
					c.Tenants[fmt.Sprintf("t%d", i)] = TenantConfig{Tenant: policy.Tenant{APIKeys: []string{fmt.Sprintf("sk-bench-%03d-abcdefghij", i)}}}
				}
				c.Policy = policy.Config{Tokenizer: policy.TokenizerCL100K,
					Limits: policy.Limits{MaxInputTokens: 8192, Trim: policy.DropOldest, MaxOutputTokens: 1024}}
			}, body)
			bg.req.Header.Set("Authorization", "Bearer sk-bench-042-abcdefghij")
			for range 100 {
				bg.do(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bg.do(b)
			}
		})
	}
}

// BenchmarkGateway: go test ./proxy -run '^$' -bench BenchmarkGateway -benchmem
//
// plain-logged is plain at the default log level, info: one text line per
// request, here into io.Discard.
func BenchmarkGateway(b *testing.B) {
	for _, tc := range []struct {
		name        string
		stream, log bool
	}{{"plain", false, false}, {"stream", true, false}, {"plain-logged", false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			log := slog.New(slog.DiscardHandler)
			if tc.log {
				log = slog.New(slog.NewTextHandler(io.Discard, nil))
			}
			bg := newBenchGatewayLogging(b, tc.stream, nil, "", log)
			for range 100 { // warm the pools and the backend connection
				bg.do(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bg.do(b)
			}
		})
	}
}

// BenchmarkGatewayRouting is the plain request with a 16 KiB system
// prompt (about 4,000 tokens) through a pool of two backends, by each
// selection: what hashing the prompt, scoring the backends and recording
// the pick add to a whole request. The raw backend has no /metrics, so
// load and prefix run on the gateway's own counts, as after a failed
// scrape.
//
//	go test ./proxy -run '^$' -bench BenchmarkGatewayRouting -benchmem
func BenchmarkGatewayRouting(b *testing.B) {
	body := `{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You answer for the billing desk. ", 500) +
		`"},{"role":"user","content":"What is my balance?"}]}`
	for _, selection := range []string{LeastOutstandingPolicy, LoadPolicy, PrefixPolicy} {
		b.Run(selection, func(b *testing.B) {
			second := rawBackend(b, plainResponseBytes())
			bg := newBenchGatewayWith(b, false, func(c *Config) {
				pc := c.Pools["p"]
				pc.Selection = selection
				pc.Backends = append(pc.Backends, BackendConfig{URL: second})
				c.Pools["p"] = pc
			}, body)
			for range 100 {
				bg.do(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				bg.do(b)
			}
		})
	}
}

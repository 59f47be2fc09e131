package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/infergate/infergate/bench"
)

const probeSynopsis = `probe URL [-n 10] [--model M] [--output-tokens 16] [--no-stream] [--reuse]

Sends one small request at a time, N times, and splits each one's time like
curl's -w timings: DNS, TCP connect, TLS, the server's wait (request
written → first byte, which includes one round trip), first byte → first
token, and the rest; then the medians. It tells at a glance whether the
delay sits outside the model. URL is a base URL or a full endpoint. Each
request opens its own connection unless --reuse.`

func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", probeSynopsis, stderr)
	n := fs.Int("n", 10, "requests")
	model := fs.String("model", "", "model (default: the first of GET /v1/models)")
	maxTokens := fs.Int("output-tokens", 16, "max_tokens of each request")
	noStream := fs.Bool("no-stream", false, "send stream:false")
	reuse := fs.Bool("reuse", false, "keep one connection for all requests")
	insecure := fs.Bool("insecure", false, "accept any TLS certificate")
	apiKey := fs.String("api-key", "", "bearer token (default $OPENAI_API_KEY)")
	allowPlain := fs.Bool("allow-plaintext-key", false, "send the API key over plain HTTP to a host off this machine")
	var headers stringList
	fs.Var(&headers, "H", "extra header 'Name: value' (repeatable)")
	// The URL may come before the flags.
	var url string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		url, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if url == "" && fs.NArg() > 0 {
		url = fs.Arg(0)
	}
	if url == "" {
		fs.Usage()
		return errors.New("want a URL")
	}
	if *n < 1 || *n > 10000 {
		return errors.New("-n: want 1 to 10000")
	}
	var hs [][2]string
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return fmt.Errorf("-H %q: want 'Name: value'", h)
		}
		hs = append(hs, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	auth, err := apiKeyHeader(*apiKey, *allowPlain, stderr, url)
	if err != nil {
		return err
	}
	hs = append(hs, auth...)
	cfg := bench.Config{URL: url, Workload: bench.WorkloadSpec{Endpoint: "chat"}}
	endpoint, err := cfg.Endpoint()
	if err != nil {
		return err
	}
	if *model == "" {
		if *model, err = firstModel(ctx, url, hs); err != nil {
			return err
		}
	}
	m, _ := json.Marshal(*model)
	body := fmt.Appendf(nil, `{"model":%s,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":%d,"stream":%v}`, m, *maxTokens, !*noStream)
	if cfg.Workload.Endpoint == "completions" {
		body = fmt.Appendf(nil, `{"model":%s,"prompt":"Say hello.","max_tokens":%d,"stream":%v}`, m, *maxTokens, !*noStream)
	}
	rs, err := bench.Probe(ctx, bench.ProbeConfig{URL: endpoint, Body: body, Stream: !*noStream, N: *n, Headers: hs, Reuse: *reuse, InsecureSkipVerify: *insecure})
	bench.WriteProbe(stdout, endpoint, rs)
	if err == nil && len(rs) > 0 && !slices.ContainsFunc(rs, func(r bench.ProbeResult) bool { return r.Err == nil }) {
		return fmt.Errorf("all %d requests failed (the first: %v)", len(rs), rs[0].Err)
	}
	return err
}

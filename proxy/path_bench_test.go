package proxy

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity"
	"github.com/infergate/infergate/internal/httpbody"
	"github.com/valyala/fasthttp"
)

func BenchmarkCopyRequestHeaders(b *testing.B) {
	var src fasthttp.RequestHeader
	src.SetMethod("POST")
	src.SetRequestURI("/v1/chat/completions")
	for _, kv := range [][2]string{{"Host", "gw"}, {"Content-Type", "application/json"}, {"Authorization", "Bearer x"},
		{"Connection", "keep-alive"}, {"User-Agent", "openai-python/1.0"}, {"X-Request-Id", "abc"}, {"Traceparent", "00-1-2-01"}} {
		src.Set(kv[0], kv[1])
	}
	var dst fasthttp.RequestHeader
	b.ReportAllocs()
	for range b.N {
		dst.Reset()
		copyRequestHeaders(&dst, &src, headerRules{}, nil)
	}
}

func BenchmarkPick(b *testing.B) {
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3")
	cfg.Defaults()
	p, err := newPool("p", cfg.Pools["p"], time.Second, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	now := time.Now()
	b.ReportAllocs()
	for range b.N {
		be, permit, _, _, err := p.pick(nil, now, nil)
		if err != nil {
			b.Fatal(err)
		}
		be.settle(permit, true)
	}
}

func BenchmarkChunkedBodyRead(b *testing.B) {
	// 200 events, each its own chunk, as vLLM sends them.
	var raw bytes.Buffer
	for range 200 {
		ev := chunk("hello")
		raw.WriteString(strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n")
	}
	raw.WriteString("0\r\n\r\n")
	data := raw.Bytes()
	rd := bytes.NewReader(data)
	br := bufio.NewReaderSize(rd, 4096)
	buf := make([]byte, 4096)
	var body httpbody.Reader
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for range b.N {
		rd.Reset(data)
		br.Reset(rd)
		body.Reset(br, httpbody.Chunked, -1)
		for {
			if _, err := body.Read(buf); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPickScored is a pick of selection load and prefix among four
// backends: for prefix, with 10,000 prefixes of 4,000 tokens (16 KiB)
// indexed, the request's own among them. The request's key is hashed
// before (BenchmarkHashRequest in package affinity times that).
func BenchmarkPickScored(b *testing.B) {
	for _, selection := range []string{LeastOutstandingPolicy, LoadPolicy, PrefixPolicy} {
		b.Run(selection, func(b *testing.B) {
			cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4")
			pc := cfg.Pools["p"]
			pc.Selection = selection
			pc.Load.Interval = time.Hour // no scrape during the run
			pc.Load.StaleAfter = time.Hour
			cfg.Pools["p"] = pc
			cfg.Defaults()
			p, err := newPool("p", cfg.Pools["p"], time.Second, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			keys := make([]affinity.Key, 10000)
			text := bytes.Repeat([]byte("x"), 16<<10)
			for i := range keys {
				var h affinity.Hasher
				h.Reset(&keys[i], 128, 1024)
				h.Write([]byte(strconv.Itoa(i)))
				h.Write(text)
				if p.prefix != nil {
					p.prefix.index.Add(&keys[i], i%4)
				}
			}
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				be, permit, _, _, err := p.pick(nil, now, &keys[i%len(keys)])
				if err != nil {
					b.Fatal(err)
				}
				be.settle(permit, true)
			}
		})
	}
}

package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// streamOf is a chat stream of n content events, usage and [DONE].
func streamOf(n int) []byte {
	var b strings.Builder
	b.WriteString(roleChunk)
	for i := range n {
		b.WriteString(chunk(" tok" + strings.Repeat("x", i%5)))
	}
	b.WriteString(finalChunk + usageChunk + doneChunk)
	return []byte(b.String())
}

func readOnce(p *parser, stream []byte) *Result {
	r := &Result{Sent: time.Now(), Status: 200}
	p.read(context.Background(), bytes.NewReader(stream), r, true)
	return r
}

func BenchmarkReadStream(b *testing.B) {
	stream := streamOf(200)
	p := newParser(nil, nil)
	p.flushGaps = func([]time.Duration) {}
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for range b.N {
		if r := readOnce(p, stream); !r.OK() || r.ContentEvents != 200 {
			b.Fatalf("%+v", r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200), "ns/event")
}

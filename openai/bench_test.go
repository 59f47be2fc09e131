package openai

import (
	"strings"
	"testing"
)

var benchBody = []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"` + strings.Repeat("Tell me about caches. ", 40) + `"}]}`)

func BenchmarkScanRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for range b.N {
		if _, err := ScanRequest(benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClassifyEvent(b *testing.B) {
	ev := []byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	b.ReportAllocs()
	for range b.N {
		d := EventData(ev)
		if IsDone(ev) || !HasContent(d) || HasFinishReason(d) || IsErrorChunk(d) {
			b.Fatal("misclassified")
		}
	}
}

func TestUsageOfDoesNotAllocateWithoutUsage(t *testing.T) {
	ev := []byte(`{"id":"c1","choices":[{"index":0,"delta":{"content":" hello"}}],"usage":null}`)
	if n := testing.AllocsPerRun(100, func() { UsageOf(ev); AppendContent(nil, ev[:0]) }); n != 0 {
		t.Errorf("UsageOf allocates %v times on a chunk without usage", n)
	}
}

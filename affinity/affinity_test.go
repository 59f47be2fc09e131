package affinity

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/infergate/infergate/openai"
)

func keyOf(t testing.TB, body string) *Key {
	t.Helper()
	env, err := openai.ScanRequest([]byte(body))
	if err != nil {
		t.Fatalf("scan %.80s: %v", body, err)
	}
	var k Key
	var h Hasher
	h.Reset(&k, 128, MaxBlocks)
	h.Request([]byte(body), &env)
	return &k
}

func chat(msgs ...[2]string) string {
	var m []map[string]string
	for _, x := range msgs {
		m = append(m, map[string]string{"role": x[0], "content": x[1]})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": m})
	return string(b)
}

func TestCheckpoints(t *testing.T) {
	n := 0
	for b := 1; b <= MaxBlocks; b++ {
		if checkpoint(b) {
			n++
		}
	}
	if n != MaxCheckpoints {
		t.Fatalf("%d checkpoints in %d blocks, MaxCheckpoints is %d", n, MaxBlocks, MaxCheckpoints)
	}
	for _, b := range []int{1, 8, 10, 16, 20, 32, 40, 64, 1024} {
		if !checkpoint(b) {
			t.Errorf("block %d is not a checkpoint", b)
		}
	}
	for _, b := range []int{0, 9, 11, 17, 33, 1023} {
		if checkpoint(b) {
			t.Errorf("block %d is a checkpoint", b)
		}
	}
}

// Prompts that share their start share their first checkpoints, and only
// those; the order of a message's keys and the model do not matter.
func TestKeysShareExactlyTheCommonStart(t *testing.T) {
	system := strings.Repeat("You are a careful assistant for the accounts team. ", 40) // ~2 KB
	a := keyOf(t, chat([2]string{"system", system}, [2]string{"user", "what is my balance?"}))
	b := keyOf(t, chat([2]string{"system", system}, [2]string{"user", "close my account, please, today"}))
	other := keyOf(t, chat([2]string{"system", "Another tenant. " + system}, [2]string{"user", "what is my balance?"}))
	if a.Blocks < 16 || a.Len() == 0 {
		t.Fatalf("a 2 KB prompt made %d blocks, %d checkpoints", a.Blocks, a.Len())
	}
	shared := 0
	for shared < a.Len() && shared < b.Len() && a.hash[shared] == b.hash[shared] {
		shared++
	}
	// The system message fills ~16 blocks; the question comes after.
	if got := a.BlocksAt(shared - 1); got < 12 || got > a.Blocks {
		t.Fatalf("a and b share %d checkpoints (%d blocks) of %d", shared, got, a.Blocks)
	}
	if a.First() == other.First() {
		t.Fatal("prompts that differ from their first byte share their first block")
	}
	reordered := `{"messages":[{"content":` + mustJSON(system) + `,"role":"system"},{"role":"user","content":"what is my balance?"}],"model":"other"}`
	r := keyOf(t, reordered)
	if *r != *a {
		t.Fatal("the same messages with their keys in another order, or another model, hash differently")
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Hostile prompts cost at most the blocks' worth of hashing and no
// allocation: a megabyte of text, ten thousand messages, invalid UTF-8
// and escapes.
func TestHostilePromptsAreBounded(t *testing.T) {
	var many strings.Builder
	many.WriteString(`{"model":"m","messages":[`)
	for i := range 10000 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"role":"user","content":"m%d"}`, i)
	}
	many.WriteString(`]}`)
	bodies := []string{
		`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(`\u00e9\"x`, 1<<17) + `"}]}`,
		many.String(),
		`{"model":"m","prompt":"` + strings.Repeat("é", 1<<19) + `"}`,
		`{"model":"m","messages":[{"role":7,"content":{"a":[1,2]}},null,"x",[]]}`,
	}
	for _, body := range bodies {
		bb := []byte(body)
		env, err := openai.ScanRequest(bb)
		if err != nil {
			t.Fatal(err)
		}
		var k Key
		var h Hasher
		allocs := testing.AllocsPerRun(5, func() {
			h.Reset(&k, 128, MaxBlocks)
			h.Request(bb, &env)
		})
		if allocs != 0 {
			t.Errorf("%.40s...: %v allocations", body, allocs)
		}
		if k.Blocks > MaxBlocks || k.Len() > MaxCheckpoints {
			t.Errorf("%.40s...: %d blocks, %d checkpoints", body, k.Blocks, k.Len())
		}
	}
}

func TestIndexMatchesTheLongestRecordedRun(t *testing.T) {
	ix := NewIndex(1 << 12)
	system := strings.Repeat("Shared instructions of the support desk. ", 60)
	a := keyOf(t, chat([2]string{"system", system}, [2]string{"user", "first"}))
	b := keyOf(t, chat([2]string{"system", system}, [2]string{"user", "second question, different"}))
	ix.Add(a, 2)
	var m [MaxBackends]int
	if got := ix.Match(a, 0b1111, &m); got != 1<<2 || m[2] != a.BlocksAt(a.Len()-1) {
		t.Fatalf("Match(a) = %b, matched %d; want backend 2 with %d blocks", got, m[2], a.BlocksAt(a.Len()-1))
	}
	m = [MaxBackends]int{}
	if got := ix.Match(b, 0b1111, &m); got != 1<<2 || m[2] == 0 || m[2] >= b.Blocks {
		t.Fatalf("Match(b) = %b, matched %d of %d: want part of b, on backend 2", got, m[2], b.Blocks)
	}
	m = [MaxBackends]int{}
	if got := ix.Match(a, 0b1011, &m); got != 0 {
		t.Fatalf("backend 2 not a candidate, yet Match = %b", got)
	}
}

// What one replica's index learnt, passed to another as bare hashes
// (another replica's placement), matches there as it did where it was
// learnt.
func TestAddHashesIsAddOnAnotherIndex(t *testing.T) {
	system := strings.Repeat("Instructions shared by every replica. ", 60)
	a := keyOf(t, chat([2]string{"system", system}, [2]string{"user", "turn one"}))
	here, there := NewIndex(1<<12), NewIndex(1<<12)
	here.Add(a, 3)
	there.AddHashes(slices.Clone(a.Hashes()), 3)
	var m1, m2 [MaxBackends]int
	if g1, g2 := here.Match(a, 0b1111, &m1), there.Match(a, 0b1111, &m2); g1 != g2 || m1 != m2 || g2 != 1<<3 {
		t.Fatalf("Match where learnt %b %v, where passed %b %v", g1, m1[:4], g2, m2[:4])
	}
	if len(a.Hashes()) != a.Len() || a.Hashes()[0] != a.First() {
		t.Fatalf("Hashes %d long, Len %d", len(a.Hashes()), a.Len())
	}
}

// The index is allocated once: a million distinct prefixes later it
// holds the same memory, and still finds what was added last.
func TestIndexMemoryIsBounded(t *testing.T) {
	ix := NewIndex(1 << 16)
	var k Key
	var h Hasher
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 0, 600)
	for i := range 250_000 { // four times the table
		buf = fmt.Appendf(buf[:0], `prompt %d `, i)
		h.Reset(&k, 128, MaxBlocks)
		h.Write(buf)
		for range 4 {
			h.Write([]byte(strings.Repeat("x", 128)))
		}
		ix.Add(&k, i%4)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("the heap grew by %d bytes over 250,000 prefixes (table %d bytes)", grew, ix.Bytes())
	}
	var m [MaxBackends]int
	if ix.Match(&k, ^uint64(0), &m) == 0 {
		t.Fatal("the last prefix added is not found")
	}
	if ix.Bytes() > 3<<20 {
		t.Fatalf("a 65,536-entry table takes %d bytes", ix.Bytes())
	}
}

func FuzzRequestKey(f *testing.F) {
	f.Add([]byte(chat([2]string{"system", "s"}, [2]string{"user", "u"})))
	f.Add([]byte(`{"model":"m","prompt":"abc","tools":[{"type":"function"}]}`))
	f.Add([]byte(`{"model":"m","messages":[1,{"role":null},{"content":[{"type":"text","text":"x"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := openai.ScanRequest(body)
		if err != nil {
			return
		}
		var k Key
		var h Hasher
		h.Reset(&k, 16, 64)
		h.Request(body, &env)
		if k.Blocks > 64 || k.Len() > MaxCheckpoints {
			t.Fatalf("%d blocks, %d checkpoints", k.Blocks, k.Len())
		}
		var k2 Key
		h.Reset(&k2, 16, 64)
		h.Request(body, &env)
		if k != k2 {
			t.Fatal("the same body hashed twice differs")
		}
	})
}

func BenchmarkHashRequest(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 128 << 10} {
		body := []byte(chat([2]string{"system", strings.Repeat("a", size)}, [2]string{"user", "q"}))
		env, _ := openai.ScanRequest(body)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var k Key
			var h Hasher
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for range b.N {
				h.Reset(&k, 128, MaxBlocks)
				h.Request(body, &env)
			}
		})
	}
}

package tokens

import (
	"hash/maphash"
	"sync/atomic"
)

// Counting a word at a time. The encodings' split patterns (cl100k_base's
// and o200k_base's alike) always end a piece before a space that follows an
// ASCII letter or digit: no alternative of either pattern takes a space
// after a letter or digit, and none looks past that space to decide where
// the piece before it ends. So the text can be cut before each such space
// and the pieces counted one by one, with the same result as counting the
// whole (TestChunkedCountIsExact and FuzzChunkedCount hold this against
// the library). A word's count is then the same in every text, so it is
// remembered.

// maxChunk bounds a chunk: text without a cut point for this long is
// counted in one piece, uncached.
const maxChunk = 64

// nextChunk splits s before the first space after an ASCII letter or
// digit, past its first byte.
func nextChunk(s string) (chunk, rest string) {
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' && isASCIIAlnum(s[i-1]) {
			return s[:i], s[i:]
		}
	}
	return s, ""
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// chunkCache remembers the token counts of chunks in a direct-mapped
// table of a fixed size, allocated once: a chunk's slot is picked by its
// hash, and a new chunk takes the slot over. Each slot is one cache line
// with its own lock, taken by compare-and-swap: a reader that finds the
// slot busy counts the chunk itself rather than wait. A chunk found is
// compared in full, so a count is never another chunk's.
type chunkCache struct {
	seed  maphash.Seed
	slots []cacheSlot
}

type cacheSlot struct {
	busy atomic.Uint32
	n    uint16
	len  uint8
	hash uint64
	word [cachedChunk]byte
}

const (
	cacheSlots  = 1 << 16 // 4 MiB
	cachedChunk = 40      // longer chunks are not cached
)

func newChunkCache() *chunkCache {
	return &chunkCache{seed: maphash.MakeSeed(), slots: make([]cacheSlot, cacheSlots)}
}

func (c *chunkCache) get(w string) (int, uint64, bool) {
	if len(w) > cachedChunk {
		return 0, 0, false
	}
	h := maphash.String(c.seed, w)
	s := &c.slots[h&(cacheSlots-1)]
	if !s.busy.CompareAndSwap(0, 1) {
		return 0, h, false
	}
	n, ok := int(s.n), s.hash == h && int(s.len) == len(w) && string(s.word[:len(w)]) == w
	s.busy.Store(0)
	return n, h, ok
}

func (c *chunkCache) put(w string, h uint64, n int) {
	if len(w) > cachedChunk || n > 0xffff {
		return
	}
	s := &c.slots[h&(cacheSlots-1)]
	if !s.busy.CompareAndSwap(0, 1) {
		return
	}
	s.hash, s.n, s.len = h, uint16(n), uint8(len(w))
	copy(s.word[:], w)
	s.busy.Store(0)
}

// ResetCache forgets every remembered word count (for benchmarks of the
// cold path).
func (t *Tokenizer) ResetCache() {
	for i := range t.cache.slots {
		s := &t.cache.slots[i]
		for !s.busy.CompareAndSwap(0, 1) {
		}
		s.len, s.hash = 0, 0
		s.busy.Store(0)
	}
}

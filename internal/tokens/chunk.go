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
// hash, and a new chunk takes the slot over. A slot is a sequence lock
// over atomic words: a reader never writes or waits (it takes a slot
// being written, or changed while read, as a miss), and a chunk found is
// compared in full, so a count is never another chunk's.
type chunkCache struct {
	seed  maphash.Seed
	slots []cacheSlot
}

type cacheSlot struct {
	seq  atomic.Uint32 // odd while written
	_    uint32
	hash atomic.Uint64
	meta atomic.Uint64 // count<<8 | length
	word [cachedChunk / 8]atomic.Uint64
}

const (
	cacheSlots  = 1 << 16 // 4 MiB
	cachedChunk = 40      // longer chunks are not cached
)

func newChunkCache() *chunkCache {
	return &chunkCache{seed: maphash.MakeSeed(), slots: make([]cacheSlot, cacheSlots)}
}

// wordAt is bytes 8i to 8i+8 of w, little-endian, zero-padded.
func wordAt(w string, i int) uint64 {
	var v uint64
	for j := min(len(w), 8*i+8) - 1; j >= 8*i; j-- {
		v = v<<8 | uint64(w[j])
	}
	return v
}

func (c *chunkCache) get(w string) (int, uint64, bool) {
	if len(w) > cachedChunk {
		return 0, 0, false
	}
	h := maphash.String(c.seed, w)
	s := &c.slots[h&(cacheSlots-1)]
	seq := s.seq.Load()
	if seq&1 != 0 || s.hash.Load() != h {
		return 0, h, false
	}
	meta := s.meta.Load()
	if int(meta&0xff) != len(w) {
		return 0, h, false
	}
	for i := 0; 8*i < len(w); i++ {
		if s.word[i].Load() != wordAt(w, i) {
			return 0, h, false
		}
	}
	if s.seq.Load() != seq {
		return 0, h, false
	}
	return int(meta >> 8), h, true
}

func (c *chunkCache) put(w string, h uint64, n int) {
	if len(w) > cachedChunk {
		return
	}
	s := &c.slots[h&(cacheSlots-1)]
	seq := s.seq.Load()
	if seq&1 != 0 || !s.seq.CompareAndSwap(seq, seq+1) {
		return // another writer has it
	}
	s.hash.Store(h)
	s.meta.Store(uint64(n)<<8 | uint64(len(w)))
	for i := 0; 8*i < len(w); i++ {
		s.word[i].Store(wordAt(w, i))
	}
	s.seq.Store(seq + 2)
}

// ResetCache forgets every remembered word count (for benchmarks of the
// cold path). It must not run beside Count.
func (t *Tokenizer) ResetCache() {
	for i := range t.cache.slots {
		t.cache.slots[i].hash.Store(0)
		t.cache.slots[i].meta.Store(0)
	}
}

package tokens

import (
	"hash/maphash"
	"strings"
	"sync"
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

// chunkCache remembers the token counts of chunks: sharded maps, each
// bounded, and emptied when full (text keeps its common words, which come
// back at once).
type chunkCache struct {
	seed   maphash.Seed
	shards [32]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]int32
}

const shardEntries = 4096 // 32 shards: 128k words at most, a few MiB

func newChunkCache() *chunkCache {
	c := &chunkCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]int32)
	}
	return c
}

func (c *chunkCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%uint64(len(c.shards))]
}

func (c *chunkCache) get(w string) (int, bool) {
	if len(w) > maxChunk {
		return 0, false
	}
	s := c.shard(w)
	s.mu.RLock()
	n, ok := s.m[w]
	s.mu.RUnlock()
	return int(n), ok
}

func (c *chunkCache) put(w string, n int) {
	if len(w) > maxChunk {
		return
	}
	s := c.shard(w)
	s.mu.Lock()
	if len(s.m) >= shardEntries {
		clear(s.m)
	}
	s.m[strings.Clone(w)] = int32(n) // w may point into a request body
	s.mu.Unlock()
}

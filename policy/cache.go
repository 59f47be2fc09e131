package policy

import (
	"hash/maphash"
	"sync/atomic"
)

// countCache remembers what each message counted, keyed by its bytes: a
// chat sends its whole history again at every turn, so all but the newest
// messages were counted before. A fixed direct-mapped table (a message's
// slot is picked by one hash of its bytes and confirmed by a second,
// independent one, with its length: a false match would need both 64-bit
// hashes to collide) whose slots are sequence locks over atomic words, so
// readers never write or wait.
type countCache struct {
	seed1, seed2 maphash.Seed
	slots        []countSlot
}

type countSlot struct {
	seq    atomic.Uint32 // odd while written
	_      uint32
	h1, h2 atomic.Uint64
	counts atomic.Uint64 // tokens<<32 | content tokens
}

const countSlots = 1 << 15 // 32k messages, 1 MiB

func newCountCache() *countCache {
	return &countCache{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([]countSlot, countSlots)}
}

// key hashes a message's bytes.
func (c *countCache) key(b []byte) (uint64, uint64) {
	return maphash.Bytes(c.seed1, b), maphash.Bytes(c.seed2, b) ^ uint64(len(b))
}

func (c *countCache) get(h1, h2 uint64) (tokens, content int, ok bool) {
	s := &c.slots[h1&(countSlots-1)]
	seq := s.seq.Load()
	if seq&1 != 0 || s.h1.Load() != h1 || s.h2.Load() != h2 {
		return 0, 0, false
	}
	v := s.counts.Load()
	if s.seq.Load() != seq {
		return 0, 0, false
	}
	return int(v >> 32), int(uint32(v)), true
}

func (c *countCache) put(h1, h2 uint64, tokens, content int) {
	s := &c.slots[h1&(countSlots-1)]
	seq := s.seq.Load()
	if seq&1 != 0 || !s.seq.CompareAndSwap(seq, seq+1) {
		return
	}
	s.h1.Store(h1)
	s.h2.Store(h2)
	s.counts.Store(uint64(tokens)<<32 | uint64(uint32(content)))
	s.seq.Store(seq + 2)
}

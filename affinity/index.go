package affinity

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MaxBackends is how many backends of a pool the index tells apart: a
// backend is a bit of a word. A larger pool's backends share bits (the
// 65th with the 1st), which only blurs their affinity.
const MaxBackends = 64

// Index remembers, for recently seen prefix checkpoints, which backends
// were sent a prompt holding them. It is a fixed table allocated once:
// entries in buckets of four, a new checkpoint taking the place of its
// bucket's least recently used one, so its memory is the same after a
// million distinct prefixes as after ten (EntryBytes per entry). Safe for
// concurrent use: each bucket has its own lock, held for a few loads.
// The index is one gateway's; replicas that share a Redis teach each
// other theirs (package affinity/share, AddHashes), and without it learn
// their own (docs/gateway.md's routing section says what that costs).
type Index struct {
	buckets []bucket
	mask    uint64
	clock   atomic.Uint32
}

// EntryBytes is an entry's share of the table's memory: a slot and a
// quarter of its bucket's lock.
const EntryBytes = int(unsafe.Sizeof(bucket{})) / slotsPerBucket

const slotsPerBucket = 4

type bucket struct {
	mu    sync.Mutex
	slots [slotsPerBucket]slot
}

type slot struct {
	key      uint64 // a checkpoint's hash; 0 is an empty slot
	backends uint64 // a bit per backend
	used     uint32 // the index's clock when last written
}

// NewIndex makes an index of at least entries entries (rounded up to a
// power of two buckets; at least 64).
func NewIndex(entries int) *Index {
	nb := bucketsFor(entries)
	return &Index{buckets: make([]bucket, nb), mask: uint64(nb - 1)}
}

// bucketsFor is the bucket count of a table of at least entries entries,
// the index's and the session table's: a power of two, at least 16.
func bucketsFor(entries int) int {
	nb := max(entries/slotsPerBucket, 16)
	return 1 << bits.Len(uint(nb-1))
}

// Entries is the table's size in entries.
func (ix *Index) Entries() int { return len(ix.buckets) * slotsPerBucket }

// Bytes is the table's memory.
func (ix *Index) Bytes() int { return len(ix.buckets) * int(unsafe.Sizeof(bucket{})) }

// bit is backend i's bit.
func bit(i int) uint64 { return 1 << (uint(i) % MaxBackends) }

// nonZero keeps 0 free to mark an empty slot.
func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

func (ix *Index) bucketOf(h uint64) *bucket {
	// The low bits pick the bucket; xxhash's are as good as its high ones.
	return &ix.buckets[h&ix.mask]
}

// lookup returns the backends recorded for h.
func (ix *Index) lookup(h uint64) uint64 {
	h = nonZero(h)
	b := ix.bucketOf(h)
	b.mu.Lock()
	var m uint64
	for i := range b.slots {
		if b.slots[i].key == h {
			m = b.slots[i].backends
			break
		}
	}
	b.mu.Unlock()
	return m
}

// add records backend i for h, taking the least recently used slot of
// its bucket when h is new.
func (ix *Index) add(h uint64, i int, now uint32) {
	h = nonZero(h)
	b := ix.bucketOf(h)
	b.mu.Lock()
	victim := 0
	for j := range b.slots {
		s := &b.slots[j]
		if s.key == h {
			s.backends |= bit(i)
			s.used = now
			b.mu.Unlock()
			return
		}
		// Clock differences, not values, so the victim is right across
		// the clock's wrap.
		if s.key == 0 || (b.slots[victim].key != 0 && now-s.used > now-b.slots[victim].used) {
			victim = j
		}
	}
	b.slots[victim] = slot{key: h, backends: bit(i), used: now}
	b.mu.Unlock()
}

// Add records that backend i (its position in the pool) was sent a
// prompt of key k. Checkpoints are written last first, so that within a
// bucket a prompt's start, shared by more prompts, is the fresher.
func (ix *Index) Add(k *Key, i int) { ix.AddHashes(k.Hashes(), i) }

// AddHashes records that backend i was sent a prompt of these checkpoint
// hashes (a Key's Hashes, as another replica learnt them): the same
// entries Add makes.
func (ix *Index) AddHashes(hashes []uint64, i int) {
	now := ix.clock.Add(1)
	for j := len(hashes) - 1; j >= 0; j-- {
		ix.add(hashes[j], i, now)
	}
}

// Match writes into matched[i], for each backend i in candidates (a bit
// set: bit i is backend i), the blocks of k's prefix it is expected to
// hold: those of the longest run of checkpoints, from the first, that it
// was recorded for. It returns the bit set of backends holding at least
// one block. Entries of matched for other backends are left alone.
func (ix *Index) Match(k *Key, candidates uint64, matched *[MaxBackends]int) uint64 {
	live := candidates
	var any uint64
	for j := 0; j < k.n && live != 0; j++ {
		has := ix.lookup(k.hash[j]) & live
		any |= has
		for m := has; m != 0; m &= m - 1 {
			matched[bits.TrailingZeros64(m)] = int(k.at[j])
		}
		live = has
	}
	return any
}

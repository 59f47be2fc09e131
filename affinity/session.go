package affinity

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Sessions remembers, for recently seen conversations, the backend that
// served each last: session affinity's table. A conversation is known by
// a hash of the key its requests name (SessionOf), never the key itself;
// a backend by a stable 64-bit id (the proxy uses a hash of its URL, the
// same on every gateway replica with the same configuration), not its
// position in a pool, so an entry survives backends added or removed
// and means the same on another replica.
//
// Like Index it is a fixed table allocated once: entries in buckets of
// four, a new session taking the place of its bucket's least recently
// used one, so its memory is Bytes after a million distinct keys as
// after ten (SessionEntryBytes each). Safe for concurrent use: each
// bucket has its own lock, held for a few loads.
type Sessions struct {
	buckets []sessionBucket
	mask    uint64
	clock   atomic.Uint32
}

// SessionEntryBytes is an entry's share of the table's memory: its key,
// its backend, its clock and a quarter of its bucket's lock.
const SessionEntryBytes = int(unsafe.Sizeof(sessionBucket{})) / slotsPerBucket

// sessionBucket holds its slots' fields in arrays of their own, so the
// 4-byte clocks pack without padding (22 bytes an entry, not 28).
type sessionBucket struct {
	mu      sync.Mutex
	used    [slotsPerBucket]uint32 // the table's clock when last written
	key     [slotsPerBucket]uint64 // a session's hash; 0 is an empty slot
	backend [slotsPerBucket]uint64
}

// NewSessions makes a table of at least entries sessions (rounded up to
// a power of two buckets of four; at least 64 entries).
func NewSessions(entries int) *Sessions {
	nb := bucketsFor(entries)
	return &Sessions{buckets: make([]sessionBucket, nb), mask: uint64(nb - 1)}
}

// Entries is the table's size in sessions.
func (t *Sessions) Entries() int { return len(t.buckets) * slotsPerBucket }

// Bytes is the table's memory.
func (t *Sessions) Bytes() int { return len(t.buckets) * int(unsafe.Sizeof(sessionBucket{})) }

// Lookup returns the backend that last served session h, and whether the
// table knows h. A hit counts as a use: the session stays in the table
// while it is asked for.
func (t *Sessions) Lookup(h uint64) (backend uint64, ok bool) {
	h = nonZero(h)
	b := &t.buckets[h&t.mask]
	now := t.clock.Add(1)
	b.mu.Lock()
	for i := range b.key {
		if b.key[i] == h {
			backend, ok = b.backend[i], true
			b.used[i] = now
			break
		}
	}
	b.mu.Unlock()
	return backend, ok
}

// Learn records that session h is now served by backend: the request
// just placed there, or a record from another gateway replica (which
// carries the hash only). A new session takes its bucket's least
// recently used slot.
func (t *Sessions) Learn(h, backend uint64) {
	h = nonZero(h)
	b := &t.buckets[h&t.mask]
	now := t.clock.Add(1)
	b.mu.Lock()
	victim := 0
	for i := range b.key {
		if b.key[i] == h {
			victim = i
			break
		}
		// Clock differences, not values, so the victim is right across
		// the clock's wrap.
		if b.key[i] == 0 || (b.key[victim] != 0 && now-b.used[i] > now-b.used[victim]) {
			victim = i
		}
	}
	b.key[victim], b.backend[victim], b.used[victim] = h, backend, now
	b.mu.Unlock()
}

// Forget drops session h (its backend left the pool for good).
func (t *Sessions) Forget(h uint64) {
	h = nonZero(h)
	b := &t.buckets[h&t.mask]
	b.mu.Lock()
	for i := range b.key {
		if b.key[i] == h {
			b.key[i], b.backend[i], b.used[i] = 0, 0, 0
		}
	}
	b.mu.Unlock()
}

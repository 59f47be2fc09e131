package kvevents

import (
	"encoding/binary"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// DefaultMaxBlocks is the most blocks Index keeps per backend unless told
// otherwise: 131,072 blocks of 16 tokens cover 2 million tokens of
// cache, more than one GPU holds for the models served today.
const DefaultMaxBlocks = 1 << 17

// BytesPerBlock is an upper estimate of the memory one indexed block
// costs: an entry in each of two Go maps of uint64 keys (engine hash →
// own hash, own hash → count), with the maps' load factor and overhead.
// A backend at its MaxBlocks bound holds about MaxBlocks × BytesPerBlock
// (8 MiB at the default).
const BytesPerBlock = 64

// Index is, per backend, the blocks its engine holds as its events say.
// Safe for concurrent use. A backend is known (its counts are used) once
// it is added and synchronised; after a gap nothing fills it has no
// entries and is unknown until events arrive again.
type Index struct {
	mu        sync.RWMutex
	maxBlocks int
	backends  map[string]*held
}

// held is one backend's blocks.
type held struct {
	synced    bool
	blockSize int
	byEngine  map[uint64]uint64 // engine hash → own hash
	own       map[uint64]int32  // own hash → engine blocks standing for it
	dropped   int64             // blocks not indexed: over the bound, or no known parent
}

// NewIndex returns an index that keeps at most maxBlocks blocks per
// backend (0: DefaultMaxBlocks); a store beyond the bound is not
// indexed, so the backend is under-counted, never over-counted.
func NewIndex(maxBlocks int) *Index {
	if maxBlocks <= 0 {
		maxBlocks = DefaultMaxBlocks
	}
	return &Index{maxBlocks: maxBlocks, backends: map[string]*held{}}
}

func (x *Index) backend(name string) *held {
	h := x.backends[name]
	if h == nil {
		h = &held{byEngine: map[uint64]uint64{}, own: map[uint64]int32{}}
		x.backends[name] = h
	}
	return h
}

// Apply applies a batch of backend name's events.
func (x *Index) Apply(name string, b *Batch) {
	x.mu.Lock()
	defer x.mu.Unlock()
	h := x.backend(name)
	for i := range b.Events {
		h.apply(&b.Events[i], x.maxBlocks)
	}
}

// SetSynced marks whether backend name's entries can be trusted.
func (x *Index) SetSynced(name string, ok bool) {
	x.mu.Lock()
	x.backend(name).synced = ok
	x.mu.Unlock()
}

// Clear drops backend name's entries and marks it unknown: after a gap
// no replay covers, the index cannot tell which of them were evicted.
func (x *Index) Clear(name string) {
	x.mu.Lock()
	h := x.backend(name)
	h.clear()
	h.synced = false
	x.mu.Unlock()
}

// Synced reports whether backend name's entries are in use.
func (x *Index) Synced(name string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	h := x.backends[name]
	return h != nil && h.synced
}

// Blocks is how many blocks backend name is indexed as holding.
func (x *Index) Blocks(name string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if h := x.backends[name]; h != nil {
		return len(h.byEngine)
	}
	return 0
}

func (h *held) clear() {
	clear(h.byEngine)
	clear(h.own)
}

// gpu reports whether an event's medium is the GPU cache the engine
// serves prompts from (an offloaded copy on CPU is not counted).
func gpu(m string) bool { return m == "" || m == "GPU" }

func (h *held) apply(e *Event, maxBlocks int) {
	switch e.Kind {
	case AllBlocksCleared:
		h.clear()
	case BlockRemoved:
		if !gpu(e.Medium) {
			return
		}
		for _, eh := range e.Hashes {
			o, ok := h.byEngine[eh]
			if !ok {
				continue
			}
			delete(h.byEngine, eh)
			if h.own[o]--; h.own[o] <= 0 {
				delete(h.own, o)
			}
		}
	case BlockStored:
		// An adapter's blocks hold other values for the same tokens; a
		// store whose token ids do not fill its blocks cannot be chained.
		bs := e.BlockSize
		if !gpu(e.Medium) || e.LoRA || bs <= 0 || len(e.Tokens) != bs*len(e.Hashes) {
			h.dropped += int64(len(e.Hashes))
			return
		}
		var parent uint64
		if e.HasParent {
			p, ok := h.byEngine[e.Parent]
			if !ok {
				h.dropped += int64(len(e.Hashes)) // its prefix is unknown here: unreachable by a match
				return
			}
			parent = p
		}
		h.blockSize = bs
		for i, eh := range e.Hashes {
			o := chain(parent, e.Tokens[i*bs:(i+1)*bs])
			parent = o
			if _, ok := h.byEngine[eh]; ok {
				continue
			}
			if len(h.byEngine) >= maxBlocks {
				h.dropped += int64(len(e.Hashes) - i)
				return
			}
			h.byEngine[eh] = o
			h.own[o]++
		}
	}
}

// chain is the index's own hash of a block: its parent's own hash and
// its token ids, so a block's hash names the whole prefix up to it.
func chain(parent uint64, tokens []uint32) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	_, _ = d.Write(b[:])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:4], t)
		_, _ = d.Write(b[:4])
	}
	return d.Sum64()
}

// Prompt is a prompt's blocks as the index names them, for one block
// size: computed once per request, matched against every backend.
type Prompt struct {
	BlockSize int
	Hashes    []uint64
}

// NewPrompt chains the hashes of tokens' full blocks of size bs.
func NewPrompt(tokens []uint32, bs int) Prompt {
	p := Prompt{BlockSize: bs}
	if bs <= 0 {
		return p
	}
	var parent uint64
	for i := 0; i+bs <= len(tokens); i += bs {
		parent = chain(parent, tokens[i:i+bs])
		p.Hashes = append(p.Hashes, parent)
	}
	return p
}

// BlockSize is the block size backend name's events use, 0 before any
// store.
func (x *Index) BlockSize(name string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if h := x.backends[name]; h != nil {
		return h.blockSize
	}
	return 0
}

// Match returns how many of p's first blocks backend name holds, and
// false when the backend is unknown (not synchronised) or indexes
// another block size: the caller falls back to its approximate index.
func (x *Index) Match(name string, p *Prompt) (int, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	h := x.backends[name]
	if h == nil || !h.synced || (h.blockSize != 0 && h.blockSize != p.BlockSize) {
		return 0, false
	}
	n := 0
	for _, o := range p.Hashes {
		if h.own[o] <= 0 {
			break
		}
		n++
	}
	return n, true
}

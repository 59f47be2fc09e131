package sim

import (
	"encoding/json"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/internal/tokens"
	"github.com/infergate/infergate/openai"
)

// The prefix cache, as vLLM's automatic prefix caching keeps it: a
// prompt's KV blocks are named by a hash of every token up to the block's
// end, a block computed once is found again by a later prompt that starts
// with the same tokens, and a block no running sequence uses stays cached
// until its memory is needed, least recently used first.

// promptBlocks returns the chained hashes of the full blocks of the
// request's chat-templated prompt, in order: hash i covers every token up
// to the end of block i. Messages (and the tools before them) are framed
// as promptText counts them (4 tokens before each content); a block that ends inside a word closes
// with it (tokens.Blocks). Completion prompts given as token ids are
// hashed 16 ids... block size ids at a time. The hash has no seed: every
// simulator names a prompt's blocks alike, as vLLM's sha256 block hashes
// do, so the KV events of two engines agree (kvevents.go).
func promptBlocks(t *tokens.Tokenizer, r *openai.Request, bs int) []uint64 {
	var h xxhash.Digest
	h.Reset()
	var out []uint64
	n := 0
	text := func(s string) {
		done := 0
		n += t.Blocks(s, n, bs, func(end int) {
			h.WriteString(s[done:end])
			done = end
			out = append(out, h.Sum64())
		})
		h.WriteString(s[done:])
	}
	frame := func(role string) {
		// A separator no text holds, the role, and its 4 tokens.
		h.WriteString("\x00<|")
		h.WriteString(role)
		h.WriteString("|>\x00")
		for range 4 {
			if n++; n%bs == 0 {
				out = append(out, h.Sum64())
			}
		}
	}
	if len(r.Messages) > 0 {
		if len(r.Tools) > 0 {
			frame("tools") // first, as promptText counts them
			text(string(r.Tools))
		}
		for _, m := range r.Messages {
			s, err := contentText(m.Content)
			if err != nil {
				return nil
			}
			frame(m.Role)
			text(s)
		}
		return out
	}
	var s string
	if json.Unmarshal(r.Prompt, &s) == nil {
		text(s)
		return out
	}
	var ss []string
	if json.Unmarshal(r.Prompt, &ss) == nil {
		for _, p := range ss {
			text(p)
		}
		return out
	}
	var ids []int
	if json.Unmarshal(r.Prompt, &ids) == nil {
		var b []byte
		for i, id := range ids {
			b = strconv.AppendInt(b[:0], int64(id), 10)
			h.Write(append(b, ','))
			if (i+1)%bs == 0 {
				out = append(out, h.Sum64())
			}
		}
	}
	return out
}

// cachedBlock is one KV block of the prefix cache. refs counts the
// running sequences using it; an unused one sits on the cache's LRU list.
type cachedBlock struct {
	hash       uint64
	refs       int
	prev, next *cachedBlock
}

// prefixCache holds the engine's cached blocks by hash. It is owned by
// the engine's loop. Its blocks come out of the engine's KV budget: the
// engine's free count excludes them, and an unused one is evicted (the
// least recently used first) before any running sequence is preempted.
type prefixCache struct {
	blocks map[uint64]*cachedBlock
	lru    cachedBlock // sentinel: lru.next is the least recently used
	idle   int         // blocks with no reference, on the list
}

func newPrefixCache() *prefixCache {
	c := &prefixCache{blocks: make(map[uint64]*cachedBlock)}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

func (c *prefixCache) unlink(b *cachedBlock) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	c.idle--
}

// pushRecent puts an unreferenced block at the most recent end.
func (c *prefixCache) pushRecent(b *cachedBlock) {
	b.prev, b.next = c.lru.prev, &c.lru
	c.lru.prev.next = b
	c.lru.prev = b
	c.idle++
}

// match returns how many of hashes, from the first, are cached, and how
// many of those have no reference (taking them makes them unevictable).
func (c *prefixCache) match(hashes []uint64) (n, idle int) {
	for _, h := range hashes {
		b, ok := c.blocks[h]
		if !ok {
			break
		}
		n++
		if b.refs == 0 {
			idle++
		}
	}
	return n, idle
}

// ref takes a reference on the cached block of h, which must exist.
func (c *prefixCache) ref(h uint64) *cachedBlock {
	b := c.blocks[h]
	if b.refs == 0 {
		c.unlink(b)
	}
	b.refs++
	return b
}

// evict drops the least recently used unreferenced block and returns
// its hash; false when every cached block is in use.
func (c *prefixCache) evict() (uint64, bool) {
	b := c.lru.next
	if b == &c.lru {
		return 0, false
	}
	c.unlink(b)
	delete(c.blocks, b.hash)
	return b.hash, true
}

// release drops a sequence's references, the last block first, so that
// a prompt's first blocks, which more prompts share, are evicted last.
func (c *prefixCache) release(bs []*cachedBlock) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		if b.refs--; b.refs == 0 {
			c.pushRecent(b)
		}
	}
}

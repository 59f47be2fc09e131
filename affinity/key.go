// Package affinity is the gateway's approximate knowledge of which backend
// holds which prompt prefix in its KV cache, learnt from where it sent
// earlier requests rather than from the engines' events: the prefix
// index (Index), and the session table (Sessions) of which backend
// served each conversation a request names by a key (SessionOf), kept
// as hashes only.
//
// A prompt is read as the chat template reads it (the tools, then each
// message's role and content, in order) and cut into blocks of a fixed
// number of bytes of that text; each block is named by a hash of every
// byte up to its end, so two prompts share a block's hash exactly when
// they share everything before it. Hashing bytes rather than tokens
// keeps the gateway free of a tokenizer on the request path (counting
// 4,000 tokens costs hundreds of microseconds; hashing their 16 KiB
// about one). A block of 128 bytes is about 32 tokens of English.
//
// The index does not keep every block: only checkpoints, every block up
// to the 8th and then four per doubling (blocks 10, 12, 14, 16, 20, 24,
// ...), so a prompt of 1,024 blocks costs 36 entries, and a shared prefix
// is credited to within a quarter of its length.
package affinity

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/openai"
)

// MaxBlocks bounds the blocks of one prompt that are hashed: with the
// default 128-byte block, the first 128 KiB of a prompt.
const MaxBlocks = 1024

// MaxCheckpoints is the checkpoints of MaxBlocks blocks (TestCheckpoints):
// the most hashes a Key holds.
const MaxCheckpoints = 36

// checkpoint reports whether the index keeps block n (1-based: the hash
// of the first n blocks).
func checkpoint(n int) bool {
	if n <= 8 {
		return n >= 1
	}
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return n%step == 0
}

// Key is a prompt's prefix as the index sees it: the hashes of its
// checkpoints, the first block's first. The zero Key is an empty prompt,
// which matches nothing.
type Key struct {
	// Blocks is the prompt's full blocks (at most MaxBlocks); a partial
	// last block is not a block.
	Blocks int
	// Session is the conversation the request names (SessionOf), set
	// after the prompt is hashed (Hasher.Reset clears it).
	Session Session
	// Exact is the prompt's token blocks as the exact index names them
	// (affinity/kvevents), set by selection prefix's exact mode after a
	// /tokenize; nil otherwise.
	Exact *ExactBlocks
	n     int
	hash  [MaxCheckpoints]uint64
	at    [MaxCheckpoints]uint16 // the block count each hash covers
}

// ExactBlocks are a prompt's blocks of BlockSize tokens, by the chained
// hashes of their token ids (kvevents.NewPrompt).
type ExactBlocks struct {
	BlockSize int
	Hashes    []uint64
}

// Len is the number of checkpoints.
func (k *Key) Len() int { return k.n }

// First is the hash of the prompt's first block, 0 for a prompt shorter
// than a block: a stable name for the prompt's start.
func (k *Key) First() uint64 {
	if k.n == 0 {
		return 0
	}
	return k.hash[0]
}

// Hashes returns the checkpoints' hashes, the first block's first: k's
// own memory, valid while k is unchanged (for sharing what the index
// learnt with other replicas; Index.AddHashes takes them back).
func (k *Key) Hashes() []uint64 { return k.hash[:k.n] }

// BlocksAt returns the blocks checkpoint i covers.
func (k *Key) BlocksAt(i int) int { return int(k.at[i]) }

// Hasher cuts a prompt into blocks and hashes them. Its zero value is not
// ready: use NewHasher. It is one request's: not safe for concurrent use,
// and reusable after Reset.
type Hasher struct {
	d         xxhash.Digest
	key       *Key
	block     int // bytes per block
	maxBlocks int
	fill      int // bytes of the current block
}

// Reset starts a new key, written into k, with blocks of blockBytes and
// at most maxBlocks of them (clamped to MaxBlocks).
func (h *Hasher) Reset(k *Key, blockBytes, maxBlocks int) {
	h.d.Reset()
	*k = Key{}
	h.key, h.block, h.fill = k, max(blockBytes, 1), 0
	h.maxBlocks = min(max(maxBlocks, 1), MaxBlocks)
}

// Write adds p to the prompt's text. It reports false once the prompt
// reached its last block and further text changes nothing.
func (h *Hasher) Write(p []byte) bool {
	k := h.key
	for len(p) > 0 {
		if k.Blocks >= h.maxBlocks {
			return false
		}
		room := h.block - h.fill
		if len(p) < room {
			_, _ = h.d.Write(p)
			h.fill += len(p)
			return true
		}
		_, _ = h.d.Write(p[:room])
		p = p[room:]
		h.fill = 0
		k.Blocks++
		if checkpoint(k.Blocks) {
			k.hash[k.n], k.at[k.n] = h.d.Sum64(), uint16(k.Blocks)
			k.n++
		}
	}
	return k.Blocks < h.maxBlocks
}

// Separators between the template's parts: bytes JSON text never holds
// raw, so "ab" then "c" differs from "a" then "bc".
var (
	sepTools   = []byte("\x00tools\x00")
	sepRole    = []byte("\x00role\x00")
	sepContent = []byte("\x00content\x00")
	sepPrompt  = []byte("\x00prompt\x00")
)

// Request hashes the prompt of a request body that openai.ScanRequest
// read into env: the chat template's order (tools first, as templates put
// them in the system turn, then each message's role and content, whatever
// the order of their keys), or a completion's prompt. Values are hashed as
// the JSON holds them, escapes included: no decoding, no allocation. The
// work is bounded by the blocks: a 1 MB prompt or 10,000 messages cost no
// more than the first maxBlocks blocks.
func (h *Hasher) Request(body []byte, env *openai.Envelope) {
	if t := env.Tools.Of(body); t != nil {
		if !h.Write(sepTools) || !h.Write(t) {
			return
		}
	}
	if p := env.Prompt.Of(body); p != nil {
		if h.Write(sepPrompt) {
			h.Write(p)
		}
		return
	}
	if in := env.Instructions.Of(body); in != nil {
		// The Responses API's system text comes first in what a server
		// templates.
		if !h.Write(sepRole) || !h.Write([]byte(`"system"`)) || !h.Write(sepContent) || !h.Write(in) {
			return
		}
	}
	msgs := env.Messages.Of(body)
	if msgs == nil {
		msgs = env.Input.Of(body)
	}
	if len(msgs) > 0 && msgs[0] == '"' {
		// A Responses string input: the user's one message.
		_ = h.Write(sepRole) && h.Write([]byte(`"user"`)) && h.Write(sepContent) && h.Write(msgs)
		return
	}
	if msgs == nil {
		return
	}
	openai.EachElement(msgs, func(s openai.Span) bool {
		msg := msgs[s.Start:s.End]
		var role, content []byte
		openai.EachMember(msg, func(key []byte, f openai.Field) bool {
			switch {
			case openai.KeyIs(key, "role"):
				role = f.Of(msg)
			case openai.KeyIs(key, "content"):
				content = f.Of(msg)
			}
			return true
		})
		if role == nil && content == nil {
			// A Responses item other than a message (a function call,
			// its output): the whole item.
			return h.Write(sepContent) && h.Write(msg)
		}
		return h.Write(sepRole) && h.Write(role) && h.Write(sepContent) && h.Write(content)
	})
}

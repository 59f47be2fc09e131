package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is an event's type.
type Kind uint8

// The event types vLLM publishes.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// Event is one decoded KV-cache event.
type Event struct {
	Kind Kind
	// Hashes are the engine's block hashes, in order (an integer hash as
	// its 64 bits, a bytes hash as its xxhash).
	Hashes []uint64
	// Parent is the engine hash of the block before Hashes[0]
	// (BlockStored); HasParent false for a prompt's first block.
	Parent    uint64
	HasParent bool
	// Tokens are the blocks' token ids, BlockSize per block (BlockStored).
	Tokens    []uint32
	BlockSize int
	// LoRA is set when the blocks belong to an adapter (lora_id or
	// lora_name): their contents differ from the base model's.
	LoRA bool
	// Medium is where the blocks live ("GPU", "CPU" when offloaded); ""
	// when the engine leaves it out (older vLLM: GPU).
	Medium string
}

// Batch is one EventBatch: one publisher message.
type Batch struct {
	TS     float64
	Events []Event
	// Rank is data_parallel_rank, -1 when absent.
	Rank int
}

// Limits bound what one message may make the decoder hold. The zero
// value takes the defaults.
type Limits struct {
	// MaxFrameBytes is the largest ZMQ message (its frames together)
	// accepted; a larger one drops the connection before it is held.
	// Default 4 MiB: one engine step's batch is tens to hundreds of KiB.
	MaxFrameBytes int
	// MaxEvents is the most events in one batch. Default 65,536.
	MaxEvents int
	// MaxHashes is the most block hashes in one event; an event's token
	// ids are bounded by MaxHashes × 1,024. Default 65,536.
	MaxHashes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxFrameBytes <= 0 {
		l.MaxFrameBytes = 4 << 20
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = 1 << 16
	}
	if l.MaxHashes <= 0 {
		l.MaxHashes = 1 << 16
	}
	return l
}

// ErrMalformed is returned for a payload that is not an EventBatch.
var ErrMalformed = errors.New("kvevents: malformed event batch")

const maxDepth = 16 // nesting skipped in fields this package ignores

// decoder reads one payload with every length checked against the
// bytes left (each element takes at least one byte), so no count in a
// hostile payload makes it allocate more than the payload's size.
type decoder struct {
	d   *msgpack.Decoder
	r   *bytes.Reader
	lim Limits
}

// Decode decodes one EventBatch payload, in the array_like encoding or
// the map one. It never panics; an error wraps ErrMalformed.
func Decode(payload []byte, lim Limits) (Batch, error) {
	lim = lim.withDefaults()
	if len(payload) > lim.MaxFrameBytes {
		return Batch{}, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(payload), lim.MaxFrameBytes)
	}
	r := bytes.NewReader(payload)
	x := decoder{d: msgpack.NewDecoder(r), r: r, lim: lim}
	b, err := x.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return b, nil
}

// length checks a container's length against the bytes left and max.
func (x *decoder) length(n, max int, what string) (int, error) {
	if n < 0 || n > x.r.Len() || n > max {
		return 0, fmt.Errorf("%s: %d elements", what, n)
	}
	return n, nil
}

func (x *decoder) arrayLen(max int, what string) (int, error) {
	n, err := x.d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return x.length(n, max, what)
}

func (x *decoder) isMap() (bool, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return false, err
	}
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32, nil
}

func (x *decoder) isNil() (bool, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, x.d.DecodeNil()
	}
	return false, nil
}

func (x *decoder) batch() (Batch, error) {
	b := Batch{Rank: -1}
	m, err := x.isMap()
	if err != nil {
		return b, err
	}
	set := func(name string) error {
		switch name {
		case "ts":
			b.TS, err = x.d.DecodeFloat64()
			return err
		case "events":
			n, err := x.arrayLen(x.lim.MaxEvents, "events")
			if err != nil {
				return err
			}
			b.Events = make([]Event, 0, n)
			for range n {
				e, err := x.event()
				if err != nil {
					return err
				}
				b.Events = append(b.Events, e)
			}
			return nil
		case "data_parallel_rank":
			if isNil, err := x.isNil(); isNil || err != nil {
				return err
			}
			r, err := x.d.DecodeInt()
			b.Rank = r
			return err
		}
		return x.skip(0)
	}
	err = x.fields(m, []string{"ts", "events", "data_parallel_rank"}, set)
	return b, err
}

// fields reads a struct in either encoding: as an array its fields come
// in order (names), as a map by name; set reads the value of one.
func (x *decoder) fields(isMap bool, names []string, set func(string) error) error {
	if isMap {
		n, err := x.d.DecodeMapLen()
		if err != nil {
			return err
		}
		if n, err = x.length(n, 64, "struct"); err != nil {
			return err
		}
		for range n {
			k, err := x.str(64)
			if err != nil {
				return err
			}
			if err := set(k); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	}
	n, err := x.arrayLen(64, "struct")
	if err != nil {
		return err
	}
	return x.items(n, names, set)
}

func (x *decoder) items(n int, names []string, set func(string) error) error {
	for i := range n {
		name := ""
		if i < len(names) {
			name = names[i]
		}
		if err := set(name); err != nil {
			return fmt.Errorf("field %d %s: %w", i, name, err)
		}
	}
	return nil
}

var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}
	removedFields = []string{"block_hashes", "medium"}
)

// event reads one tagged event: an array whose first element is the
// class name, or a map whose "type" names it (msgspec's tag_field).
func (x *decoder) event() (Event, error) {
	var e Event
	m, err := x.isMap()
	if err != nil {
		return e, err
	}
	set := func(name string) error { return x.eventField(&e, name) }
	if m {
		// The tag may come anywhere in a map; msgspec writes it first.
		return e, x.fields(true, nil, func(name string) error {
			if name == "type" {
				k, err := x.kind()
				e.Kind = k
				return err
			}
			return set(name)
		})
	}
	n, err := x.arrayLen(64, "event")
	if err != nil {
		return e, err
	}
	if n == 0 {
		return e, errors.New("event: no tag")
	}
	if e.Kind, err = x.kind(); err != nil {
		return e, err
	}
	names := storedFields
	switch e.Kind {
	case BlockRemoved:
		names = removedFields
	case AllBlocksCleared:
		names = nil
	}
	return e, x.items(n-1, names, set)
}

func (x *decoder) kind() (Kind, error) {
	s, err := x.str(32)
	if err != nil {
		return 0, err
	}
	switch s {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	return 0, fmt.Errorf("unknown event %q", s)
}

func (x *decoder) eventField(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		n, err := x.arrayLen(x.lim.MaxHashes, "block_hashes")
		if err != nil {
			return err
		}
		e.Hashes = make([]uint64, n)
		for i := range e.Hashes {
			if e.Hashes[i], err = x.hash(); err != nil {
				return err
			}
		}
	case "parent_block_hash":
		isNil, err := x.isNil()
		if isNil || err != nil {
			return err
		}
		e.Parent, err = x.hash()
		e.HasParent = err == nil
		return err
	case "token_ids":
		n, err := x.arrayLen(x.lim.MaxHashes*1024, "token_ids")
		if err != nil {
			return err
		}
		e.Tokens = make([]uint32, n)
		for i := range e.Tokens {
			if e.Tokens[i], err = x.d.DecodeUint32(); err != nil {
				return err
			}
		}
	case "block_size":
		e.BlockSize, err = x.d.DecodeInt()
		if err == nil && (e.BlockSize <= 0 || e.BlockSize > 1024) {
			err = fmt.Errorf("block_size %d", e.BlockSize)
		}
	case "lora_id", "lora_name":
		isNil, err := x.isNil()
		if isNil || err != nil {
			return err
		}
		e.LoRA = true
		return x.skip(0)
	case "medium":
		isNil, err := x.isNil()
		if isNil || err != nil {
			return err
		}
		e.Medium, err = x.str(32)
		return err
	default:
		return x.skip(0)
	}
	return err
}

// hash reads an ExternalBlockHash: bytes | int.
func (x *decoder) hash() (uint64, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		n, err := x.d.DecodeBytesLen()
		if err != nil {
			return 0, err
		}
		if _, err := x.length(n, 1024, "hash"); err != nil {
			return 0, err
		}
		b := make([]byte, n)
		if _, err := x.r.Read(b); err != nil && n > 0 {
			return 0, err
		}
		return xxhash.Sum64(b), nil
	}
	if c == msgpcode.Uint64 || msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64) {
		return x.d.DecodeUint64()
	}
	return 0, fmt.Errorf("hash: code %#x", c)
}

func (x *decoder) str(max int) (string, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("code %#x: not a string", c)
	}
	n, err := x.d.DecodeBytesLen()
	if err != nil {
		return "", err
	}
	if _, err := x.length(n, max, "string"); err != nil {
		return "", err
	}
	b := make([]byte, n)
	if _, err := x.r.Read(b); err != nil && n > 0 {
		return "", err
	}
	return string(b), nil
}

// skip skips one value of a field this package does not read, arrays and
// maps by hand to bound the nesting (msgpack's Skip recurses without a
// limit, and a deep enough payload would exhaust the stack).
func (x *decoder) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deep")
	}
	c, err := x.d.PeekCode()
	if err != nil {
		return err
	}
	var n int
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if n, err = x.d.DecodeArrayLen(); err != nil {
			return err
		}
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if n, err = x.d.DecodeMapLen(); err != nil {
			return err
		}
		n *= 2
	default:
		return x.d.Skip()
	}
	if _, err := x.length(n, x.r.Len(), "skipped"); err != nil {
		return err
	}
	for range n {
		if err := x.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

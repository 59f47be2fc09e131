package kvevents

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// arrayBatch is, byte for byte, msgspec's encoding of
// KVEventBatch(ts=1.5, events=[BlockStored(block_hashes=[1, 2],
// parent_block_hash=None, token_ids=[7, 8, 9, 10], block_size=2,
// lora_id=None, medium="GPU", lora_name=None), BlockRemoved(
// block_hashes=[1], medium="GPU"), AllBlocksCleared()]) with array_like
// structs (data_parallel_rank None, left out).
var arrayBatch = []byte{
	0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // [1.5,
	0x93,                                                              // events: 3
	0x98, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', // ["BlockStored",
	0x92, 0x01, 0x02, // [1, 2]
	0xc0,                         // None
	0x94, 0x07, 0x08, 0x09, 0x0a, // [7, 8, 9, 10]
	0x02,                // 2
	0xc0,                // None
	0xa3, 'G', 'P', 'U', // "GPU"
	0xc0, // None]
	0x93, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd',
	0x91, 0x01, 0xa3, 'G', 'P', 'U',
	0x91, 0xb0, 'A', 'l', 'l', 'B', 'l', 'o', 'c', 'k', 's', 'C', 'l', 'e', 'a', 'r', 'e', 'd',
}

func TestDecodeArrayLike(t *testing.T) {
	t.Parallel()
	b, err := Decode(arrayBatch, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if b.TS != 1.5 || b.Rank != -1 || len(b.Events) != 3 {
		t.Fatalf("batch %+v", b)
	}
	s := b.Events[0]
	if s.Kind != BlockStored || len(s.Hashes) != 2 || s.Hashes[1] != 2 || s.HasParent || len(s.Tokens) != 4 || s.Tokens[3] != 10 ||
		s.BlockSize != 2 || s.LoRA || s.Medium != "GPU" {
		t.Fatalf("BlockStored decoded as %+v", s)
	}
	if r := b.Events[1]; r.Kind != BlockRemoved || len(r.Hashes) != 1 || r.Hashes[0] != 1 || r.Medium != "GPU" {
		t.Fatalf("BlockRemoved decoded as %+v", r)
	}
	if b.Events[2].Kind != AllBlocksCleared {
		t.Fatalf("AllBlocksCleared decoded as %+v", b.Events[2])
	}
}

// Newer vLLM encodes events as maps tagged by "type", hashes as sha256
// bytes, and sends the rank and fields this package does not read.
func TestDecodeMapForm(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	sha := bytes.Repeat([]byte{0xab}, 32)
	err := enc.Encode([]any{2.0, []any{
		map[string]any{"type": "BlockStored", "block_hashes": [][]byte{sha}, "parent_block_hash": []byte("p"),
			"token_ids": []int{1, 2}, "block_size": 2, "lora_id": nil, "medium": "GPU", "lora_name": "adapter",
			"extra_keys": []any{[]any{"mm", 1}}, "group_idx": 0},
		map[string]any{"type": "BlockRemoved", "block_hashes": [][]byte{sha}, "medium": "CPU"},
	}, 3})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(buf.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Rank != 3 || len(b.Events) != 2 {
		t.Fatalf("batch %+v", b)
	}
	s, r := b.Events[0], b.Events[1]
	if s.Kind != BlockStored || !s.HasParent || !s.LoRA || len(s.Tokens) != 2 || s.Hashes[0] != r.Hashes[0] || r.Medium != "CPU" {
		t.Fatalf("events %+v %+v", s, r)
	}
}

// deepExtraKeys is a BlockStored whose extra_keys (a field the decoder
// skips) nests a million arrays: msgpack's own Skip would recurse once
// per level.
func deepExtraKeys() []byte {
	b := []byte{0x92, 0x00, 0x91, 0x99, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
		0x90, 0xc0, 0x90, 0x01, 0xc0, 0xc0, 0xc0}
	return append(b, bytes.Repeat([]byte{0x91}, 1<<20)...)
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload []byte
		lim     Limits
	}{
		{"empty", nil, Limits{}},
		{"not an array", []byte{0xa1, 'x'}, Limits{}},
		{"a length beyond the payload", []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0x7f, 0xff, 0xff, 0xff}, Limits{}},
		{"unknown event", []byte{0x92, 0x00, 0x91, 0x91, 0xa3, 'B', 'a', 'd'}, Limits{}},
		{"too many events", arrayBatch, Limits{MaxEvents: 2}},
		{"too many hashes", arrayBatch, Limits{MaxHashes: 1}},
		{"too large", arrayBatch, Limits{MaxFrameBytes: 10}},
		{"truncated", arrayBatch[:len(arrayBatch)-3], Limits{}},
		{"nested a million deep", deepExtraKeys(), Limits{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.payload, tc.lim); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(%x) = %v, want ErrMalformed", tc.payload, err)
			}
		})
	}
}

// FuzzDecode: no payload panics the decoder or makes it hold more than
// its bounds; what it accepts applies to an index without a panic.
func FuzzDecode(f *testing.F) {
	f.Add(arrayBatch)
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Add([]byte{0x92, 0x00, 0x91, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xb0, 'A', 'l', 'l', 'B', 'l', 'o', 'c', 'k', 's', 'C', 'l', 'e', 'a', 'r', 'e', 'd'})
	idx := NewIndex(64)
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload, Limits{MaxEvents: 64, MaxHashes: 64})
		if err != nil {
			return
		}
		if len(b.Events) > 64 {
			t.Fatalf("%d events past the bound", len(b.Events))
		}
		for _, e := range b.Events {
			if len(e.Hashes) > 64 || len(e.Tokens) > 64*1024 {
				t.Fatalf("event past the bounds: %d hashes, %d tokens", len(e.Hashes), len(e.Tokens))
			}
		}
		idx.Apply("b", &b)
		if n := idx.Blocks("b"); n > 64 {
			t.Fatalf("index holds %d blocks, bound 64", n)
		}
	})
}

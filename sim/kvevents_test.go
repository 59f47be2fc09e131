package sim

import (
	"bytes"
	"testing"
)

// The publisher's payload is, byte for byte, msgspec's encoding of
// KVEventBatch(ts=1.5, events=[BlockStored(block_hashes=[1, 2],
// parent_block_hash=None, token_ids=[7, 8, 9, 10], block_size=2,
// lora_id=None, medium="GPU", lora_name=None), BlockRemoved(
// block_hashes=[1], medium="GPU"), AllBlocksCleared()]) with vLLM's
// array_like structs (vllm/distributed/kv_events.py), worked out by
// msgpack's rules: fixarray, float64 0xcb, fixstr, positive fixint, nil.
func TestKVBatchBytes(t *testing.T) {
	t.Parallel()
	want := []byte{
		0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
		0x93,
		0x98, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
		0x92, 0x01, 0x02, 0xc0, 0x94, 0x07, 0x08, 0x09, 0x0a, 0x02, 0xc0, 0xa3, 'G', 'P', 'U', 0xc0,
		0x93, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0x01, 0xa3, 'G', 'P', 'U',
		0x91, 0xb0, 'A', 'l', 'l', 'B', 'l', 'o', 'c', 'k', 's', 'C', 'l', 'e', 'a', 'r', 'e', 'd',
	}
	got := encodeKVBatch(1.5, []kvEvent{
		{kind: kvStored, hashes: []uint64{1, 2}, tokens: []uint32{7, 8, 9, 10}},
		{kind: kvRemoved, hashes: []uint64{1}},
		{kind: kvCleared},
	})
	if !bytes.Equal(got, want) {
		t.Fatalf("payload\n%x\nwant\n%x", got, want)
	}
}

// A reset empties an idle cache and publishes AllBlocksCleared.
func TestResetPrefixCache(t *testing.T) {
	t.Parallel()
	e := newEngine(EngineConfig{KVCacheTokens: 64, BlockSize: 16, PrefixCaching: true, MaxNumSeqs: 4}, 1, nil)
	e.kv = &kvPublisher{in: make(chan []kvEvent, 4)}
	e.cache.blocks[7] = &cachedBlock{hash: 7}
	e.cache.pushRecent(e.cache.blocks[7])
	e.freeBlocks--
	if !e.resetCache() || len(e.cache.blocks) != 0 || e.freeBlocks != 4 {
		t.Fatalf("reset left %d blocks, %d free", len(e.cache.blocks), e.freeBlocks)
	}
	e.kvFlush()
	if evs := <-e.kv.in; len(evs) != 1 || evs[0].kind != kvCleared {
		t.Fatalf("published %+v", evs)
	}
}

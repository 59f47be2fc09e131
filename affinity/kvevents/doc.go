// Package kvevents keeps, per inference backend, the set of prompt blocks
// its engine holds in its prefix cache, as the engine's own KV-cache
// events say (vLLM's --kv-events-config ZMQ publisher): the exact mode of
// prefix routing.
//
// The gateway cannot recompute an engine's block hashes (vLLM's are
// sha256 or xxhash over its own pickling of the tokens, salted per
// deployment), so blocks are matched by token ids: on BlockStored the
// index chains its own hash over (parent's own hash, the block's token
// ids) and remembers which engine hash it stands for, so that
// BlockRemoved can take it away. A request is matched by tokenising its
// prompt as the engine does (the backend's /tokenize) and chaining the
// same hash over its blocks.
//
// Wire format, from vllm/distributed/kv_events.py (vllm-project/vllm
// b4e69e0af33f4698e157a262cc787fe61983cd3d for the array_like encoding,
// 0181ea3173e53eea8cf04a86891488e3dc89bb34 for the later fields and for
// the map encoding of newer releases, whose structs dropped array_like):
// a ZMQ PUB message of three frames, topic, sequence number (8 bytes
// big-endian) and a msgspec msgpack EventBatch [ts, events,
// data_parallel_rank?]; each event is tagged by its class name:
// BlockStored [block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium, lora_name, extra_keys?, group_idx?, ...],
// BlockRemoved [block_hashes, medium, group_idx?], AllBlocksCleared [].
// Releases differ in which structs are array_like: vLLM at
// 08ee3e54203f7f5a12f85a5976cd371e6be89e11 (vMaroon/vllm) encodes the
// batch as an array and the events as maps {"type": "BlockStored", ...};
// the decoder takes either form at either level. With vLLM's snapshot
// endpoint the sequence frame carries 16 more bytes (a publisher id)
// after the 8-byte number. A block hash is an integer (xxhash builtin, or an older vLLM) or bytes
// (sha256). The ROUTER replay socket answers an 8-byte start sequence
// with [seq, payload] per buffered batch and ends with seq -1.
package kvevents

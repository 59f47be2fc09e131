"""A KV-event publisher on libzmq (pyzmq), shaped as vLLM's ZmqEventPublisher
(vllm/distributed/kv_events.py): a PUB socket sending [topic, seq as 8 bytes
big-endian, msgpack batch], a ROUTER socket answering a start sequence number
with [identity, "", seq, payload] per buffered batch and [identity, "", -1, ""].
Batches are msgpack arrays as msgspec writes array_like structs; the last
two carry their events as maps, as newer vLLM writes them.

Used by TestLibzmqPublisher: it prints the two endpoints, publishes empty
batches until a line arrives on stdin, then the scenario below, prints the
scenario's last sequence number, then serves replays until stdin closes."""

import select
import sys
import time

import msgpack
import zmq

ctx = zmq.Context.instance()
pub = ctx.socket(zmq.PUB)
pub.bind("tcp://127.0.0.1:*")
router = ctx.socket(zmq.ROUTER)
router.bind("tcp://127.0.0.1:*")
print(pub.getsockopt_string(zmq.LAST_ENDPOINT), router.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)

END_SEQ = (-1).to_bytes(8, "big", signed=True)
buffer = []
seq = 0


def publish(events, send=True):
    global seq
    payload = msgpack.packb([time.time(), events], use_bin_type=True)
    buffer.append((seq, payload))
    if send:
        pub.send_multipart([b"kv-events", seq.to_bytes(8, "big"), payload])
    seq += 1


def serve_replay():
    while router.poll(0):
        frames = router.recv_multipart()
        if len(frames) != 3:
            continue
        ident, _, start = frames
        start = int.from_bytes(start, "big")
        for s, buf in buffer:
            if s >= start:
                router.send_multipart([ident, b"", s.to_bytes(8, "big"), buf])
        router.send_multipart([ident, b"", END_SEQ, b""])


def stored(hashes, parent, first_token):
    tokens = list(range(first_token, first_token + 16 * len(hashes)))
    return ["BlockStored", hashes, parent, tokens, 16, None, "GPU", None]


H = [2**63 + 1, 2**63 + 2, 2**63 + 3, 2**63 + 4]  # uint64 hashes: msgpack 0xcf
while not select.select([sys.stdin], [], [], 0.05)[0]:
    publish([])
    serve_replay()
sys.stdin.readline()
publish([stored(H[0:2], None, 0)])           # blocks A, B
publish([stored(H[2:3], H[1], 32)], False)   # block C: lost on the live socket
# Newer vLLM (08ee3e54203f, vMaroon/vllm) writes events as tagged maps
# inside the array batch: the last two batches are in that form.
publish([{"type": "BlockStored", "block_hashes": H[3:4], "parent_block_hash": H[2],
          "token_ids": list(range(48, 64)), "block_size": 16, "lora_id": None,
          "medium": "GPU", "lora_name": None, "group_idx": 0}])  # block D: reveals the gap
publish([{"type": "BlockRemoved", "block_hashes": [H[3]], "medium": "GPU"}])  # D evicted
print(seq - 1, flush=True)  # the scenario's last sequence number
while True:
    serve_replay()
    if select.select([sys.stdin], [], [], 0.02)[0] and not sys.stdin.readline():
        break

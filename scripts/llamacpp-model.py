#!/usr/bin/env python3
"""Writes a small llama-architecture model with seeded random weights, for
llama.cpp's server in infergate's tests and benchmarks.

    llamacpp-model.py SRC OUT.gguf

SRC is llama.cpp's source tree: its gguf-py writes the file and its
models/ggml-vocab-llama-spm.gguf gives the vocabulary (Llama 2's 32000
SentencePiece tokens). The answers are nonsense, but the server's batching,
slots, prompt cache, timings and metrics are the engine's own.

Random weights would sample byte-fallback tokens (<0x80> and friends),
whose text alone is invalid UTF-8, and the server then fails the request
mid-stream; they, and the control tokens, are made unsampleable: every
token embedding has a constant first component that no layer writes to
(attn_output's and ffn_down's first rows are zero), so after the final
norm that component is positive, and those tokens' output rows weigh it
at -64. End-of-sequence is among them: answers run to max_tokens (or the
server's -n), which is what a measurement wants.
"""

import sys

import numpy as np

N_EMBD = 512
N_LAYER = 6
N_HEAD = 8
N_HEAD_KV = 8
N_FF = 1408
N_CTX_TRAIN = 8192
SEED = 20261207

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, src + "/gguf-py")
    import gguf  # noqa: E402  (from the source tree, not an installed copy)

    vocab = gguf.GGUFReader(src + "/models/ggml-vocab-llama-spm.gguf")

    def field(name):
        return vocab.fields[name]

    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]) for i in field("tokenizer.ggml.tokens").data]
    scores = [float(field("tokenizer.ggml.scores").parts[i][0]) for i in field("tokenizer.ggml.scores").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    n_vocab = len(tokens)

    rng = np.random.default_rng(SEED)

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("infergate-tiny")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    embd = normal((n_vocab, N_EMBD), 0.05)
    embd[:, 0] = 1.0
    w.add_tensor("token_embd.weight", embd)
    for i in range(N_LAYER):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", normal((N_EMBD, N_EMBD), 0.04))
        w.add_tensor(p + "attn_k.weight", normal((N_EMBD, N_EMBD), 0.04))
        w.add_tensor(p + "attn_v.weight", normal((N_EMBD, N_EMBD), 0.04))
        o = normal((N_EMBD, N_EMBD), 0.02)
        o[0, :] = 0
        w.add_tensor(p + "attn_output.weight", o)
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", normal((N_FF, N_EMBD), 0.04))
        w.add_tensor(p + "ffn_up.weight", normal((N_FF, N_EMBD), 0.04))
        d = normal((N_EMBD, N_FF), 0.02)
        d[0, :] = 0
        w.add_tensor(p + "ffn_down.weight", d)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    head = normal((n_vocab, N_EMBD), 0.12)
    head[:, 0] = 0
    normal_type = int(gguf.TokenType.NORMAL)
    for t, ty in enumerate(types):
        if ty != normal_type:
            head[t, 0] = -64
    w.add_tensor("output.weight", head)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

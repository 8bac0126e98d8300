#!/usr/bin/env python3
"""Writes an F16 GGUF with a real model's decoder shapes and random weights, for speed benchmarks only.

SmolLM2's own files have 576-wide rows, which are not whole K-quant super-blocks of 256: their "Q4_K_M" is mostly
Q5_0 and says little about the Q4_K/Q6_K kernels. This writes a `llama` GGUF at another model's shapes with
SmolLM2's tokenizer (vocab 49152, tied embedding), so that llama.cpp's own `llama-quantize` makes the block-type
plan it makes for that model (Q4_K_M: Q4_K with Q6_K for the embedding, half the `attn_v` and `ffn_down`), then
`scripts/bench-blocks.sh FILE.gguf` runs ours and llama.cpp on it. The tokens it generates mean nothing.

    python3 scripts/bench_shaped_gguf.py OUT.gguf [SHAPE]      # SHAPE: llama-3.2-1b (default), qwen2.5-0.5b-body
    target/llama.cpp/build/bin/llama-quantize OUT.gguf OUT.Q4_K_M.gguf Q4_K_M

Needs gguf-py (`pip install gguf`) and models/smollm2 (scripts/setup.sh). Never run by setup or CI.
"""
import sys

import gguf
import numpy as np

# hidden, ffn, blocks, heads, kv heads, rope base (published configs; vocab is SmolLM2's).
SHAPES = {
    "llama-3.2-1b": (2048, 8192, 16, 32, 8, 500000.0),
    "qwen2.5-0.5b-body": (896, 4864, 24, 14, 2, 1000000.0),
}


def main():
    out = sys.argv[1]
    hidden, ffn, blocks, heads, kv_heads, rope_base = SHAPES[sys.argv[2] if len(sys.argv) > 2 else "llama-3.2-1b"]
    src = gguf.GGUFReader("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").fields
    strings = lambda key: [bytes(src[key].parts[i]) for i in src[key].data]
    vocab, head_dim = len(src["tokenizer.ggml.tokens"].data), hidden // heads
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"{sys.argv[2] if len(sys.argv) > 2 else 'llama-3.2-1b'}-shaped, random weights")
    w.add_block_count(blocks)
    w.add_context_length(8192)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(rope_base)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(strings("tokenizer.ggml.tokens"))
    w.add_token_types([int(src["tokenizer.ggml.token_type"].parts[i][0]) for i in src["tokenizer.ggml.token_type"].data])
    w.add_token_merges(strings("tokenizer.ggml.merges"))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(src["tokenizer.chat_template"].contents())
    rng = np.random.default_rng(1)
    matrix = lambda rows, cols: (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
    ones = lambda n: np.ones(n, np.float32)
    w.add_tensor("token_embd.weight", matrix(vocab, hidden))
    w.add_tensor("output_norm.weight", ones(hidden))
    for i in range(blocks):
        for name, value in [
            ("attn_norm", ones(hidden)),
            ("attn_q", matrix(heads * head_dim, hidden)),
            ("attn_k", matrix(kv_heads * head_dim, hidden)),
            ("attn_v", matrix(kv_heads * head_dim, hidden)),
            ("attn_output", matrix(hidden, heads * head_dim)),
            ("ffn_norm", ones(hidden)),
            ("ffn_gate", matrix(ffn, hidden)),
            ("ffn_up", matrix(ffn, hidden)),
            ("ffn_down", matrix(hidden, ffn)),
        ]:
            w.add_tensor(f"blk.{i}.{name}.weight", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

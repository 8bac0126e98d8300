#!/usr/bin/env python3
"""Micro Llama GGUFs (1 block, hidden 32, 2 heads over 1 KV head, FFN 32, 32 tokens) as seeds for the
`gguf_reader` fuzz target: a few KB each, so libFuzzer mutates whole models at thousands of executions per second
(the tiny-llama goldens are 58-367 KB). Written by llama.cpp's gguf-py with random weights:

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python fuzz/micro_gguf.py fuzz/corpus/gguf_reader
"""
import pathlib
import sys

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGMLQuantizationType as T

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
H, HEADS, KV, FFN, VOCAB = 32, 2, 1, 32, 32
HD = H // HEADS
rng = np.random.default_rng(7)

for name, ty in [("f32", T.F32), ("f16", T.F16), ("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1)]:
    w = GGUFWriter(str(out / f"micro-{name}.gguf"), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def mat(tname, rows, cols):
        v = rng.standard_normal((rows, cols)).astype(np.float32) * 0.1
        if ty == T.F32:
            w.add_tensor(tname, v)
        elif ty == T.F16:
            w.add_tensor(tname, v.astype(np.float16))
        else:
            w.add_tensor(tname, quants.quantize(v, ty), raw_dtype=ty)

    def norm(tname):
        w.add_tensor(tname, np.ones(H, dtype=np.float32))

    mat("token_embd.weight", VOCAB, H)
    norm("blk.0.attn_norm.weight")
    mat("blk.0.attn_q.weight", H, H)
    mat("blk.0.attn_k.weight", KV * HD, H)
    mat("blk.0.attn_v.weight", KV * HD, H)
    mat("blk.0.attn_output.weight", H, H)
    norm("blk.0.ffn_norm.weight")
    mat("blk.0.ffn_gate.weight", FFN, H)
    mat("blk.0.ffn_up.weight", FFN, H)
    mat("blk.0.ffn_down.weight", H, FFN)
    norm("output_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

#!/usr/bin/env python3
"""Micro HF Llama models (config.json, a 0 byte, one safetensors file) as seeds for the `safetensors_hf` fuzz
target: 1 layer, hidden 32, 2 heads over 1 KV head, FFN 32, 32 tokens, in F32, F16 and BF16, tied and untied; a
few KB each, so libFuzzer mutates whole models at thousands of executions per second (the tiny-llama seeds are
up to 350 KB). The safetensors layout is written here with the standard library (header length, JSON header,
data), random weights:

    python3 fuzz/micro_hf.py fuzz/corpus/safetensors_hf
"""
import json
import pathlib
import random
import struct
import sys

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
H, HEADS, KV, FFN, VOCAB = 32, 2, 1, 32, 32
HD = H // HEADS
rng = random.Random(7)


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    # BF16: the high half of each float32.
    return b"".join(struct.pack("<f", v)[2:] for v in values)


for dtype in ["F32", "F16", "BF16"]:
    for tied in [True, False]:
        shapes = {
            "model.embed_tokens.weight": [VOCAB, H],
            "model.norm.weight": [H],
            "model.layers.0.input_layernorm.weight": [H],
            "model.layers.0.post_attention_layernorm.weight": [H],
            "model.layers.0.self_attn.q_proj.weight": [H, H],
            "model.layers.0.self_attn.k_proj.weight": [KV * HD, H],
            "model.layers.0.self_attn.v_proj.weight": [KV * HD, H],
            "model.layers.0.self_attn.o_proj.weight": [H, H],
            "model.layers.0.mlp.gate_proj.weight": [FFN, H],
            "model.layers.0.mlp.up_proj.weight": [FFN, H],
            "model.layers.0.mlp.down_proj.weight": [H, FFN],
        }
        if not tied:
            shapes["lm_head.weight"] = [VOCAB, H]
        header, data = {}, b""
        for name, shape in shapes.items():
            count = 1
            for d in shape:
                count *= d
            norm = name.endswith("norm.weight")
            values = [1.0 + 0.1 * rng.uniform(-1, 1) if norm else 0.1 * rng.uniform(-1, 1) for _ in range(count)]
            raw = encode(values, dtype)
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": 1,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV,
            "max_position_embeddings": 64,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "vocab_size": VOCAB,
            "tie_word_embeddings": tied,
            "eos_token_id": 2,
        }
        name = f"micro-{dtype.lower()}-{'tied' if tied else 'untied'}"
        (out / name).write_bytes(json.dumps(config).encode() + b"\0" + struct.pack("<Q", len(head)) + head + data)

#!/usr/bin/env python3
"""Writes testdata/sample/decoder.entity: a small transformer-like Loom network for the app's screenshots and tests.

An embedding, 6 identical decoder blocks (pre-norm attention with a residual, pre-norm SwiGLU with a residual,
the layout of the corpus's transformer cases), a final RMSNorm and an LM head, with mixed dtypes. Loom itself
(welvet 0.80.0) quantizes the float32 masters and writes the file. Deterministic: re-run to regenerate.
"""
import base64
import json
import os
import random
import struct

import welvet

D, HEADS, KV_HEADS, FF, VOCAB, BLOCKS = 16, 4, 2, 32, 32, 6
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "sample", "decoder.entity")
rng = random.Random(7)


def weights(n, scale=0.4):
    return base64.b64encode(struct.pack(f"<{n}f", *(rng.uniform(-scale, scale) for _ in range(n)))).decode()


def layer(type_, dtype, n, **fields):
    out = {"z": 0, "y": 0, "x": 0, "l": 0, "type": type_, "activation": "Linear", "dtype": dtype, **fields}
    if n:
        out.update(weights=weights(n), scale=1)
    return out


def residual_block(inner):
    norm = layer("RMSNorm", "float32", D, input_height=D, output_height=D)
    seq = layer("Sequential", "int8", 0, sequential_layers=[norm, inner])
    return layer("Parallel", "int8", 0, combine_mode="add", parallel_branches=[seq, layer("Residual", "int8", 0)])


def main():
    head_dim = D // HEADS
    kv = KV_HEADS * head_dim
    attn = lambda: layer("MultiHeadAttention", "int8", D * D + 2 * kv * D + D * D + D + 2 * kv + D,
                         d_model=D, num_heads=HEADS, num_kv_heads=KV_HEADS)
    mlp = lambda: layer("SwiGLU", "int4", 3 * D * FF + 2 * FF + D, input_height=D, output_height=FF)
    layers = [layer("Embedding", "float16", VOCAB * D, vocab_size=VOCAB, embedding_dim=D)]
    for _ in range(BLOCKS):
        layers += [residual_block(attn()), residual_block(mlp())]
    layers += [layer("RMSNorm", "float32", D, input_height=D, output_height=D),
               layer("Dense", "bfloat16", D * VOCAB, input_height=D, output_height=VOCAB)]
    for i, l in enumerate(layers):
        l["l"] = i
    spec = {"id": "decoder-sample", "depth": 1, "rows": 1, "cols": 1, "layers_per_cell": len(layers), "layers": layers}
    net = welvet.Network.deserialize(json.dumps(spec))
    with open(OUT, "wb") as f:
        f.write(bytes(net.serialize_entity()))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

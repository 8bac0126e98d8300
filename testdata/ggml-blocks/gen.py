#!/usr/bin/env python3
"""Test vectors for ggml's block types and Loom's repacked Q4_0, made with llama.cpp's reference Python (gguf-py).

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python testdata/ggml-blocks/gen.py

For each type, a matrix W [rows][cols] as a GGUF tensor stores it:
- `<type>.bin`: the block bytes. Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / F16 / BF16 / F32: `gguf.quants.quantize` of
  seeded random float32 weights (rows of different character: normal, tiny values whose f16 scale is subnormal,
  all zeros, large, all positive, outliers). Q4_K / Q5_K / Q6_K (gguf-py cannot quantize them): random block
  bytes with plausible f16 `d` / `dmin`. LoomQ4_0 (20-byte blocks: f32 scale + 16 bytes of 4-bit two's-complement
  nibbles, element 2j low): random nibbles and scales.
- `<type>.f32`: `gguf.quants.dequantize` of those bytes (for LoomQ4_0 numpy's `q * s` in float32), little-endian.
- `<type>.x.f32`: seeded random activations X [5][cols] (float32).
- `<type>.y.f32`: X · Wᵀ [5][rows] in float64 (numpy) from the dequantized float32 W, stored as float32.
`manifest.json` records each type's shape and the versions; the top-level rows / cols are those of the Q4_0 /
Q4_1 / Q8_0 files the GPU tests read. Re-running gives identical files.
crate/tests/quant_blocks.rs checks our dequantizer and matmul against these; crate/tests/gpu_matvec_packed.rs the
GPU block kernels.
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 7, 96  # 21 blocks of 32: an odd count, so blocks start at both 0 and 2 bytes into a u32 word
TOKENS = 5

here = pathlib.Path(__file__).resolve().parent
rng = np.random.default_rng(20260521)
w = np.empty((ROWS, COLS), dtype=np.float32)
w[0] = rng.standard_normal(COLS)
w[1] = rng.standard_normal(COLS) * 1e-5  # d is an f16 subnormal (below 6.1e-5)
w[2] = 0.0  # d = 0
w[3] = rng.standard_normal(COLS) * 300.0
w[4] = rng.uniform(0.5, 2.0, COLS)  # Q4_1 min > 0
w[5] = rng.standard_normal(COLS) * 0.02
w[5, ::17] = 1.5  # outliers
w[6] = rng.uniform(-1.0, 1.0, COLS)

manifest = {
    "generator": "gen.py",
    "gguf": importlib.metadata.version("gguf"),
    "numpy": np.__version__,
    "rows": ROWS,
    "cols": COLS,
    "tokens": TOKENS,
    "types": {},
}


def write(name: str, blocks: np.ndarray, values: np.ndarray, rows: int, cols: int) -> None:
    values = values.astype("<f4").reshape(rows, cols)
    x = rng.standard_normal((TOKENS, cols)).astype("<f4")
    y = (x.astype(np.float64) @ values.astype(np.float64).T).astype("<f4")
    (here / f"{name}.bin").write_bytes(blocks.tobytes())
    (here / f"{name}.f32").write_bytes(values.tobytes())
    (here / f"{name}.x.f32").write_bytes(x.tobytes())
    (here / f"{name}.y.f32").write_bytes(y.tobytes())
    manifest["types"][name] = {"rows": rows, "cols": cols, "bytes": int(blocks.nbytes), "values": int(values.size)}


def gguf_py(name: str, qt: T, m: np.ndarray) -> None:
    blocks = quants.quantize(m, qt)
    values = quants.dequantize(blocks, qt)
    assert values.shape == m.shape
    write(name, blocks, values, *m.shape)


# The Q4_0 / Q4_1 / Q8_0 files come first, so their bytes stay those of earlier versions of this script.
for name, qt in (("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0), ("q5_0", T.Q5_0), ("q5_1", T.Q5_1)):
    gguf_py(name, qt, w)

# Plain floats: a column count that is no multiple of a SIMD width; F16 rows include subnormals and ±65504.
wf = rng.standard_normal((ROWS, 100)).astype(np.float32)
wf[1] *= 1e-6
wf[2, :4] = [65504.0, -65504.0, 6e-8, -0.0]
for name, qt in (("f32", T.F32), ("f16", T.F16), ("bf16", T.BF16)):
    gguf_py(name, qt, wf)

# K-quants: 5 rows of 512 (2 super-blocks of 256); random bytes, then plausible halves for d (and dmin).
K_ROWS, K_COLS = 5, 512
for name, qt, d_at, dmin_at in (("q4_k", T.Q4_K, 0, 2), ("q5_k", T.Q5_K, 0, 2), ("q6_k", T.Q6_K, 208, None)):
    size = quants.GGML_QUANT_SIZES[qt][1]
    blocks = rng.integers(0, 256, (K_ROWS * K_COLS // 256, size), dtype=np.uint8)
    d = rng.uniform(1e-4, 2e-3, len(blocks)).astype(np.float16)
    d[1] = np.float16(3e-6)  # subnormal
    d[2] = 0
    blocks[:, d_at:d_at + 2] = d.view(np.uint8).reshape(-1, 2)
    if dmin_at is not None:
        dmin = rng.uniform(1e-4, 2e-3, len(blocks)).astype(np.float16)
        blocks[:, dmin_at:dmin_at + 2] = dmin.view(np.uint8).reshape(-1, 2)
    blocks = blocks.reshape(K_ROWS, -1)
    values = quants.dequantize(blocks, qt)
    assert values.shape == (K_ROWS, K_COLS)
    write(name, blocks, values, K_ROWS, K_COLS)

# Loom's Q4_0 repacked: 7 rows of 96, value q * s in float32.
n_blocks = ROWS * COLS // 32
scales = (rng.uniform(0.01, 0.2, n_blocks) * rng.choice([1.0, -1.0], n_blocks)).astype("<f4")
scales[2] = 0.0
nibbles = rng.integers(0, 256, (n_blocks, 16), dtype=np.uint8)
lo = ((nibbles & 0x0F).astype(np.int8) ^ 8) - 8
hi = ((nibbles >> 4).astype(np.int8) ^ 8) - 8
q = np.stack([lo, hi], axis=-1).reshape(n_blocks, 32).astype(np.float32)
values = q * scales.reshape(-1, 1)
blocks = np.concatenate([scales.reshape(-1, 1).view(np.uint8), nibbles], axis=1)
write("loomq4_0", blocks, values, ROWS, COLS)

(here / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

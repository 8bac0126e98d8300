#!/usr/bin/env python3
"""Test vectors for llama.cpp's Q4_0 / Q4_1 / Q8_0 blocks, made with llama.cpp's reference Python (gguf-py).

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python testdata/ggml-blocks/gen.py

For each type: seeded random float32 weights [ROWS][COLS] (rows of different character: normal, tiny values whose
f16 scale is subnormal, all zeros, large, all positive, outliers) → `gguf.quants.quantize` → `<type>.bin` (the
block bytes, as a GGUF tensor stores them) and `<type>.f32` (`gguf.quants.dequantize` of those bytes,
little-endian float32). `manifest.json` records the shape and the versions. Re-running gives identical files.
crate/tests/gpu_matvec_packed.rs checks our CPU dequantizer (crate/src/dtype/ggml.rs) against these bit for bit.
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 7, 96  # 21 blocks of 32: an odd count, so blocks start at both 0 and 2 bytes into a u32 word

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
    "types": {},
}
for name, qt in (("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q8_0", T.Q8_0)):
    blocks = quants.quantize(w, qt)
    values = quants.dequantize(blocks, qt).astype("<f4")
    assert values.shape == w.shape
    (here / f"{name}.bin").write_bytes(blocks.tobytes())
    (here / f"{name}.f32").write_bytes(values.tobytes())
    manifest["types"][name] = {"bytes": int(blocks.nbytes), "values": int(values.size)}
(here / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

#!/usr/bin/env python3
"""A safetensors file holding NaN, +Inf, -Inf and two far outliers, and its statistics, from numpy and the
`safetensors` package (not from loom-wasm):

    python3 testdata/nonfinite/gen.py        # numpy 2.x, safetensors 0.8

`nonfinite.safetensors`: one F32 tensor `outliers.weight`, shape [40, 50]: the values -1, -0.5, 0, 0.5, 1 repeated,
then 3 NaN, 2 +Inf, 1 -Inf, -1e4 and 1e4 written over some of them.

`expected.json`: count (every element), nan / pos_inf / neg_inf, and min, max, mean, std (ddof 0) over the finite
values in float64; `below` / `above`: finite values under numpy's 0.1th and over its 99.9th percentile (the range
the app's clipped histogram shows).
"""
import json
import pathlib

import numpy as np
from safetensors.numpy import save_file

HERE = pathlib.Path(__file__).parent

w = np.tile(np.array([-1, -0.5, 0, 0.5, 1], dtype=np.float32), 400)
w[[7, 300, 1999]] = np.nan
w[[11, 1200]] = np.inf
w[5] = -np.inf
w[42] = -1e4
w[1500] = 1e4
w = w.reshape(40, 50)
save_file({"outliers.weight": w}, str(HERE / "nonfinite.safetensors"))

finite = w[np.isfinite(w)].astype(np.float64)
lo, hi = np.percentile(finite, [0.1, 99.9])
expected = {
    "tensor": "outliers.weight",
    "count": int(w.size),
    "nan": int(np.isnan(w).sum()),
    "pos_inf": int(np.isposinf(w).sum()),
    "neg_inf": int(np.isneginf(w).sum()),
    "min": float(finite.min()),
    "max": float(finite.max()),
    "mean": float(finite.mean()),
    "std": float(finite.std()),
    "below": int((finite < lo).sum()),
    "above": int((finite > hi).sum()),
}
(HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")

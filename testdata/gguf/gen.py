#!/usr/bin/env python3
"""Expected GGUF headers and tensor statistics, from llama.cpp's gguf-py and numpy (not from loom-wasm).

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python testdata/gguf/gen.py

Inputs: the tiny-llama files of /work/shared/golden/tiny-llama (model.{f32,f16,q8_0,q4_0,q4_1}.gguf and
model.f16.safetensors, copied here unchanged; see that README for how they were made) and Loom's conformance corpus
(testdata/conformance, Dense layers of a few dtypes).

Output `expected.json`:
- `gguf.<file>`: version, alignment, data offset, every metadata key (scalars and strings in full, arrays as item
  type, length and first items) and every tensor (name, ne, ggml type, absolute data offset, bytes, elements), as
  `gguf.GGUFReader` reads them.
- `stats`: per file and tensor (or Loom layer path), statistics of the dequantized values in float64 numpy: count,
  min, max, mean, std (ddof 0), sparsity (share of exact zeros), a 16-bin `np.histogram` over [min, max], the first
  8 values as float32 hex and the first 8 stored codes. GGUF tensors are dequantized by `gguf.quants.dequantize`;
  codes are read straight from the block bytes (Q4_0/Q4_1: element j < 16 is the low nibble of qs[j], element
  j + 16 its high nibble; Q8_0: the signed bytes; F16: the half bits). safetensors F16 values are numpy float16, codes
  their bits. Loom layers follow spec §3 (int8/int4: signed code × scale in float32, int4 MSB-first nibbles; uint8:
  code × scale; float16: half → float32; float32: as stored), read from `loom.json`'s base64 weights and scale.
- `diff`: max and mean absolute differences of the dequantized values between two files, per tensor or layer.
"""
import base64
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

here = pathlib.Path(__file__).resolve().parent
corpus = here.parent / "conformance" / "cases"
BINS = 16
PREVIEW = 8


def stats(values, codes):
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    v64 = v.astype(np.float64)
    finite = v64[np.isfinite(v64)]
    lo, hi = float(finite.min()), float(finite.max())
    counts, edges = np.histogram(finite, bins=BINS, range=(lo, hi) if lo < hi else None)
    return {
        "count": int(v.size),
        "min": lo,
        "max": hi,
        "mean": float(finite.mean()),
        "std": float(finite.std()),
        "sparsity": float(np.count_nonzero(v64 == 0.0) / v.size),
        "non_finite": int(v.size - finite.size),
        "histogram": {"min": float(edges[0]), "max": float(edges[-1]), "counts": [int(c) for c in counts]},
        "first_f32_hex": v[:PREVIEW].astype("<f4").tobytes().hex(),
        "first_codes": None if codes is None else [int(c) for c in codes[:PREVIEW]],
    }


def ggml_codes(ttype, raw):
    """The first stored codes of a tensor, from its raw block bytes (gguf-py gives F16 data as float16)."""
    if ttype == T.F16:
        return np.asarray(raw).view("<u2").reshape(-1)
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if ttype in (T.Q4_0, T.Q4_1):
        start = 2 if ttype == T.Q4_0 else 4
        qs = raw[start : start + 16]
        return np.concatenate([qs & 0xF, qs >> 4])
    if ttype == T.Q8_0:
        return raw[2:34].view(np.int8)
    return None


def value_of(field):
    t = field.types[0]
    if t == GGUFValueType.ARRAY:
        item = GGUFValueType(int(field.parts[3][0]))  # parts: key len, key, type, item type, count, items
        items = [field.parts[i] for i in field.data]
        if item == GGUFValueType.STRING:
            head = [bytes(x).decode("utf-8", errors="replace") for x in items[:4]]
        else:
            head = [x.tolist()[0] for x in items[:4]]
        return {"type": "array", "item_type": item.name.lower(), "len": len(field.data), "head": head}
    part = field.parts[field.data[0]]
    if t == GGUFValueType.STRING:
        return {"type": "string", "value": bytes(part).decode("utf-8", errors="replace")}
    return {"type": t.name.lower(), "value": part.tolist()[0]}


out = {
    "generator": "gen.py",
    "gguf": importlib.metadata.version("gguf"),
    "numpy": np.__version__,
    "bins": BINS,
    "gguf_files": {},
    "stats": {},
}

for path in sorted(here.glob("*.gguf")):
    r = GGUFReader(path)
    version = r.fields["GGUF.version"].parts[-1].tolist()[0]
    meta = {k: value_of(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = []
    file_stats = {}
    for t in r.tensors:
        tensors.append(
            {
                "name": t.name,
                "ne": [int(d) for d in t.shape],
                "type": t.tensor_type.name,
                "offset": int(t.data_offset),
                "bytes": int(t.n_bytes),
                "elements": int(t.n_elements),
            }
        )
        values = quants.dequantize(t.data, t.tensor_type)
        file_stats[t.name] = stats(values, ggml_codes(t.tensor_type, t.data))
    out["gguf_files"][path.name] = {
        "version": int(version),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "metadata": meta,
        "tensors": tensors,
    }
    out["stats"][path.name] = file_stats


def safetensors_stats(path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    result = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F16", info
        s, e = info["data_offsets"]
        bits = np.frombuffer(data[s:e], dtype="<u2")
        result[name] = stats(bits.view(np.float16).astype(np.float32), bits)
    return result


out["stats"]["model.f16.safetensors"] = safetensors_stats(here / "model.f16.safetensors")


def loom_dense(dtype):
    doc = json.loads((corpus / f"layer_Dense_{dtype}" / "loom.json").read_text())
    layer = doc["layers"][0]
    raw = np.frombuffer(base64.b64decode(layer["weights"]), dtype=np.uint8)
    scale = np.float32(layer.get("scale", 1.0))
    n = int(layer["input_height"]) * int(layer["output_height"])
    if dtype == "float32":
        return raw.view("<f4")[:n], None
    if dtype == "float16":
        bits = raw.view("<u2")[:n]
        return bits.view(np.float16).astype(np.float32), bits
    if dtype == "int8":
        codes = raw.view(np.int8)[:n]
        return codes.astype(np.float32) * scale, codes
    if dtype == "uint8":
        codes = raw[:n]
        return codes.astype(np.float32) * scale, codes
    if dtype == "int4":
        nibbles = np.stack([raw >> 4, raw & 0xF], axis=1).reshape(-1)[:n].astype(np.int8)
        codes = np.where(nibbles > 7, nibbles - 16, nibbles)
        return codes.astype(np.float32) * scale, codes
    raise ValueError(dtype)


for dtype in ["float32", "float16", "int8", "uint8", "int4"]:
    values, codes = loom_dense(dtype)
    out["stats"][f"layer_Dense_{dtype}/loom.entity"] = {"layers.0": stats(values, codes)}



def diff(before, after):
    """Per name: max and mean |after - before| over equal-length value arrays."""
    out = {}
    for name, a in before.items():
        b = after[name]
        d = np.abs(b.astype(np.float64) - a.astype(np.float64))
        out[name] = {"max_abs": float(d.max()), "mean_abs": float(d.mean())}
    return out


def gguf_values(name):
    r = GGUFReader(here / name)
    return {t.name: quants.dequantize(t.data, t.tensor_type).reshape(-1) for t in r.tensors}


out["diff"] = {
    "model.f32.gguf -> model.q8_0.gguf": diff(gguf_values("model.f32.gguf"), gguf_values("model.q8_0.gguf")),
    "layer_Dense_int8 -> layer_Dense_int4": diff(
        {"layers.0": loom_dense("int8")[0]}, {"layers.0": loom_dense("int4")[0]}
    ),
}

(here / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
print("wrote", here / "expected.json")

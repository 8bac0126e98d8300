#!/usr/bin/env python3
"""Expected GGUF headers and tensor statistics, from llama.cpp's gguf-py and numpy (not from loom-wasm).

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python testdata/gguf/gen.py

Inputs: the tiny-llama files of /work/shared/golden/tiny-llama (model.{f32,f16,q8_0,q4_0,q4_1}.gguf and
model.f16.safetensors, copied here unchanged; see that README for how they were made) and Loom's conformance corpus
(testdata/conformance, Dense layers of a few dtypes).

Written here first (deterministic, re-running gives identical files):
- `blocks.gguf`: one tensor per block type the runtime dequantizes (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
  Q4_K, Q5_K, Q6_K), the block bytes of testdata/ggml-blocks (made by gguf-py; see its gen.py), written by
  `gguf.GGUFWriter`.
- `mixed.gguf`: the tiny llama (model.f32.gguf's tensors) with a llama.cpp-style quantization mix made by
  `gguf.quants.quantize`: norms F32, token_embd Q8_0, attn_v/ffn_down a wider type than the other matrices and a
  different one per block (as Q4_K_M does).

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
- `codes`: for blocks.gguf, each tensor's first CODES elements as stored: the integer code of each element, and per
  group of elements that share a scale (a block, or a K-quant sub-block) its float32 `scale`, `min` and the code's
  `zero`, so that value = scale·(code − zero) + min in float32; read from the block bytes with numpy (K-quant
  sub-block scales by gguf-py's `Q4_K.get_scale_min`), and checked here to give gguf-py's dequantized values.
- `diff`: max and mean absolute differences of the dequantized values between two files, per tensor or layer.
"""
import base64
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

here = pathlib.Path(__file__).resolve().parent
corpus = here.parent / "conformance" / "cases"
BINS = 16
PREVIEW = 8
CODES = 48  # the app's tensor preview length


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


def half(raw):
    return raw.copy().view("<f2").astype(np.float32).reshape(-1)


def q5_codes(qh, qs):
    """Q5_0/Q5_1: element j < 16 is the low nibble of qs[j], j + 16 its high nibble; bit j of qh is bit 4."""
    low = np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int32)
    bits = (qh.copy().view("<u4").reshape(-1, 1) >> np.arange(32, dtype=np.uint32)) & 1
    return low | (bits.astype(np.int32) << 4)


def block_codes(ttype, raw):
    """(codes, scale, min, zero, group): every element's stored integer code and, per group of `group` elements
    sharing a scale, float32 scale and min, with value = scale * (code - zero) + min. None for plain floats."""
    size = quants.GGML_QUANT_SIZES[ttype][1]
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, size)
    zeros = lambda n: np.zeros(n, dtype=np.float32)
    if ttype in (T.Q4_0, T.Q4_1):
        qs = b[:, 2:18] if ttype == T.Q4_0 else b[:, 4:20]
        codes = np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int32)
        m = zeros(len(b)) if ttype == T.Q4_0 else half(b[:, 2:4])
        return codes, half(b[:, :2]), m, 8 if ttype == T.Q4_0 else 0, 32
    if ttype == T.Q5_0:
        return q5_codes(b[:, 2:6], b[:, 6:22]), half(b[:, :2]), zeros(len(b)), 16, 32
    if ttype == T.Q5_1:
        return q5_codes(b[:, 4:8], b[:, 8:24]), half(b[:, :2]), half(b[:, 2:4]), 0, 32
    if ttype == T.Q8_0:
        return b[:, 2:34].view(np.int8).astype(np.int32), half(b[:, :2]), zeros(len(b)), 0, 32
    if ttype in (T.Q4_K, T.Q5_K):
        d, dmin = half(b[:, :2]).reshape(-1, 1), half(b[:, 2:4]).reshape(-1, 1)
        sc, m = quants.Q4_K.get_scale_min(b[:, 4:16])
        qs = b[:, 16:144] if ttype == T.Q4_K else b[:, 48:176]
        # Sub-block s: nibble s % 2 of bytes 32 * (s // 2) .. + 32; Q5_K: bit s of qh[l] is bit 4.
        codes = np.stack([(qs[:, 32 * (s // 2):32 * (s // 2) + 32] >> (4 * (s % 2))) & 0xF for s in range(8)], axis=1)
        codes = codes.astype(np.int32)
        if ttype == T.Q5_K:
            qh = b[:, 16:48]
            codes |= np.stack([((qh >> s) & 1).astype(np.int32) << 4 for s in range(8)], axis=1)
        scale = (d * sc.astype(np.float32)).reshape(-1)
        mins = -(dmin * m.astype(np.float32)).reshape(-1)
        return codes.reshape(len(b), -1), scale, mins, 0, 32
    if ttype == T.Q6_K:
        ql, qh, sc, d = b[:, :128], b[:, 128:192], b[:, 192:208].view(np.int8), half(b[:, 208:210])
        e = np.arange(256)
        h, r = e // 128, e % 128
        lo = (ql[:, 64 * h + r % 64] >> (4 * (r // 64)).astype(np.uint8)) & 0xF
        hi = (qh[:, 32 * h + r % 32] >> (2 * (r // 32)).astype(np.uint8)) & 3
        codes = (lo | (hi << 4)).astype(np.int32)
        scale = (d.reshape(-1, 1) * sc.astype(np.float32)).reshape(-1)
        return codes, scale, zeros(scale.size), 32, 16
    return None


def ggml_codes(ttype, raw):
    """The first stored codes of a tensor, from its raw block bytes (gguf-py gives F16 data as float16)."""
    if ttype in (T.F16, T.BF16):
        return np.asarray(raw).view("<u2").reshape(-1)
    found = block_codes(ttype, raw)
    return None if found is None else found[0].reshape(-1)


def codes_record(ttype, raw, values):
    """The `codes` entry of one tensor: its first CODES elements, checked against gguf-py's dequantized values."""
    codes, scale, mins, zero, group = block_codes(ttype, raw)
    codes = codes.reshape(-1)
    g = np.repeat(np.arange(scale.size), group)
    rebuilt = scale[g] * (codes - zero).astype(np.float32) + mins[g]
    assert np.array_equal(rebuilt, np.asarray(values, dtype=np.float32).reshape(-1)), ttype
    n = CODES
    groups = -(-n // group)
    f32hex = lambda a: [np.float32(x).tobytes().hex() for x in a]
    return {
        "type": ttype.name,
        "group": group,
        "zero": zero,
        "codes": [int(c) for c in codes[:n]],
        "scale_f32_hex": f32hex(scale[:groups]),
        "min_f32_hex": f32hex(mins[:groups]),
        "values_f32_hex": np.asarray(values, dtype="<f4").reshape(-1)[:n].tobytes().hex(),
    }


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

def write_blocks_gguf():
    blocks = here.parent / "ggml-blocks"
    manifest = json.loads((blocks / "manifest.json").read_text())
    w = GGUFWriter(here / "blocks.gguf", "blocks")
    w.add_name("ggml block types")
    for name in ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]:
        m = manifest["types"][name]
        raw = np.frombuffer((blocks / f"{name}.bin").read_bytes(), dtype=np.uint8).reshape(m["rows"], -1)
        w.add_tensor(f"{name}.weight", raw, raw_dtype=T[name.upper()])  # a byte shape: gguf-py derives ne
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mixed_gguf():
    src = GGUFReader(here / "model.f32.gguf")
    w = GGUFWriter(here / "mixed.gguf", "llama")
    w.add_name("tiny llama, mixed quantization")
    w.add_block_count(2)
    wide = {0: T.Q8_0, 1: T.Q5_1}  # attn_v / ffn_down per block
    for t in src.tensors:
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            qt = T.Q8_0
        elif t.name.endswith("norm.weight"):
            qt = T.F32
        elif parts[2] in ("attn_v", "ffn_down"):
            qt = wide[int(parts[1])]
        else:
            qt = T.Q4_1 if parts[2].startswith("ffn") else T.Q4_0
        data = np.asarray(t.data, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])
        if qt in (T.F32, T.F16):
            w.add_tensor(t.name, data.astype(np.float16 if qt == T.F16 else np.float32))
        else:
            w.add_tensor(t.name, quants.quantize(data, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


write_blocks_gguf()
write_mixed_gguf()
out["codes"] = {"blocks.gguf": {}}

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
        if path.name == "blocks.gguf" and t.tensor_type not in (T.F32, T.F16, T.BF16):
            out["codes"]["blocks.gguf"][t.name] = codes_record(t.tensor_type, t.data, values)
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

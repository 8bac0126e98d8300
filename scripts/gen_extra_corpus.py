#!/usr/bin/env python3
"""Writes testdata/loom-extra: more Loom-written conformance cases, in the layout of testdata/conformance.

Loom itself (welvet 0.80.0, `pip install welvet==0.80.0`) writes every expected byte: each case is a persistence
JSON spec with float32 masters (legacy `native: false`, like the shared corpus), which Loom loads, quantizes and
re-serializes. The shapes and fields differ from the shared corpus on purpose: odd element counts for the packed
dtypes, query_dim, rope bases, temperatures, output modes, paddings, tiles, disabled cells, meta rules, tiny and
huge weights, explicit scales. Re-run to regenerate; the output is deterministic.
"""
import base64
import hashlib
import json
import os
import random
import shutil
import struct
import sys

import welvet

DTYPES = ["float64", "float32", "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "int64", "int32", "int16", "int8",
          "uint64", "uint32", "uint16", "uint8", "int4", "uint4", "fp4", "int2", "uint2", "ternary", "binary"]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "loom-extra")


def weights_b64(n, rng, scale=0.5):
    vals = [rng.uniform(-scale, scale) for _ in range(n)]
    return base64.b64encode(struct.pack(f"<{n}f", *vals)).decode()


def weight_count(l):
    t = l["type"]
    k = l.get("kernel_size") or 1
    i, o = l.get("input_height", 0), l.get("output_height", 0)
    c, f = l.get("input_channels", 0), l.get("filters", 0)
    if t == "Dense":
        return i * o
    if t == "MultiHeadAttention":
        d = l["d_model"]
        q = l.get("query_dim") or d
        kv = l.get("num_kv_heads", l["num_heads"]) * l.get("head_dim", d // l["num_heads"])
        return q * d + 2 * kv * d + d * q + q + 2 * kv + d
    if t == "SwiGLU":
        return 3 * i * o + 2 * o + i
    if t == "RMSNorm":
        return i
    if t == "LayerNorm":
        return 2 * i
    if t in ("RNN", "LSTM"):
        one = o * i + o * o + o
        return one * (4 if t == "LSTM" else 1)
    if t in ("CNN1", "ConvTransposed1D"):
        return f * c * k
    if t in ("CNN2", "ConvTransposed2D"):
        return f * c * k * k
    if t in ("CNN3", "ConvTransposed3D"):
        return f * c * k * k * k
    if t == "Embedding":
        return l["vocab_size"] * l["embedding_dim"]
    if t == "KMeans":
        return l["num_clusters"] * i
    return 0


def with_weights(l, rng, scale=0.5):
    """Adds float32 master weights (legacy native:false) to l and its nested layers."""
    n = weight_count(l)
    if n:
        l["weights"] = weights_b64(n, rng, scale)
        l.setdefault("scale", 1)
    for key in ("parallel_branches", "sequential_layers"):
        for sub in l.get(key, []):
            with_weights(sub, rng, scale)
    if "meta_observed_layer" in l:
        with_weights(l["meta_observed_layer"], rng, scale)
    return l


def net(layers, depth=1, rows=1, cols=1, lpc=None):
    return {"id": "extra", "depth": depth, "rows": rows, "cols": cols,
            "layers_per_cell": lpc if lpc is not None else len(layers), "layers": layers}


def cell(l, idx=0, x=0, y=0, z=0):
    return {"z": z, "y": y, "x": x, "l": idx, **l}


def layer_specs():
    """(name, layer) pairs covering every weighted type with shapes unlike the shared corpus."""
    return [
        ("Dense", {"type": "Dense", "activation": "GELU", "input_height": 7, "output_height": 13}),
        ("DenseTile5", {"type": "Dense", "activation": "LeakyReLU", "input_height": 11, "output_height": 3,
                        "tile_size": 5, "use_tiling": True}),
        ("MHA", {"type": "MultiHeadAttention", "activation": "Linear", "d_model": 6, "num_heads": 4,
                 "num_kv_heads": 2, "head_dim": 2, "query_dim": 8, "rope_freq_base": 500000.5, "seq_length": 3}),
        ("SwiGLU", {"type": "SwiGLU", "activation": "Silu", "input_height": 5, "output_height": 7}),
        ("RMSNorm", {"type": "RMSNorm", "activation": "Linear", "input_height": 9}),
        ("LayerNorm", {"type": "LayerNorm", "activation": "Linear", "input_height": 9}),
        ("RNN", {"type": "RNN", "activation": "Tanh", "input_height": 3, "output_height": 5, "seq_length": 4}),
        ("LSTM", {"type": "LSTM", "activation": "Tanh", "input_height": 2, "output_height": 3, "seq_length": 3}),
        ("CNN1", {"type": "CNN1", "activation": "ReLU", "input_height": 9, "input_channels": 2, "filters": 3,
                  "kernel_size": 3, "stride": 2, "padding": 1, "output_height": 5}),
        ("CNN2", {"type": "CNN2", "activation": "Sigmoid", "input_height": 5, "input_width": 4, "input_channels": 3,
                  "filters": 2, "kernel_size": 2, "stride": 1, "output_height": 4, "output_width": 3}),
        ("CNN3", {"type": "CNN3", "activation": "Tanh", "input_height": 3, "input_width": 3, "input_depth": 4,
                  "input_channels": 2, "filters": 1, "kernel_size": 2, "stride": 1, "output_height": 2,
                  "output_width": 2, "output_depth": 3}),
        ("ConvT1D", {"type": "ConvTransposed1D", "activation": "ReLU", "input_width": 4, "input_channels": 2,
                     "filters": 3, "kernel_size": 3, "stride": 2, "padding": 1, "output_padding": 1,
                     "output_width": 8}),
        ("ConvT2D", {"type": "ConvTransposed2D", "activation": "Linear", "input_height": 2, "input_width": 3,
                     "input_channels": 1, "filters": 2, "kernel_size": 3, "stride": 1, "output_height": 4,
                     "output_width": 5}),
        ("ConvT3D", {"type": "ConvTransposed3D", "activation": "Linear", "input_height": 2, "input_width": 2,
                     "input_depth": 2, "input_channels": 1, "filters": 1, "kernel_size": 2, "stride": 1,
                     "output_height": 3, "output_width": 3, "output_depth": 3}),
        ("Embedding", {"type": "Embedding", "activation": "Linear", "vocab_size": 11, "embedding_dim": 3}),
        ("KMeans", {"type": "KMeans", "activation": "Linear", "input_height": 5, "num_clusters": 4,
                    "kmeans_temperature": 0.1, "output_mode": "features"}),
    ]


def cases():
    rng = random.Random(20261122)
    out = []
    for name, layer in layer_specs():
        for dt in DTYPES:
            out.append((f"layer_{name}_{dt}", net([with_weights(cell({**layer, "dtype": dt}), rng)])))
    # Scales that print in exponent form, and huge ones.
    for dt in ["int8", "fp8e4m3", "int4", "float16", "binary", "uint16"]:
        out.append((f"tiny_weights_{dt}", net([with_weights(
            cell({"type": "Dense", "activation": "Linear", "dtype": dt, "input_height": 3, "output_height": 5}),
            rng, scale=3e-6)])))
        out.append((f"huge_weights_{dt}", net([with_weights(
            cell({"type": "Dense", "activation": "Linear", "dtype": dt, "input_height": 3, "output_height": 5}),
            rng, scale=4e4)])))
    # An explicit scale (not 1): no auto-scale, values clamp and int8 wraps.
    for dt in ["int8", "int4", "uint8", "fp8e5m2", "ternary"]:
        l = with_weights(cell({"type": "Dense", "activation": "Linear", "dtype": dt, "input_height": 4,
                               "output_height": 4}), rng, scale=2.0)
        l["scale"] = 0.0078125
        out.append((f"explicit_scale_{dt}", net([l])))
    # All-zero weights: scale stays 1.
    zeros = cell({"type": "Dense", "activation": "Linear", "dtype": "int4", "input_height": 3, "output_height": 3,
                  "weights": base64.b64encode(bytes(36)).decode(), "scale": 1})
    out.append(("zero_weights_int4", net([zeros])))
    # Softmax variants with their float fields.
    for st, extra in [("Temperature", {"temperature": 0.7}), ("Entmax", {"entmax_alpha": 1.25}),
                      ("Grid", {"softmax_rows": 3, "softmax_cols": 2}), ("Sparse", {}),
                      ("Hierarchical", {"softmax_rows": 2, "softmax_cols": 3})]:
        out.append((f"softmax_{st}", net([cell({"type": "Softmax", "activation": "Linear", "dtype": "float32",
                                                "softmax_type": st, **extra})])))
    # A 2×2×2 grid with disabled and missing cells, and escaping in string fields.
    layers = []
    for i, dt in enumerate(["int8", "uint4", "fp4", "bfloat16", "ternary", "uint2"]):
        z, y, x = i // 4, (i // 2) % 2, i % 2
        l = with_weights(cell({"type": "Dense", "activation": ["ReLU", "Tanh", "Sigmoid", "GELU", "Silu",
                                                               "LeakyReLU"][i],
                               "dtype": dt, "input_height": 5, "output_height": 5}, 0, x, y, z), rng)
        if i == 2:
            l["is_disabled"] = True
        layers.append(l)
    layers.append(cell({"type": "KMeans", "activation": "Linear", "dtype": "float32", "input_height": 5,
                        "num_clusters": 2, "output_mode": "probabilities<&>\u2028é", "kmeans_temperature": 2.5e-7,
                        "weights": weights_b64(10, rng), "scale": 1}, 0, 0, 1, 1))
    out.append(("grid_2x2x2_sparse", net(layers, depth=2, rows=2, cols=2, lpc=1)))
    # Nesting: parallel (add / avg / filter) inside sequential inside metacognition, with meta rules.
    inner = {"type": "Parallel", "activation": "Linear", "dtype": "int2", "combine_mode": "avg", "parallel_branches": [
        {"type": "Dense", "activation": "Tanh", "dtype": "uint8", "input_height": 4, "output_height": 4},
        {"type": "Sequential", "activation": "Linear", "dtype": "float32", "sequential_layers": [
            {"type": "LayerNorm", "activation": "Linear", "dtype": "fp8e4m3", "input_height": 4},
            {"type": "Dense", "activation": "Linear", "dtype": "int64", "input_height": 4, "output_height": 4},
            {"type": "Residual", "activation": "Linear", "dtype": "float32"}]}]}
    meta = {"type": "Metacognition", "activation": "Linear", "dtype": "float32",
            "meta_rules": [{"Condition": 2, "Threshold": 0.25, "Command": 1.5, "Param": -3, "Cooldown": 4,
                            "SelfOnly": True}, {"Condition": 0, "Threshold": 1e-9, "Command": 0, "Param": 0.1,
                                                "Cooldown": 0, "SelfOnly": False}],
            "meta_observed_layer": {"type": "Sequential", "activation": "Linear", "dtype": "float32",
                                    "sequential_layers": [inner, {"type": "Dense", "activation": "Linear",
                                                                  "dtype": "binary", "input_height": 4,
                                                                  "output_height": 2}]}}
    add = {"type": "Parallel", "activation": "Linear", "dtype": "float32", "combine_mode": "add",
           "parallel_branches": [{"type": "Dense", "activation": "Linear", "dtype": "int16", "input_height": 2,
                                  "output_height": 3},
                                 {"type": "SwiGLU", "activation": "Silu", "dtype": "fp4", "input_height": 2,
                                  "output_height": 3}]}
    for mode in ["concat", "grid_scatter", "filter", "avg", "add"]:
        out_h = 3 if mode in ("avg", "add") else 5
        par = {"type": "Parallel", "activation": "Linear", "dtype": "float32", "combine_mode": mode,
               "parallel_branches": [
                   {"type": "Dense", "activation": "Tanh", "dtype": "int8", "input_height": 4, "output_height": 3},
                   {"type": "Dense", "activation": "ReLU", "dtype": "fp4", "input_height": 4, "output_height": out_h},
                   {"type": "Sequential", "activation": "Linear", "dtype": "float32", "sequential_layers": [
                       {"type": "Dense", "activation": "Linear", "dtype": "float32", "input_height": 4,
                        "output_height": 4}, {"type": "Residual", "activation": "Linear", "dtype": "float32"},
                       {"type": "Dense", "activation": "Sigmoid", "dtype": "uint4", "input_height": 4,
                        "output_height": 3}]}]}
        if mode not in ("avg", "add"):
            par["parallel_branches"][2]["sequential_layers"][2]["output_height"] = 2
        out.append((f"parallel_{mode}", net([with_weights(cell(par), rng)])))
    out.append(("nested_meta_parallel_sequential", net([with_weights(cell(meta), rng),
                                                        with_weights(cell(add, 1), rng)])))
    return out


MORPH_CHAINS = [("fp4", "int8"), ("int4", "fp8e4m3"), ("uint16", "ternary"), ("float16", "binary"),
                ("int2", "float64"), ("binary", "uint4"), ("fp8e5m2", "int16"), ("bfloat16", "uint2")]

BUILDS = [
    ("Dense_int4", {"type": "dense", "activation": "gelu", "dtype": "INT4", "input_height": 6, "output_height": 5}),
    ("Dense_tiled", {"type": "Dense", "activation": "relu", "dtype": "f32", "input_height": 6, "output_height": 5,
                     "use_tiling": True, "tile_size": 4}),
    ("CNN2_wide", {"type": "cnn2", "activation": "relu", "dtype": "fp32", "input_channels": 2, "input_height": 5,
                   "input_width": 7, "filters": 3, "output_height": 3, "output_width": 5, "kernel_size": 3,
                   "stride": 1}),
    ("MHA_gqa", {"type": "attention", "activation": "linear", "dtype": "fp32", "d_model": 8, "num_heads": 4,
                 "num_kv_heads": 2, "seq_length": 5}),
    ("Softmax_temperature", {"type": "softmax", "activation": "linear", "dtype": "fp32", "softmax_type": 3,
                             "temperature": 0.5}),
    ("Parallel_add", {"type": "parallel", "activation": "linear", "dtype": "fp32", "combine_mode": "add",
                      "parallel_branches": [{"type": "dense", "activation": "tanh", "dtype": "fp32",
                                             "input_height": 3, "output_height": 2},
                                            {"type": "rmsnorm", "activation": "linear", "dtype": "fp32",
                                             "input_height": 2}]}),
]


def blank(json_text):
    """Replaces every base64 weights value with <random>, as the shared corpus does for Loom's random init."""
    import re
    return re.sub(r'"weights": "[^"]*"', '"weights": "<random>"', json_text)


def extra_api_and_build_cases(manifest):
    rng = random.Random(7)
    layer = {"type": "Dense", "activation": "Tanh", "dtype": "float32", "input_height": 6, "output_height": 7}
    for a, b in MORPH_CHAINS:
        cid = f"apimorph_chain_{a}_{b}"
        spec = net([with_weights(cell(dict(layer)), rng)])
        n = welvet.Network.deserialize(json.dumps(spec))
        n.morph(0, DTYPES.index(a))
        n.morph(0, DTYPES.index(b))
        files = {"spec.json": json.dumps(spec, indent=1).encode(), "loom.json": n.serialize().encode(),
                 "loom.entity": n.serialize_entity()}
        write_case(manifest, cid, "api_morph", files)
    for name, l in BUILDS:
        cid = f"build_{name}"
        spec = net([cell(l)])
        n = welvet.Network(json.dumps(spec))
        first = n.serialize()
        second = n.serialize()
        files = {"spec.json": json.dumps(spec, indent=1).encode(), "loom.blanked.json": blank(first).encode()}
        if "float32" in first and not any(d in first for d in DTYPES if d != "float32"):
            ent = n.serialize_entity()
            files["loom.entity.header"] = ent[:20 + struct.unpack("<Q", ent[12:20])[0]]
        d = os.path.join(OUT, "cases", cid)
        os.makedirs(d)
        for fname, data in files.items():
            with open(os.path.join(d, fname), "wb") as f:
                f.write(data)
        manifest["cases"].append({"id": cid, "category": "build", "load_mode": "build",
                                  "first_write_equals_second": first == second,
                                  "files": {fname: f"cases/{cid}/{fname}" for fname in files}})


def write_case(manifest, cid, category, files):
    d = os.path.join(OUT, "cases", cid)
    os.makedirs(d)
    loom_json, loom_entity = files["loom.json"], files["loom.entity"]
    roundtrip = {
        "json_reserialize_identical": welvet.Network.deserialize(loom_json.decode()).serialize().encode() == loom_json,
        "entity_from_reloaded_json_identical":
            welvet.Network.deserialize(loom_json.decode()).serialize_entity() == loom_entity,
        "entity_reserialize_identical":
            welvet.Network.deserialize_entity(loom_entity).serialize_entity() == loom_entity,
        "json_from_reloaded_entity_identical":
            welvet.Network.deserialize_entity(loom_entity).serialize().encode() == loom_json,
    }
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    hlen, header = header_of(loom_entity)
    manifest["cases"].append({"id": cid, "category": category, "load_mode": "persist", "blobs": header["blobs"],
                              "sizes": {"entity_header_json": hlen}, "roundtrip": roundtrip,
                              "files": {name: f"cases/{cid}/{name}" for name in files}})


FORWARD_CHILD = r"""
import json, struct, sys, welvet
spec, loom_json, loom_entity, values, shape = json.load(sys.stdin)
def run(n):
    return welvet.Network.deserialize(n) if isinstance(n, str) else welvet.Network.deserialize_entity(bytes(n))
outs = [run(x).forward_polymorphic(values, shape) for x in (spec, loom_json, loom_entity)]
print(json.dumps(outs))
"""


def input_shape(spec):
    """An input shape for the first enabled layer of a case (batch 2 where Loom allows it)."""
    first = next(l for l in spec["layers"] if not l.get("is_disabled"))
    if first["type"] == "Parallel":
        return [2, first["parallel_branches"][0]["input_height"]]
    t = first["type"]
    ih, iw, idp, c = (first.get(k, 0) for k in ("input_height", "input_width", "input_depth", "input_channels"))
    return {
        "Dense": [2, ih], "SwiGLU": [2, ih], "RMSNorm": [2, ih], "LayerNorm": [2, ih], "KMeans": [1, ih],
        "MultiHeadAttention": [3, first.get("d_model", 0)], "RNN": [2, first.get("seq_length", 1), ih],
        "LSTM": [2, first.get("seq_length", 1), ih], "CNN1": [2, c, ih], "CNN2": [1, c, ih, iw],
        "CNN3": [1, c, idp, ih, iw], "ConvTransposed1D": [2, c, iw], "ConvTransposed2D": [1, c, ih, iw],
        "ConvTransposed3D": [1, c, idp, ih, iw], "Embedding": [6], "Softmax": [1, 6],
    }.get(t)


def add_forward(manifest):
    """Records Loom's forward output (in a child process: Loom can panic) for every case with a known input."""
    import subprocess
    rng = random.Random(99)
    for case in manifest["cases"]:
        if case["load_mode"] != "persist":
            continue
        d = os.path.join(OUT, "cases", case["id"])
        spec_text = open(os.path.join(d, "spec.json")).read()
        spec = json.loads(spec_text)
        shape = input_shape(spec)
        if not shape or 0 in shape:
            continue
        n = 1
        for x in shape:
            n *= x
        if spec["layers"][0]["type"] == "Embedding":
            values = [0.0, 3.7, 10.0, 11.0, -0.5, 2.0]
        else:
            values = [struct.unpack("<f", struct.pack("<f", rng.uniform(-1, 1)))[0] for _ in range(n)]
        loom_json = open(os.path.join(d, "loom.json")).read()
        loom_entity = list(open(os.path.join(d, "loom.entity"), "rb").read())
        if case["category"] == "apimorph":
            continue
        try:
            r = subprocess.run([sys.executable, "-c", FORWARD_CHILD], capture_output=True, timeout=60,
                               input=json.dumps([spec_text, loom_json, loom_entity, values, shape]).encode())
        except subprocess.TimeoutExpired:
            continue
        if r.returncode != 0:
            print(f"no forward for {case['id']}: Loom failed", file=sys.stderr)
            continue
        from_spec, from_json, from_entity = json.loads(r.stdout)
        if not from_spec:  # Loom returns [] when the output has a NaN
            continue
        f32hex = lambda v: struct.pack(f"<{len(v)}f", *v).hex()
        case["input_shape"] = shape
        case["input_f32_hex"] = f32hex(values)
        case["expected_output_f32_hex"] = f32hex(from_spec)
        case["roundtrip"]["forward_after_json_reload_identical"] = f32hex(from_json) == f32hex(from_spec)
        case["roundtrip"]["forward_after_entity_reload_identical"] = f32hex(from_entity) == f32hex(from_spec)


def header_of(entity_bytes):
    n = struct.unpack("<Q", entity_bytes[12:20])[0]
    return n, json.loads(entity_bytes[20:20 + n])


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "cases"))
    manifest = {"corpus": "loom-extra", "generator": "scripts/gen_extra_corpus.py",
                "reference": {"welvet": welvet.__version__}, "cases": []}
    for cid, spec in cases():
        d = os.path.join(OUT, "cases", cid)
        os.makedirs(d)
        spec_text = json.dumps(spec, indent=1, ensure_ascii=False)
        try:
            n = welvet.Network.deserialize(spec_text)
            loom_json = n.serialize()
            loom_entity = n.serialize_entity()
        except Exception as e:  # noqa: BLE001 - report and skip what Loom itself refuses
            print(f"skip {cid}: Loom refused: {e}", file=sys.stderr)
            shutil.rmtree(d)
            continue
        files = {"spec.json": spec_text.encode(), "loom.json": loom_json.encode(), "loom.entity": loom_entity}
        rt_json = welvet.Network.deserialize(loom_json).serialize().encode()
        rt_entity = welvet.Network.deserialize_entity(loom_entity).serialize_entity()
        entity_from_json = welvet.Network.deserialize(loom_json).serialize_entity()
        json_from_entity = welvet.Network.deserialize_entity(loom_entity).serialize().encode()
        roundtrip = {
            "json_reserialize_identical": rt_json == files["loom.json"],
            "entity_from_reloaded_json_identical": entity_from_json == loom_entity,
            "entity_reserialize_identical": rt_entity == loom_entity,
            "json_from_reloaded_entity_identical": json_from_entity == files["loom.json"],
        }
        if not roundtrip["json_reserialize_identical"]:
            files["rt.json"] = rt_json
        if not roundtrip["entity_reserialize_identical"]:
            files["rt.entity"] = rt_entity
        if not roundtrip["json_from_reloaded_entity_identical"]:
            files["rt_from_entity.json"] = json_from_entity
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        hlen, header = header_of(loom_entity)
        case = {"id": cid, "category": cid.split("_")[0], "load_mode": "persist",
                "sizes": {"loom.json": len(files["loom.json"]), "loom.entity": len(loom_entity),
                          "entity_header_json": hlen, "entity_payload": len(loom_entity) - 20 - hlen},
                "blobs": header["blobs"], "roundtrip": roundtrip,
                "files": {name: f"cases/{cid}/{name}" for name in files}}
        first = next((b for b in header["blobs"] or [] if b["path"] == "layers.0"), None)
        if first:
            blob = loom_entity[20 + hlen + first["offset"]:20 + hlen + first["offset"] + first["length"]]
            case["layer_persistence_from_entity_0"] = {"scale": first.get("scale", 0), "native": first["native"],
                                                       "weights_sha256": hashlib.sha256(blob).hexdigest()}
        manifest["cases"].append(case)
    extra_api_and_build_cases(manifest)
    add_forward(manifest)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{len(manifest['cases'])} cases written to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()

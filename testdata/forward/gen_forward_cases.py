#!/usr/bin/env python3
"""Writes testdata/forward/{attention,recurrent,conv}.json: forward outputs computed by Loom itself.

A case holds Loom's JSON `network` (or, with `entity_hex`, the `.entity` file Loom loaded) and the calls made on it
in order: `shape`, `input_f32_hex`, and Loom's output `expected_f32_hex` (little-endian float32 bytes).

Loom (welvet 0.80.0, `pip install welvet==0.80.0`, linux/amd64) loads each network spec and runs
`forward_polymorphic` on each call in order on the same network, so MHA calls see the KV cache the earlier calls
left. The cases cover what the shared corpus does not: query_dim, GQA (also uneven), odd head_dim, RoPE bases
below 1, batch > 1, KV continuation and the 512-row wrap, odd input ranks; LSTM/RNN tiles and batches; convolutions
with stride, padding, output_padding, kernel 0, every activation, float64 weights that float32 cannot hold.

    python3 testdata/forward/gen_forward_cases.py [--fuzz N DIR]

`--fuzz N DIR` writes N random cases per family into DIR instead (for local comparison, not committed).
The output is deterministic.
"""
import base64
import json
import os
import random
import struct
import sys

import welvet

DTYPES = ["float64", "float32", "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "int64", "int32", "int16", "int8",
          "uint64", "uint32", "uint16", "uint8", "int4", "uint4", "fp4", "int2", "uint2", "ternary", "binary"]
# LeakyReLU is left out until cpu/activation.rs rounds like Loom (`f32(f64(x)·0.01)`, not `x·0.01f32`).
ACTIVATIONS = ["ReLU", "Silu", "GELU", "Tanh", "Sigmoid", "Linear"]
OUT = os.path.dirname(os.path.abspath(__file__))


def f32_hex(vals):
    return struct.pack(f"<{len(vals)}f", *vals).hex()


def weights_b64(rng, n, scale=0.5):
    return base64.b64encode(struct.pack(f"<{n}f", *[rng.uniform(-scale, scale) for _ in range(n)])).decode()


def network(layer):
    return {"id": "forward", "depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 1,
            "layers": [dict({"z": 0, "y": 0, "x": 0, "l": 0}, **layer)]}


def run(case_id, what, layer, calls, rng, norms=None):
    """calls: list of input shapes; each gets fresh random input values. norms: MHA `q_norm`/`k_norm` values, added
    as float32 blobs to the `.entity` Loom writes for the network (the case then carries that file)."""
    text = json.dumps(network(layer))
    net = welvet.Network.deserialize(text)
    entity = None
    if norms:
        wire = net.serialize_entity()
        n = struct.unpack("<Q", wire[12:20])[0]
        header, payload = json.loads(wire[20:20 + n]), wire[20 + n:]
        for name, vals in norms.items():
            raw = struct.pack(f"<{len(vals)}f", *vals)
            header["blobs"].append({"path": f"layers.0.{name}", "offset": len(payload), "length": len(raw),
                                    "dtype": "float32", "native": False})
            payload += raw
        h = json.dumps(header, separators=(",", ":")).encode()
        entity = wire[:12] + struct.pack("<Q", len(h)) + h + payload
        net = welvet.Network.deserialize_entity(entity)
    out_calls = []
    for shape in calls:
        n = 1
        for d in shape:
            n *= d
        vals = [struct.unpack("<f", struct.pack("<f", rng.gauss(0, 1)))[0] for _ in range(n)]
        y = net.forward_polymorphic(vals, shape)
        out_calls.append({"shape": shape, "input_f32_hex": f32_hex(vals), "expected_f32_hex": f32_hex(y)})
    case = {"id": case_id, "what": what, "network": text, "calls": out_calls}
    if entity:
        case["entity_hex"] = entity.hex()
    return case


# ---------------------------------------------------------------- MultiHeadAttention

def mha_layer(rng, d, heads, hd, kv, q=0, theta=0.0, dtype="float32", seq_length=0):
    qw = q or d
    kvd = kv * hd
    n = qw * d + 2 * kvd * d + d * qw + qw + 2 * kvd + d
    layer = {"type": "MultiHeadAttention", "d_model": d, "num_heads": heads, "num_kv_heads": kv, "head_dim": hd,
             "activation": "Linear", "dtype": dtype, "weights": weights_b64(rng, n), "scale": 1}
    if q:
        layer["query_dim"] = q
    if theta:
        layer["rope_freq_base"] = theta
    if seq_length:
        layer["seq_length"] = seq_length
    return layer


def attention_cases(rng):
    c = []
    # (id, what, layer kwargs, call shapes)
    spec = [
        ("mha_query_dim_gqa", "query_dim 8 > d_model 6, 4 heads over 2 kv heads, RoPE base 500000.5",
         dict(d=6, heads=4, hd=2, kv=2, q=8, theta=500000.5), [[3, 6]]),
        ("mha_query_dim_wider", "query_dim 10 > heads·head_dim 8: the extra Q columns are computed, never used",
         dict(d=4, heads=2, hd=4, kv=2, q=10), [[3, 4]]),
        ("mha_odd_head_dim", "head_dim 3: the last element of each head is not rotated",
         dict(d=6, heads=2, hd=3, kv=1), [[4, 6]]),
        ("mha_uneven_gqa", "3 heads over 2 kv heads: head 2 reads kv head 2, i.e. the next cache row",
         dict(d=6, heads=3, hd=2, kv=2), [[4, 6], [1, 6]]),
        ("mha_batch_timeline", "batch 3: each row continues the previous row's positions in one KV cache",
         dict(d=4, heads=2, hd=2, kv=2), [[3, 2, 4]]),
        ("mha_kv_continuation", "[3,d] then three [1,d] calls continue the cache; [1,1,d] continues too; "
         "[2,d] starts a new one",
         dict(d=4, heads=2, hd=2, kv=1), [[3, 4], [1, 4], [1, 4], [1, 1, 4], [2, 4], [1, 4]]),
        ("mha_cold_single_token", "a first call of one token starts the cache, the next one-token call continues it",
         dict(d=4, heads=1, hd=4, kv=1), [[1, 4], [1, 4], [1, 4]]),
        ("mha_small_rope_base", "rope_freq_base 0.001: angles grow past 2^29, Payne-Hanek reduction",
         dict(d=8, heads=1, hd=8, kv=1, theta=0.001), [[3, 8]]),
        ("mha_rope_base_below_one", "rope_freq_base 0.5",
         dict(d=4, heads=2, hd=2, kv=2, theta=0.5), [[5, 4]]),
        ("mha_flat_default_seq", "flat input with seq_length unset (1): only the first row is used",
         dict(d=4, heads=2, hd=2, kv=2), [[8]]),
        ("mha_rank2_not_d", "[2, 2d]: the last dimension is not d_model, so seq_length (2) rows are read",
         dict(d=4, heads=2, hd=2, kv=2, seq_length=2), [[2, 8]]),
        ("mha_rank3_not_d", "[2, 3, 8] with d_model 4: batch 2 of seq_length 3 rows, the first 24 values",
         dict(d=4, heads=2, hd=2, kv=2, seq_length=3), [[2, 3, 8]]),
        ("mha_rank3_seq_default", "[2, 3, 8] with d_model 4 and seq_length unset: batch 2 of one row",
         dict(d=4, heads=1, hd=4, kv=1), [[2, 3, 8]]),
        ("mha_rank4", "rank-4 input: one sequence of seq_length rows, output shape keeps the leading dims",
         dict(d=4, heads=2, hd=2, kv=2, seq_length=2), [[1, 2, 1, 4]]),
        ("mha_wrap_512", "520 tokens: positions past 511 overwrite cache rows pos % 512 and attention reads them "
         "again; then one more token",
         dict(d=4, heads=1, hd=4, kv=1), [[520, 4], [1, 4]]),
    ]
    for cid, what, kw, calls in spec:
        c.append(run(cid, what, mha_layer(rng, **kw), calls, rng))
    c.append(run("mha_qk_norm", "q_norm per head dim and k_norm per element, from .entity blobs (the first token "
                 "attends only to itself, so the norms show from the second on)",
                 mha_layer(rng, d=8, heads=2, hd=4, kv=2), [[3, 8], [1, 8]], rng,
                 norms={"q_norm": [rng.uniform(0.5, 1.5) for _ in range(4)],
                        "k_norm": [rng.uniform(0.5, 1.5) for _ in range(8)]}))
    for dt in ["float64", "float16", "int8", "uint8", "int4", "fp4", "ternary", "binary"]:
        c.append(run(f"mha_gqa_{dt}", f"{dt}: 4 heads over 2 kv heads, query_dim 8, batch 2, then one token",
                     mha_layer(rng, d=6, heads=4, hd=2, kv=2, q=8, dtype=dt), [[2, 3, 6], [1, 6]], rng))
    return c


def attention_fuzz(rng, i):
    heads = rng.randint(1, 4)
    kv = rng.choice([k for k in range(1, heads + 1) if heads % k == 0])
    hd = rng.randint(1, 6)
    d = rng.randint(1, 10)
    # Loom panics unless d_model ≤ query_dim ≥ heads·head_dim (query_dim 0 means heads·head_dim in forward but
    # d_model in the weight count).
    q = 0 if heads * hd == d and rng.random() < 0.5 else max(d, heads * hd) + rng.randint(0, 2)
    theta = rng.choice([0.0, 0.0, 500000.5, rng.uniform(0.01, 1e6)])
    layer = mha_layer(rng, d, heads, hd, kv, q, theta, rng.choice(DTYPES))
    calls = [rng.choice([[rng.randint(1, 6), d], [rng.randint(1, 3), rng.randint(1, 4), d]])]
    for _ in range(rng.randint(0, 3)):
        calls.append([1, d])
    return run(f"fuzz_mha_{i}", "random", layer, calls, rng)


# ---------------------------------------------------------------- RNN / LSTM

def recurrent_layer(rng, t, i, h, seq, tile=0, use_tiling=False, dtype="float32", act="Linear"):
    n = h * i + h * h + h
    if t == "LSTM":
        n *= 4
    layer = {"type": t, "input_height": i, "output_height": h, "seq_length": seq, "activation": act,
             "dtype": dtype, "weights": weights_b64(rng, n), "scale": 1}
    if tile:
        layer["tile_size"] = tile
    if use_tiling:
        layer["use_tiling"] = True
    return layer


def recurrent_cases(rng):
    c = []
    spec = [
        ("rnn_batch", "RNN batch 3, 5 inputs, 6 hidden, 4 steps, Sigmoid activation ignored (always tanh)",
         dict(t="RNN", i=5, h=6, seq=4, act="Sigmoid"), [[3, 4, 5]]),
        ("rnn_big_tile", "RNN 20 inputs, 17 hidden, tile_size 3 (no effect on RNN)",
         dict(t="RNN", i=20, h=17, seq=3, tile=3), [[2, 3, 20]]),
        ("rnn_rank2", "RNN with a [batch, seq·in] input", dict(t="RNN", i=3, h=4, seq=2), [[2, 6]]),
        ("rnn_extra_values", "RNN input longer than batch·seq·in: the tail is ignored",
         dict(t="RNN", i=3, h=2, seq=2), [[1, 2, 4]]),
        ("lstm_tile_3", "LSTM tile_size 3 over 7 inputs and 8 hidden: f32 rounding every 3 terms",
         dict(t="LSTM", i=7, h=8, seq=3, tile=3), [[2, 3, 7]]),
        ("lstm_tile_1", "LSTM tile_size 1", dict(t="LSTM", i=4, h=5, seq=3, tile=1), [[1, 3, 4]]),
        ("lstm_default_tile", "LSTM 19 inputs, 10 hidden, default tile 8", dict(t="LSTM", i=19, h=10, seq=4),
         [[2, 4, 19]]),
        ("lstm_use_tiling", "LSTM use_tiling with tile_size 5", dict(t="LSTM", i=9, h=6, seq=2, tile=5,
                                                                       use_tiling=True), [[1, 2, 9]]),
        ("lstm_use_tiling_no_size", "LSTM use_tiling without tile_size", dict(t="LSTM", i=9, h=10, seq=2,
                                                                                use_tiling=True), [[1, 2, 9]]),
        ("lstm_long", "LSTM 12 steps, batch 3", dict(t="LSTM", i=3, h=4, seq=12), [[3, 12, 3]]),
    ]
    for cid, what, kw, calls in spec:
        c.append(run(cid, what, recurrent_layer(rng, **kw), calls, rng))
    for dt in ["float64", "bfloat16", "int16", "uint4", "int2", "fp8e5m2"]:
        c.append(run(f"lstm_{dt}", f"LSTM {dt}, tile_size 3", recurrent_layer(rng, "LSTM", 5, 4, 3, 3, dtype=dt),
                     [[2, 3, 5]], rng))
        c.append(run(f"rnn_{dt}", f"RNN {dt}", recurrent_layer(rng, "RNN", 5, 4, 3, dtype=dt), [[2, 3, 5]], rng))
    return c


def recurrent_fuzz(rng, i):
    t = rng.choice(["RNN", "LSTM"])
    ins, h, seq = rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 5)
    layer = recurrent_layer(rng, t, ins, h, seq, rng.choice([0, 0, 1, 2, 3, 5, 16]), rng.random() < 0.3,
                            rng.choice(DTYPES), rng.choice(ACTIVATIONS))
    return run(f"fuzz_{t}_{i}", "random", layer, [[rng.randint(1, 3), seq, ins]], rng)


# ---------------------------------------------------------------- CNN / ConvTransposed

def conv_layer(rng, t, c, f, k, stride, pad, ins, outs, act, dtype="float32", out_pad=0, weights=None):
    n = f * c * max(k, 1) ** len(ins)
    layer = {"type": t, "input_channels": c, "filters": f, "kernel_size": k, "stride": stride, "padding": pad,
             "activation": act, "dtype": dtype, "scale": 1}
    names = {
        "CNN1": (["input_height"], ["output_height"]),
        "CNN2": (["input_height", "input_width"], ["output_height", "output_width"]),
        "CNN3": (["input_depth", "input_height", "input_width"], ["output_depth", "output_height", "output_width"]),
        "ConvTransposed1D": (["input_width"], ["output_width"]),
        "ConvTransposed2D": (["input_height", "input_width"], ["output_height", "output_width"]),
        "ConvTransposed3D": (["input_depth", "input_height", "input_width"],
                             ["output_depth", "output_height", "output_width"]),
    }[t]
    for name, v in zip(names[0], ins):
        layer[name] = v
    for name, v in zip(names[1], outs):
        layer[name] = v
    if out_pad:
        layer["output_padding"] = out_pad
    if weights is None:
        layer["weights"] = weights_b64(rng, n)
    else:
        layer["weights"] = weights
        layer["native"] = True
    return layer


def conv_cases(rng):
    c = []
    spec = [
        ("cnn1_stride2_pad1", "CNN1 stride 2, padding 1, 3 channels, 4 filters, batch 2, GELU",
         dict(t="CNN1", c=3, f=4, k=3, stride=2, pad=1, ins=[9], outs=[5], act="GELU"), [[2, 3, 9]]),
        ("cnn1_kernel0", "CNN1 kernel_size 0: no taps, act(0)",
         dict(t="CNN1", c=2, f=2, k=0, stride=1, pad=0, ins=[4], outs=[4], act="Sigmoid"), [[1, 2, 4]]),
        ("cnn1_stride0", "CNN1 stride 0: every output reads the same window",
         dict(t="CNN1", c=1, f=2, k=2, stride=0, pad=1, ins=[5], outs=[3], act="Linear"), [[1, 1, 5]]),
        ("cnn1_flat_input", "CNN1 with a [batch, C·L] input",
         dict(t="CNN1", c=2, f=3, k=3, stride=1, pad=1, ins=[6], outs=[6], act="Silu"), [[2, 12]]),
        ("cnn2_stride2_pad1", "CNN2 stride 2, padding 1, 2 channels, batch 2, Tanh",
         dict(t="CNN2", c=2, f=3, k=3, stride=2, pad=1, ins=[5, 6], outs=[3, 3], act="Tanh"), [[2, 2, 5, 6]]),
        ("cnn2_big_pad", "CNN2 padding 2 with outputs beyond the natural size, ReLU",
         dict(t="CNN2", c=1, f=2, k=2, stride=1, pad=2, ins=[3, 3], outs=[6, 7], act="ReLU"),
         [[1, 1, 3, 3]]),
        ("cnn3_stride2_pad1", "CNN3 stride 2, padding 1, batch 2, ReLU",
         dict(t="CNN3", c=2, f=2, k=3, stride=2, pad=1, ins=[4, 5, 3], outs=[2, 3, 2], act="ReLU"),
         [[2, 2, 4, 5, 3]]),
        ("convt1_output_padding", "ConvTransposed1D stride 2, padding 1, output_padding 1, batch 2, ReLU",
         dict(t="ConvTransposed1D", c=2, f=3, k=3, stride=2, pad=1, ins=[4], outs=[8], act="ReLU", out_pad=1),
         [[2, 2, 4]]),
        ("convt2_stride2", "ConvTransposed2D stride 2, padding 1, 2 channels, Sigmoid",
         dict(t="ConvTransposed2D", c=2, f=2, k=3, stride=2, pad=1, ins=[3, 2], outs=[5, 4], act="Sigmoid",
              out_pad=1), [[1, 2, 3, 2]]),
        ("convt3_stride2", "ConvTransposed3D stride 2, batch 2, Tanh",
         dict(t="ConvTransposed3D", c=1, f=2, k=2, stride=2, pad=0, ins=[2, 2, 2], outs=[4, 4, 4], act="Tanh"),
         [[2, 1, 2, 2, 2]]),
        ("convt1_silu", "ConvTransposed1D stride 3, padding 2, Silu",
         dict(t="ConvTransposed1D", c=3, f=2, k=4, stride=3, pad=2, ins=[5], outs=[12], act="Silu"), [[1, 3, 5]]),
    ]
    for cid, what, kw, calls in spec:
        c.append(run(cid, what, conv_layer(rng, **kw), calls, rng))
    for t, ins, outs in [("CNN1", [7], [7]), ("CNN2", [4, 4], [4, 4]), ("CNN3", [3, 3, 3], [3, 3, 3]),
                         ("ConvTransposed1D", [4], [7]), ("ConvTransposed2D", [3, 3], [5, 5]),
                         ("ConvTransposed3D", [2, 2, 2], [3, 3, 3])]:
        for dt in ["float64", "float16", "int8", "fp4"]:
            c.append(run(f"{t.lower()}_{dt}", f"{t} {dt}, Sigmoid",
                         conv_layer(rng, t, 2, 2, 3, 1, 1, ins, outs, "Sigmoid", dt), [[2, 2] + ins], rng))
    # float64 weights that float32 cannot hold: ConvTransposed multiplies by them unrounded.
    for t, ins, outs in [("ConvTransposed1D", [4], [6]), ("ConvTransposed2D", [2, 3], [3, 4]), ("CNN1", [5], [5])]:
        k = 3
        n = 2 * 2 * k ** len(ins)
        w = base64.b64encode(struct.pack(f"<{n}d", *[rng.uniform(-0.5, 0.5) for _ in range(n)])).decode()
        c.append(run(f"{t.lower()}_float64_native", f"{t} float64 with native float64 weights",
                     conv_layer(rng, t, 2, 2, k, 1, 1, ins, outs, "Linear", "float64", weights=w),
                     [[1, 2] + ins], rng))
    return c


def conv_fuzz(rng, i):
    t = rng.choice(["CNN1", "CNN2", "CNN3", "ConvTransposed1D", "ConvTransposed2D", "ConvTransposed3D"])
    nd = int(t[-1]) if t.startswith("CNN") else int(t[-2])
    ins = [rng.randint(1, 5) for _ in range(nd)]
    outs = [rng.randint(1, 6) for _ in range(nd)]
    c, f, k = rng.randint(1, 3), rng.randint(1, 3), rng.randint(0, 4)
    layer = conv_layer(rng, t, c, f, k, rng.randint(0, 3), rng.randint(0, 2), ins, outs, rng.choice(ACTIVATIONS),
                       rng.choice(DTYPES), rng.randint(0, 1))
    return run(f"fuzz_{t}_{i}", "random", layer, [[rng.randint(1, 3), c] + ins], rng)


def write(path, cases):
    doc = {"reference": f"welvet {getattr(welvet, '__version__', '0.80.0')} (Loom v0.80), forward_polymorphic",
           "cases": cases}
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--fuzz":
        n, out = int(sys.argv[2]), sys.argv[3]
        os.makedirs(out, exist_ok=True)
        for name, fn in [("attention", attention_fuzz), ("recurrent", recurrent_fuzz), ("conv", conv_fuzz)]:
            rng = random.Random(name)
            write(os.path.join(out, f"{name}.json"), [fn(rng, i) for i in range(n)])
        return
    for name, fn in [("attention", attention_cases), ("recurrent", recurrent_cases), ("conv", conv_cases)]:
        write(os.path.join(OUT, f"{name}.json"), fn(random.Random(name)))


if __name__ == "__main__":
    main()

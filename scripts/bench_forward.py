#!/usr/bin/env python3
"""Loom's side of scripts/bench-forward.sh (CPU forward vs Loom), through welvet (Loom v0.80's Python binding).

    bench_forward.py loom   [--runs N] [--only SUBSTR,...] OUT_DIR   > OUT_DIR/loom.json
    bench_forward.py report LOOM_JSON NATIVE_JSON [WASM_JSON]         (markdown tables)
    bench_forward.py ranges RUN_DIR...                                (CPU-time ratios over several runs)

`loom` builds each benchmark network with `welvet.Network(architecture JSON)`, morphs it to the dtype
(`morph_all`), writes Loom's `.entity` to OUT_DIR/<net>.entity and loads that file back with
`welvet.Network.deserialize_entity`: the loaded network is the one timed, so Loom and our code (which reads the same
file) compute on identical weights. Per case it writes the input, OUT_DIR/<case>.in.f32, and Loom's output,
OUT_DIR/<case>.loom.f32 (raw little-endian float32). Loom prints its output as JSON with Go's shortest float32
repr, so parsing it back and packing as float32 is exact.

Timings, each the median of N runs after one warm-up call:
- public API: `net.forward_polymorphic(values, shape)` as a Python user calls it (Python list in: welvet builds a
  ctypes array from it; JSON text out: welvet parses it into a Python list).
- C call only: the bare `LoomForwardPolymorphic` C call on a ctypes float array built once, plus copying its
  result string out of C (then freed with `FreeLoomString`). Go still formats the output as JSON text inside the
  call, which cannot be separated from here; that part grows with the output size (65,536 floats for MHA).
Also recorded: the same bare C call on a one-layer RMSNorm network with the same input and output shape (the call,
the input copy and the JSON formatting, with next to no math: an estimate of what in Loom's figure is not the
layer), process CPU time per C call (Loom's forward is single-threaded if it matches the wall time) and
whether the freshly built network's output equals the loaded one's. Everything goes to stdout as JSON.
"""

import argparse
import ctypes
import json
import os
import random
import statistics
import struct
import sys
import time

# welvet's DType codes (welvet.utils.DType): 16 is FP4, INT4 is 14.
DTYPE_CODE = {"float32": 1, "int8": 9, "int4": 14}


def dense(n, dtype):
    return {"type": "dense", "activation": "linear", "dtype": dtype, "input_height": n, "output_height": n}


# (network name, layer, dtype, [(case suffix, input shape)])
NETWORKS = [
    *[(f"dense{n}_{dt}", dense(n, dt), dt, [("b1", [1, n]), ("b8", [8, n])])
      for n in (1024, 4096) for dt in ("float32", "int8", "int4")],
    ("swiglu1024x4096_float32",
     {"type": "swiglu", "activation": "linear", "dtype": "float32", "input_height": 1024, "output_height": 4096},
     "float32", [("b1", [1, 1024]), ("b8", [8, 1024])]),
    ("mha512h8_float32",
     {"type": "mha", "activation": "linear", "dtype": "float32", "d_model": 512, "num_heads": 8,
      "seq_length": 128},
     "float32", [("s128", [128, 512])]),
]


def ms(t0):
    return (time.perf_counter() - t0) * 1e3


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:
        return ""


def f32_values(n, rng):
    """n uniform values in [-1, 1), each exactly representable as float32."""
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}f", *(rng.uniform(-1, 1) for _ in range(n)))))


def write_f32(path, values):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


def bench_loom(out_dir, runs, only):
    import welvet
    from welvet import utils

    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    # Our own handle on the C entry point: result as a raw pointer, so that it can be freed (welvet's wrapper
    # declares `c_char_p` and leaks every result string).
    c_forward = utils._LIB["LoomForwardPolymorphic"]
    c_forward.restype = ctypes.c_void_p
    c_forward.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_char_p]
    c_free = utils._LIB["FreeLoomString"]
    c_free.restype = None
    c_free.argtypes = [ctypes.c_void_p]

    rng = random.Random(20261122)
    cases = []
    for net_name, layer, dtype, shapes in NETWORKS:
        wanted = [(s, sh) for s, sh in shapes if not only or any(o in f"{net_name}_{s}" for o in only)]
        if not wanted:
            continue
        spec = {"id": net_name, "depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 1,
                "layers": [{"z": 0, "y": 0, "x": 0, "l": 0, **layer}]}
        built = welvet.Network(spec)
        if dtype != "float32":
            built.morph_all(DTYPE_CODE[dtype])
        wire = built.serialize_entity()
        net_path = os.path.join(out_dir, f"{net_name}.entity")
        with open(net_path, "wb") as f:
            f.write(wire)
        net = welvet.Network.deserialize_entity(wire)
        for suffix, shape in wanted:
            name = f"{net_name}_{suffix}"
            n = 1
            for d in shape:
                n *= d
            values = f32_values(n, rng)
            in_path = os.path.join(out_dir, f"{name}.in.f32")
            write_f32(in_path, values)

            # Public API: one warm-up (its output is the reference), then `runs` timed calls.
            out = net.forward_polymorphic(values, shape)
            built_same = built.forward_polymorphic(values, shape) == out
            api = []
            for _ in range(runs):
                t0 = time.perf_counter()
                o = net.forward_polymorphic(values, shape)
                api.append(ms(t0))
                if o != out:
                    sys.exit(f"{name}: Loom's output changed between calls")
            out_path = os.path.join(out_dir, f"{name}.loom.f32")
            write_f32(out_path, out)

            # C call only, on a ctypes array built once.
            arr = (ctypes.c_float * n)(*values)
            sh = json.dumps(shape).encode()
            c_call, cpu = [], []
            for i in range(runs + 1):
                c0 = time.process_time()
                t0 = time.perf_counter()
                p = c_forward(net._handle, arr, n, sh)
                raw = ctypes.string_at(p)
                t = ms(t0)
                c = (time.process_time() - c0) * 1e3
                c_free(p)
                if i == 0:
                    if json.loads(raw) != out:
                        sys.exit(f"{name}: the bare C call's output differs from forward_polymorphic's")
                else:
                    c_call.append(t)
                    cpu.append(c)
            # Loom's cost outside the layer math, for reference: the same C call on an RMSNorm network with the same
            # input and output shape (about one multiply per value), i.e. the call, input copy and JSON formatting.
            probe = c_call_probe(c_forward, c_free, shape, arr, n, sh, runs)
            # What welvet adds in Python around the C call, for reference (timed once each).
            t0 = time.perf_counter()
            (ctypes.c_float * n)(*values)
            list_to_c_ms = ms(t0)
            t0 = time.perf_counter()
            json.loads(raw.decode("utf-8"))
            parse_ms = ms(t0)

            cases.append({
                "case": name,
                "network": net_name,
                "layer": layer["type"],
                "dtype": dtype,
                "file": net_path,
                "file_bytes": len(wire),
                "shape": shape,
                "input": in_path,
                "loom_output": out_path,
                "output_len": len(out),
                "runs": runs,
                "api_ms": api,
                "api_ms_median": statistics.median(api),
                "c_call_ms": c_call,
                "c_call_ms_median": statistics.median(c_call),
                "c_call_cpu_ms_median": statistics.median(cpu),
                "probe_c_call_ms_median": probe,
                "python_list_to_c_ms": list_to_c_ms,
                "python_json_parse_ms": parse_ms,
                "built_equals_loaded": built_same,
            })
            print(f"loom {name}: api {statistics.median(api):.2f} ms, C call {statistics.median(c_call):.2f} ms "
                  f"(cpu {statistics.median(cpu):.2f} ms)", file=sys.stderr)
        net.free()
        built.free()
    return {"welvet": getattr(welvet, "__version__", ""), "loadavg_end": loadavg(), "cases": cases}


def c_call_probe(c_forward, c_free, shape, arr, n, sh, runs):
    """Median ms of the bare C call on a one-layer RMSNorm network of width shape[-1] (same input, same size out)."""
    import welvet

    spec = {"id": "probe", "depth": 1, "rows": 1, "cols": 1, "layers_per_cell": 1,
            "layers": [{"z": 0, "y": 0, "x": 0, "l": 0, "type": "rmsnorm", "activation": "linear",
                        "dtype": "float32", "input_height": shape[-1], "output_height": shape[-1]}]}
    net = welvet.Network(spec)
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        p = c_forward(net._handle, arr, n, sh)
        raw = ctypes.string_at(p)
        t = ms(t0)
        c_free(p)
        if i == 0 and len(json.loads(raw)) != n:
            sys.exit(f"RMSNorm probe for shape {shape}: output size differs from the input's")
        if i:
            times.append(t)
    net.free()
    return statistics.median(times)


def fmt_ms(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


FAMILIES = [
    ("dense1024_", "Dense 1024→1024 (linear activation)"),
    ("dense4096_", "Dense 4096→4096 (linear activation)"),
    ("swiglu1024x4096_", "SwiGLU input_height 1024, output_height 4096"),
    ("mha512h8_", "MultiHeadAttention d_model 512, 8 heads (head_dim 64), seq 128"),
]


def report(loom_path, native_path, wasm_path=None):
    with open(loom_path) as f:
        loom = json.load(f)["cases"]
    with open(native_path) as f:
        native = {c["case"]: c for c in json.load(f)["cases"]}
    wasm = {}
    if wasm_path and os.path.exists(wasm_path):
        with open(wasm_path) as f:
            wasm = {c["case"]: c for c in json.load(f)["cases"]}

    def ok(r):
        return r is not None and not r.get("error")

    def same(r):
        if not ok(r):
            return "pending"
        return "yes" if r["bit_identical"] else f"**NO** ({r['mismatches']} of {r['output_len']} differ)"

    def vs(r, key, base):
        if not ok(r) or r.get(key) is None:
            return "pending"
        return f"{fmt_ms(r[key])} ({base / r[key]:.2f}×)"

    def pair(r, base_wall, base_cpu):
        """'wall / CPU ms' and 'wall / CPU ratio' cells for one of our results."""
        if not ok(r):
            return "pending", "pending"
        w, c = r["forward_ms_median"], r.get("cpu_ms_median")
        if c is None:
            return fmt_ms(w), f"{base_wall / w:.2f}×"
        return f"{fmt_ms(w)} / {fmt_ms(c)}", f"{base_wall / w:.2f}× / **{base_cpu / c:.2f}×**"

    for prefix, title in FAMILIES:
        rows = [l for l in loom if l["network"].startswith(prefix)]
        if not rows:
            continue
        print(f"**{title}**: medians, wall / CPU ms; ratio = Loom C call / ours (bold: CPU time)")
        print()
        print("| dtype | input | Loom C call ms (public API, wall) | ours native ms | native ratio | ours wasm ms | wasm ratio "
              "| bit-identical native / wasm |")
        print("|---|---|---:|---:|---:|---:|---:|:---:|")
        for l in rows:
            n, w = native.get(l["case"]), wasm.get(l["case"])
            lw, lc = l["c_call_ms_median"], l["c_call_cpu_ms_median"]
            shape = "×".join(str(d) for d in l["shape"])
            nm, nr = pair(n, lw, lc)
            wm, wr = pair(w, lw, lc)
            print(f"| {l['dtype']} | {shape} | {fmt_ms(lw)} / {fmt_ms(lc)} ({fmt_ms(l['api_ms_median'])}) "
                  f"| {nm} | {nr} | {wm} | {wr} | {same(n)} / {same(w)} |")
        print()

    print("CPU time per forward, medians (ratio = Loom / ours). Loom: the process's CPU time around each C call; "
          "ours native: the thread's CPU time; ours wasm: Node's process CPU time around each call.")
    print()
    print("| case | Loom CPU ms | ours native CPU ms (ratio) | ours wasm CPU ms (ratio) |")
    print("|---|---:|---:|---:|")
    for l in loom:
        n, w = native.get(l["case"]), wasm.get(l["case"])
        lc = l["c_call_cpu_ms_median"]
        print(f"| {l['case']} | {fmt_ms(lc)} | {vs(n, 'cpu_ms_median', lc)} | {vs(w, 'cpu_ms_median', lc)} |")
    print()
    print("| case | Loom built = loaded | Loom C call on RMSNorm, same shape ms | ours native first call ms "
          "| ours wasm first call ms | welvet list→ctypes ms | welvet JSON parse ms |")
    print("|---|:---:|---:|---:|---:|---:|---:|")
    for l in loom:
        n, w = native.get(l["case"]), wasm.get(l["case"])
        nf = fmt_ms(n["first_ms"]) if ok(n) else "pending"
        wf = fmt_ms(w["first_ms"]) if ok(w) else "pending"
        pr = fmt_ms(l["probe_c_call_ms_median"]) if "probe_c_call_ms_median" in l else "n/a"
        print(f"| {l['case']} | {'yes' if l['built_equals_loaded'] else 'NO'} | {pr} | {nf} | {wf} "
              f"| {fmt_ms(l['python_list_to_c_ms'])} | {fmt_ms(l['python_json_parse_ms'])} |")


def ranges(dirs):
    """CPU-time ratios (Loom / ours) of several runs, each a directory with loom.json, native.json, wasm.json."""
    table = {}
    for d in dirs:
        with open(os.path.join(d, "loom.json")) as f:
            loom = json.load(f)["cases"]
        ours = {}
        for side in ("native", "wasm"):
            path = os.path.join(d, f"{side}.json")
            if os.path.exists(path):
                with open(path) as f:
                    ours[side] = {c["case"]: c for c in json.load(f)["cases"]}
        for l in loom:
            row = table.setdefault(l["case"], {"native": [], "wasm": []})
            for side, cases in ours.items():
                r = cases.get(l["case"])
                if r and not r.get("error") and r.get("cpu_ms_median"):
                    row[side].append(l["c_call_cpu_ms_median"] / r["cpu_ms_median"])
    print(f"| case | native ratio, CPU time ({len(dirs)} runs: min–max) | wasm ratio, CPU time (min–max) |")
    print("|---|---:|---:|")
    for case, row in table.items():
        cells = [f"{min(v):.2f}–{max(v):.2f}×" if v else "pending" for v in (row["native"], row["wasm"])]
        print(f"| {case} | {cells[0]} | {cells[1]} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("loom")
    lp.add_argument("out_dir")
    lp.add_argument("--runs", type=int, default=15)
    lp.add_argument("--only", default="", help="comma-separated substrings of case names")
    rp = sub.add_parser("report")
    rp.add_argument("files", nargs="+")
    gp = sub.add_parser("ranges")
    gp.add_argument("dirs", nargs="+")
    a = p.parse_args()
    if a.cmd == "loom":
        only = [o for o in a.only.split(",") if o]
        json.dump(bench_loom(a.out_dir, max(a.runs, 1), only), sys.stdout, indent=1)
        print()
    elif a.cmd == "ranges":
        ranges(a.dirs)
    else:
        report(*a.files)


if __name__ == "__main__":
    main()

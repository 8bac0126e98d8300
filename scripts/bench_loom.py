#!/usr/bin/env python3
"""Loom's side of scripts/bench-entity.sh, through welvet (Loom v0.80's Python binding).

    bench_loom.py loom   [--runs N] [--dtypes float32,int8,...] OUT_DIR   > loom.json
    bench_loom.py cli    [--runs N] LOOM_BIN FILE...                       > cli.json
    bench_loom.py report LOOM_JSON OURS_JSON [INSPECT_JSON [CLI_JSON]]       (markdown tables)

`loom` builds a ~50 M-weight network (12 Dense 2048x2048 in a 1x1x12 grid), morphs every layer to the dtype,
writes Loom's `.entity` to OUT_DIR/dense50m_<dtype>.entity, then times on those bytes (already in memory):

- load: `welvet.deserialize_entity(bytes)` (freeing the network is not timed);
- save: `welvet.serialize_entity(handle)` of the loaded network, the public API as Python users call it;
- save, C call only: the bare `LoomSerializeEntity` C call plus copying its result out of C (no JSON parse and no
  base64 decode in Python; Go still base64-encodes inside the call, which cannot be separated from here).

`cli` times `LOOM_BIN inspect FILE` with hyperfine and counts its reads with `strace -f -y` (bytes returned by
read/pread64 on the inspected file, and on every file descriptor).

`loom` checks that Loom's own re-save of the loaded network equals the file. Each timing is a median of N runs after
one warm-up. Everything goes to stdout as JSON.
"""

import argparse
import base64
import ctypes
import json
import os
import statistics
import sys
import time

LAYERS = 12
DIM = 2048
DTYPES = ["float32", "int8", "int4", "binary"]


def ms(t0):
    return (time.perf_counter() - t0) * 1e3


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:
        return ""


def bench_loom(out_dir, dtypes, runs):
    import welvet
    from welvet import utils

    os.makedirs(out_dir, exist_ok=True)
    # Our own handles on the C entry points, so that the result string can be freed (welvet's wrapper leaks it).
    c_serialize = utils._LIB["LoomSerializeEntity"]
    c_serialize.restype = ctypes.c_void_p
    c_serialize.argtypes = [ctypes.c_longlong]
    c_free = utils._LIB["FreeLoomString"]
    c_free.restype = None
    c_free.argtypes = [ctypes.c_void_p]

    spec = {
        "id": "bench",
        "depth": 1,
        "rows": 1,
        "cols": LAYERS,
        "layers_per_cell": 1,
        "layers": [
            {"z": 0, "y": 0, "x": i, "l": 0, "type": "dense", "activation": "relu", "dtype": "float32",
             "input_height": DIM, "output_height": DIM}
            for i in range(LAYERS)
        ],
    }
    results = []
    for name in dtypes:
        code = {v: k for k, v in welvet.DType._NAMES.items()}[name]
        built = welvet.Network(spec)
        if name != "float32":
            built.morph_all(code)
        wire = built.serialize_entity()
        built.free()
        path = os.path.join(out_dir, f"dense50m_{name}.entity")
        with open(path, "wb") as f:
            f.write(wire)

        load = []
        for i in range(runs + 1):
            t0 = time.perf_counter()
            h = welvet.deserialize_entity(wire)
            t = ms(t0)
            welvet.free_network(h)
            if i:
                load.append(t)

        h = welvet.deserialize_entity(wire)
        save = []
        identical = None
        for i in range(runs + 1):
            t0 = time.perf_counter()
            out = welvet.serialize_entity(h)
            t = ms(t0)
            if i == 0:
                identical = out == wire
            else:
                save.append(t)
            del out
        if not identical:
            sys.exit(f"{path}: Loom's re-save of its own file differs")

        save_c = []
        for i in range(runs + 1):
            t0 = time.perf_counter()
            p = c_serialize(h)
            raw = ctypes.string_at(p)
            t = ms(t0)
            c_free(p)
            if i:
                save_c.append(t)
        # What welvet does in Python after the C call: JSON parse and base64 decode (timed once, for reference).
        t0 = time.perf_counter()
        base64.b64decode(json.loads(raw.decode("utf-8"))["b64"])
        decode_ms = ms(t0)
        del raw
        welvet.free_network(h)

        results.append({
            "dtype": name,
            "file": path,
            "file_bytes": len(wire),
            "weights": LAYERS * DIM * DIM,
            "runs": runs,
            "load_ms": load,
            "load_ms_median": statistics.median(load),
            "save_ms": save,
            "save_ms_median": statistics.median(save),
            "save_c_call_ms": save_c,
            "save_c_call_ms_median": statistics.median(save_c),
            "python_decode_ms": decode_ms,
            "resave_identical": identical,
        })
        print(f"loom {name}: load {statistics.median(load):.1f} ms, save {statistics.median(save):.1f} ms",
              file=sys.stderr)
    return {"welvet": welvet.__version__ if hasattr(welvet, "__version__") else "", "loadavg_end": loadavg(),
            "results": results}


def bench_cli(loom_bin, files, runs):
    import re
    import subprocess
    import tempfile

    results = []
    for path in files:
        path = os.path.realpath(path)
        with tempfile.TemporaryDirectory() as tmp:
            hf = os.path.join(tmp, "hf.json")
            subprocess.run(["hyperfine", "--warmup", "3", "--runs", str(runs), "--style", "none", "-N",
                            "--export-json", hf, f"{loom_bin} inspect {path}"],
                           check=True, stdout=subprocess.DEVNULL)
            with open(hf) as f:
                h = json.load(f)["results"][0]
            trace = os.path.join(tmp, "strace.txt")
            subprocess.run(["strace", "-f", "-y", "-e", "trace=read,pread64", "-o", trace, loom_bin, "inspect", path],
                           check=True, stdout=subprocess.DEVNULL)
            file_read = all_read = 0
            call = re.compile(r"^(?:\d+\s+)?(?:read|pread64)\(\d+<([^>]*)>.*\)\s+=\s+(\d+)")
            with open(trace) as f:
                for line in f:
                    m = call.match(line)
                    if m:
                        all_read += int(m.group(2))
                        if m.group(1) == path:
                            file_read += int(m.group(2))
        results.append({
            "file": path,
            "file_bytes": os.path.getsize(path),
            "runs": runs,
            "mean_ms": h["mean"] * 1e3,
            "median_ms": h["median"] * 1e3,
            "stddev_ms": h["stddev"] * 1e3,
            "file_bytes_read": file_read,
            "all_bytes_read": all_read,
        })
    return {"loom_bin": loom_bin, "loadavg_end": loadavg(), "results": results}


def fmt_ms(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def report(loom_path, ours_path, inspect_path=None, cli_path=None):
    with open(loom_path) as f:
        loom = {r["dtype"]: r for r in json.load(f)["results"]}
    with open(ours_path) as f:
        ours = {r["dtype"]: r for r in json.load(f)["results"]}
    print("| dtype | file size | Loom load ms | ours load ms (copying) | speed-up | ours load ms (shared buffer) "
          "| speed-up | Loom save ms (C call only) | ours save ms | save speed-up (vs C call only) | re-save identical |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for name, l in loom.items():
        o = ours[name]
        assert o["file_bytes"] == l["file_bytes"], name
        lr, orr = l["load_ms_median"], o["read_ms_median"]
        ls, lc, ow = l["save_ms_median"], l["save_c_call_ms_median"], o["write_ms_median"]
        same = "yes" if o["resave_identical"] and l["resave_identical"] else "NO"
        osh = o["read_shared_ms_median"]
        print(f"| {name} | {fmt_bytes(l['file_bytes'])} | {fmt_ms(lr)} | {fmt_ms(orr)} | {lr / orr:.1f}× "
              f"| {fmt_ms(osh)} | {lr / osh:.0f}× | {fmt_ms(ls)} ({fmt_ms(lc)}) | {fmt_ms(ow)} | {ls / ow:.1f}× ({lc / ow:.1f}×) | {same} |")
    print()
    print("| dtype | ours load ms | ours first load in process ms | ours first save ms | one copy of the file ms "
          "| Loom save: Python-side JSON + base64 decode ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, l in loom.items():
        o = ours[name]
        print(f"| {name} | {fmt_ms(o['read_ms_median'])} | {fmt_ms(o['first_read_ms'])} "
              f"| {fmt_ms(o['first_write_ms'])} | {fmt_ms(o['copy_ms_median'])} | {fmt_ms(l['python_decode_ms'])} |")
    if inspect_path:
        with open(inspect_path) as f:
            ins = json.load(f)["results"]
        print()
        print("| file | method | size | header | entries | warm ms | cold ms | bytes read (counted / rchar) "
              "| read beyond header | page cache after cold |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in ins:
            cached = r.get("page_cache_bytes_after_cold")
            cached = fmt_bytes(cached) if cached is not None else "n/a"
            print(f"| {os.path.basename(r['file'])} | {r['method']} | {fmt_bytes(r['file_bytes'])} "
                  f"| {r['header_bytes']} B | {r['entries']} | {fmt_ms(r['warm_ms_median'])} "
                  f"| {fmt_ms(r['cold_ms_median'])} | {r['bytes_read_counted']} / {r['bytes_read_rchar']} B "
                  f"| {r['bytes_read_beyond_header']} B | {cached} |")
    if cli_path and os.path.exists(cli_path):
        with open(cli_path) as f:
            cli = json.load(f)
        print()
        print("| `loom inspect FILE` | mean ± σ ms (hyperfine, whole process) | median ms "
              "| read from FILE (strace) | all reads of the process (strace) |")
        print("|---|---:|---:|---:|---:|")
        for r in cli["results"]:
            print(f"| {os.path.basename(r['file'])} | {fmt_ms(r['mean_ms'])} ± {fmt_ms(r['stddev_ms'])} "
                  f"| {fmt_ms(r['median_ms'])} | {r['file_bytes_read']} B | {r['all_bytes_read']} B |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("loom")
    lp.add_argument("out_dir")
    lp.add_argument("--runs", type=int, default=7)
    lp.add_argument("--dtypes", default=",".join(DTYPES))
    cp = sub.add_parser("cli")
    cp.add_argument("loom_bin")
    cp.add_argument("files", nargs="+")
    cp.add_argument("--runs", type=int, default=30)
    rp = sub.add_parser("report")
    rp.add_argument("files", nargs="+")
    a = p.parse_args()
    if a.cmd == "loom":
        json.dump(bench_loom(a.out_dir, a.dtypes.split(","), max(a.runs, 1)), sys.stdout, indent=1)
        print()
    elif a.cmd == "cli":
        json.dump(bench_cli(a.loom_bin, a.files, max(a.runs, 2)), sys.stdout, indent=1)
        print()
    else:
        report(*a.files)


if __name__ == "__main__":
    main()

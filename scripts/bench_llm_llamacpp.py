"""llama.cpp side of scripts/bench-llm.sh: the same measurements as `crate/benches/llm.rs`, through
llama-cpp-python (the library's own C++ decoder; Python only drives it), on the same GGUF and the same token ids.

  python scripts/bench_llm_llamacpp.py MODEL --ids IDS_JSON [--threads N] [--runs R]
      [--what load,prefill,decode,ttft | mem] [--decode-tokens 128] [--n-ctx 1024]

IDS_JSON is what `cargo bench --bench llm -- MODEL --what ids` printed: `prefill_ids` and `chat_ids`.
- load: `Llama(model_path, n_threads, n_threads_batch, n_ctx)` (mmaps the file, reads the vocabulary, allocates
  the KV cache and compute buffers), closed again after each run.
- prefill: `reset()` (an empty KV cache) then `eval(prefill_ids)`, last-token logits only.
- decode: `eval(chat_ids)` (untimed), then `decode-tokens` steps of `eval([argmax])`, one token each.
- ttft: `reset()`, `eval(chat_ids)` and the argmax of its logits.
- mem: in a fresh process, load + prefill + decode, then `VmHWM` from /proc/self/status.
Wall clock and process CPU time; one untimed warm-up, then the median of `runs`. Prints JSON on stdout.

ggml's AMX matmul crashes on some VMs with AMX (see research/models.md): when /proc/cpuinfo lists amx_tile, or
LLAMA_NO_EXTRA_BUFTS=1, the model is loaded with `use_extra_bufts=False` (no repacked/AMX buffer types). The
JSON says which.
"""

import argparse
import json
import os
import time

import numpy as np


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return None


HWM_START = status_bytes("VmHWM")


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().strip()


def has_amx():
    try:
        with open("/proc/cpuinfo") as f:
            return "amx_tile" in f.read()
    except OSError:
        return False


NO_EXTRA_BUFTS = has_amx() or os.environ.get("LLAMA_NO_EXTRA_BUFTS") == "1"

import llama_cpp  # noqa: E402

if NO_EXTRA_BUFTS:
    _orig = llama_cpp.llama_model_default_params

    def _params():
        p = _orig()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_model_default_params = _params
    import llama_cpp.llama as _l

    _l.llama_cpp.llama_model_default_params = _params

from llama_cpp import Llama  # noqa: E402


def median(v):
    return float(np.median(v))


class Watch:
    """Wall-clock and process CPU time (every thread, OpenMP's included)."""

    def __init__(self):
        self.cpu = time.process_time()
        self.wall = time.perf_counter()

    def stop(self):
        return ((time.perf_counter() - self.wall) * 1e3, (time.process_time() - self.cpu) * 1e3)


def timings(runs, tokens):
    ms, cpu = [r[0] for r in runs], [r[1] for r in runs]
    m, c = median(ms), median(cpu)
    rate = lambda x: tokens / (x / 1e3) if tokens and x > 0 else 0.0  # noqa: E731
    return {"tokens": tokens, "ms": ms, "ms_median": m, "tok_s_median": rate(m),
            "cpu_ms": cpu, "cpu_ms_median": c, "tok_per_cpu_s_median": rate(c)}


def open_model(path, threads, n_ctx):
    return Llama(
        model_path=path,
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=n_ctx,
        n_batch=512,
        n_ubatch=512,
        logits_all=False,
        verbose=False,
    )


def argmax_last(llm):
    # With logits_all=False, llama.cpp keeps only the last token's logits (`eval` does not copy them out).
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    return int(np.argmax(logits))


def decode(llm, n):
    ids = []
    for _ in range(n):
        t = argmax_last(llm)
        ids.append(t)
        llm.eval([t])
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--what", default="load,prefill,decode,ttft")
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=1024)
    a = ap.parse_args()
    ids = json.load(open(a.ids))
    prefill, chat = ids["prefill_ids"], ids["chat_ids"]
    what = a.what.split(",")
    report = {
        "side": "llama.cpp",
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "use_extra_bufts": not NO_EXTRA_BUFTS,
        "model": a.model,
        "file_bytes": os.path.getsize(a.model),
        "threads": a.threads,
        "runs": a.runs,
        "n_ctx": a.n_ctx,
        "prefill_tokens": len(prefill),
        "chat_tokens": len(chat),
        "loadavg_start": loadavg(),
    }
    rss_before_load = status_bytes("VmRSS")
    t = time.perf_counter()
    llm = open_model(a.model, a.threads, a.n_ctx)
    first_load_ms = (time.perf_counter() - t) * 1e3

    if "mem" in what:
        llm.reset()
        llm.eval(prefill)
        llm.eval(chat)
        decode(llm, a.decode_tokens)
        n_layer = llama_cpp.llama_model_n_layer(llm._model.model)
        n_embd = llama_cpp.llama_model_n_embd(llm._model.model)
        n_head = llama_cpp.llama_model_n_head(llm._model.model)
        n_head_kv = llama_cpp.llama_model_n_head_kv(llm._model.model)
        kv_dim = n_embd // n_head * n_head_kv
        report["mem"] = {
            "vmhwm_bytes": status_bytes("VmHWM"),
            "vmhwm_at_start_bytes": HWM_START,
            "vmrss_before_load_bytes": rss_before_load,
            "vmrss_bytes": status_bytes("VmRSS"),
            "positions": llm.n_tokens,
            # f16 K and V for every layer, allocated for the whole context up front
            "kv_cache_bytes": a.n_ctx * n_layer * 2 * kv_dim * 2,
            "kv_cache_bytes_used": llm.n_tokens * n_layer * 2 * kv_dim * 2,
        }

    for w in what:
        if w == "load":
            ms = []
            for _ in range(a.runs):
                t = Watch()
                m = open_model(a.model, a.threads, a.n_ctx)
                ms.append(t.stop())
                m.close()
                del m
            v = timings(ms, 0)
            v["first_ms"] = first_load_ms
            report["load"] = v
        elif w == "prefill":
            ms = []
            for r in range(a.runs + 1):
                llm.reset()
                t = Watch()
                llm.eval(prefill)
                argmax_last(llm)
                if r > 0:
                    ms.append(t.stop())
            report["prefill"] = timings(ms, len(prefill))
        elif w == "decode":
            ms = []
            out = []
            for r in range(min(a.runs, 3) + 1):
                llm.reset()
                llm.eval(chat)
                t = Watch()
                out = decode(llm, a.decode_tokens)
                if r > 0:
                    ms.append(t.stop())
            v = timings(ms, a.decode_tokens)
            v["first_ids"] = out[:16]
            report["decode"] = v
        elif w == "ttft":
            ms = []
            for r in range(a.runs + 1):
                llm.reset()
                t = Watch()
                llm.eval(chat)
                argmax_last(llm)
                if r > 0:
                    ms.append(t.stop())
            report["ttft"] = timings(ms, len(chat))
        elif w != "mem":
            raise SystemExit(f"unknown measurement {w!r}")
    report["loadavg_end"] = loadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

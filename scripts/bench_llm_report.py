"""The Markdown report of scripts/bench-llm.sh from the JSON its sides wrote.

  python3 scripts/bench_llm_report.py DATA_DIR [CPU_NAME]

DATA_DIR holds ours-t<N>.json, llamacpp-t<N>.json, wasm.json, mem-ours.json, mem-llamacpp.json, ids.json and
loadavg_start/loadavg_end (any of the JSON may be missing: its cells say "–").
"""

import glob
import json
import os
import platform
import re
import sys

MIB = 1024 * 1024


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def get(d, *keys):
    for k in keys:
        if d is None or k not in d:
            return None
        d = d[k]
    return d


def fmt(x, digits=1):
    if x is None:
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def first_load(d):
    s = get(d, "loadavg_start")
    return s.split()[0] if s else "?"


def last_load(d):
    s = get(d, "loadavg_end")
    return s.split()[0] if s else "?"


def loads(*ds):
    return " / ".join(f"{first_load(d)}→{last_load(d)}" for d in ds if d is not None) or "–"


def main():
    data = sys.argv[1]
    cpu = sys.argv[2] if len(sys.argv) > 2 else platform.processor()
    threads = sorted(
        int(re.search(r"-t(\d+)\.json$", p).group(1)) for p in glob.glob(os.path.join(data, "ours-t*.json"))
    )
    ours = {t: load(os.path.join(data, f"ours-t{t}.json")) for t in threads}
    lc = {t: load(os.path.join(data, f"llamacpp-t{t}.json")) for t in threads}
    wasm = load(os.path.join(data, "wasm.json"))
    mem_o = load(os.path.join(data, "mem-ours.json"))
    mem_l = load(os.path.join(data, "mem-llamacpp.json"))
    any_side = next((d for d in [*ours.values(), *lc.values(), wasm, mem_o] if d), {})
    read = lambda n: open(os.path.join(data, n)).read().strip() if os.path.exists(os.path.join(data, n)) else "?"  # noqa: E731

    out = []
    w = out.append
    model = os.path.basename(any_side.get("model", "?"))
    size = any_side.get("file_bytes")
    w(f"Model `{model}` ({fmt(size / MIB if size else None)} MiB), the same file for every side. "
      f"Machine: {os.cpu_count()} cores, {cpu}; load average {read('loadavg_start')} before, "
      f"{read('loadavg_end')} after.")
    l1 = lc.get(1) or lc.get(threads[0]) if threads else None
    if l1:
        w(f"llama.cpp: llama-cpp-python {l1.get('llama_cpp_python')}, n_ctx {l1.get('n_ctx')}, "
          f"use_extra_bufts={l1.get('use_extra_bufts')}; `{l1.get('system_info', '')}`.")
    if wasm:
        w(f"wasm: {wasm.get('runtime')}, simd128={wasm.get('simd128')}, 1 thread.")
    o1 = ours.get(threads[0]) if threads else None
    if o1:
        w(f"Prompts: prefill {o1.get('prefill_tokens')} fixed ordinary ids; chat prompt {o1.get('chat_tokens')} "
          f"ids (one user question through the model's template); decode {get(o1, 'decode', 'tokens')} greedy "
          f"tokens after the chat prompt. Medians of {o1.get('runs')} runs (decode: of "
          f"{len(get(o1, 'decode', 'ms') or [])}).")
    w("")
    w("| measurement | threads | ours native | llama.cpp | ours / llama.cpp | ours wasm (Node) | wasm / llama.cpp | "
      "goal | by CPU time: ours / llama.cpp, wasm / llama.cpp | load avg (1 min) start→end |")
    w("|---|---:|---:|---:|---:|---:|---:|---|---:|---|")

    def row(name, key, field, cpu_field, goal, t):
        vals = [get(d, key, field) for d in (ours.get(t), lc.get(t), wasm if t == 1 else None)]
        cpus = [get(d, key, cpu_field) for d in (ours.get(t), lc.get(t), wasm if t == 1 else None)]
        o, l_, wv = vals
        co, cl, cw = cpus
        w(f"| {name} | {t} | {fmt(o)} | {fmt(l_)} | {ratio(o, l_)} | {fmt(wv)} | {ratio(wv, l_)} | {goal} | "
          f"{ratio(co, cl)}, {ratio(cw, cl)} | {loads(ours.get(t), lc.get(t), wasm if t == 1 else None)} |")

    for t in threads:
        row(f"prefill {get(o1, 'prefill_tokens')} tokens, tok/s", "prefill", "tok_s_median",
            "tok_per_cpu_s_median", "native ≥ llama.cpp", t)
    for t in threads:
        row(f"decode {get(o1, 'decode', 'tokens')} tokens, tok/s", "decode", "tok_s_median",
            "tok_per_cpu_s_median", "native ≥ llama.cpp; wasm (1 thread) ≥ 0.60× llama.cpp 1 thread", t)
    for t in threads:
        row(f"time to first token, {get(o1, 'chat_tokens')}-token chat prompt, ms (lower is better)", "ttft",
            "ms_median", "cpu_ms_median", "–", t)
    for t in threads[:1]:
        row("load of the cached file, ms (lower is better)", "load", "ms_median", "cpu_ms_median", "ours ≤ 50 ms", t)

    if mem_o or mem_l:
        w("")
        w("Peak memory, each side alone in a fresh process (1 thread): load, prefill, chat prompt, decode; "
          "`VmHWM` of the process (file pages mapped and touched count too).")
        w("")
        w("| side | positions in KV cache | VmHWM MiB | process before load MiB | KV cache MiB | "
          "budget: file + KV cache + 32 MiB | within budget |")
        w("|---|---:|---:|---:|---:|---:|---|")
        for name, m, base_key in (("ours (native)", mem_o, "vmhwm_at_start_bytes"),
                                  ("llama.cpp", mem_l, "vmrss_before_load_bytes")):
            mm = get(m, "mem")
            if not mm:
                continue
            kv = mm.get("kv_cache_bytes") or 0
            budget = (m.get("file_bytes") or 0) + kv + 32 * MIB
            hwm = mm.get("vmhwm_bytes")
            base = mm.get(base_key) or 0
            verdict = "–"
            if hwm is not None:
                verdict = "yes" if hwm <= budget else f"no (+{fmt((hwm - budget) / MIB)} MiB)"
                if name == "llama.cpp":
                    net = hwm - base
                    verdict += f"; without the Python process ({fmt(base / MIB)} MiB): " + (
                        "yes" if net <= budget else f"no (+{fmt((net - budget) / MIB)} MiB)")
            w(f"| {name} | {mm.get('positions')} | {fmt(hwm / MIB if hwm else None)} | {fmt(base / MIB)} | "
              f"{fmt(kv / MIB)} | {fmt(budget / MIB)} | {verdict} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()

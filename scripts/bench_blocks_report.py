"""Markdown table of scripts/bench-blocks.sh's results: per block type, decode and prefill tokens/s of ours
(native, 1 and 2 threads; wasm in Node) against llama-bench in the same run, with the ratios.

  python3 scripts/bench_blocks_report.py DATA_DIR CPU_NAME TYPE...
"""

import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def llama(data, name, t):
    """llama-bench's (prefill, decode) average tokens/s at `t` threads."""
    rows = load(os.path.join(data, f"{name}.llamacpp-t{t}.json")) or []
    pp = next((r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0), None)
    tg = next((r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0), None)
    return pp, tg


def llama_at_depth(data, name):
    """llama-bench's decode average tokens/s at 1 thread after the page's prompt depth (its `-d` run)."""
    rows = load(os.path.join(data, f"{name}.llamacpp-t1-depth.json")) or []
    return next((r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0), None)


def best_rounds(rows):
    """Per engine, its round with the fastest decode (rounds alternate engines, so each gets the same minutes)."""
    best = {}
    for r in rows:
        e = r.get("engine")
        if e and (r.get("decode_tok_s") or 0) > ((best.get(e) or {}).get("decode_tok_s") or 0):
            best[e] = r
    return best


def ours(path):
    r = load(path) or {}
    return (r.get("prefill") or {}).get("tok_s_median"), (r.get("decode") or {}).get("tok_s_median")


def fmt(v):
    return "–" if v is None else f"{v:,.0f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main():
    data, cpu, names = sys.argv[1], sys.argv[2], [os.path.basename(n).removesuffix(".gguf") for n in sys.argv[3:]]
    threads = sorted({int(f.split("-t")[-1].split(".")[0]) for f in os.listdir(data) if ".ours-t" in f})
    simd = {(load(os.path.join(data, f)) or {}).get("simd") for f in os.listdir(data) if ".ours-t" in f}
    with open(os.path.join(data, "loadavg_start")) as f:
        start = f.read().strip()
    with open(os.path.join(data, "loadavg_end")) as f:
        end = f.read().strip()
    print(f"Machine: {os.cpu_count()} cores, {cpu}; load average {start} at the start, {end} at the end.\n")
    print("Tokens/s (decode: 128 greedy tokens after a chat prompt; prefill: 512 tokens); ratio = ours / llama.cpp.")
    print(f"Our native kernels: {', '.join(sorted(s for s in simd if s))}; the AVX2 columns are capped at AVX2.\n")
    head = "| file |"
    rule = "|---|"
    for t in threads:
        head += f" decode ours {t}t | llama.cpp {t}t | ratio |"
        rule += "---:|---:|---:|"
    head += " AVX2 decode 1t | ratio | wasm decode (Node) | wasm / llama.cpp 1t |"
    rule += "---:|---:|---:|---:|"
    for t in threads:
        head += f" prefill ours {t}t | llama.cpp {t}t | ratio |"
        rule += "---:|---:|---:|"
    print(head)
    print(rule)
    for name in names:
        line = f"| {name} |"
        lc = {t: llama(data, name, t) for t in threads}
        us = {t: ours(os.path.join(data, f"{name}.ours-t{t}.json")) for t in threads}
        for t in threads:
            line += f" {fmt(us[t][1])} | {fmt(lc[t][1])} | {ratio(us[t][1], lc[t][1])} |"
        avx2 = ours(os.path.join(data, f"{name}.ours-avx2.json"))[1]
        wasm = ours(os.path.join(data, f"{name}.wasm.json"))[1]
        one = lc.get(1, (None, None))[1]
        line += f" {fmt(avx2)} | {ratio(avx2, one)} | {fmt(wasm)} | {ratio(wasm, one)} |"
        for t in threads:
            line += f" {fmt(us[t][0])} | {fmt(lc[t][0])} | {ratio(us[t][0], lc[t][0])} |"
        print(line)
    browser = {}
    for name in names:
        try:
            with open(os.path.join(data, f"{name}.browser.jsonl")) as f:
                browser[name] = best_rounds(map(json.loads, f))
        except (OSError, ValueError):
            pass
    if browser:
        print("\nIn one headless Chromium (the package's wasm CPU engine, 1 thread, against @wllama/wllama), decode tok/s")
        print("after the page's chat prompt (its tokens in the last column), each engine's best of its alternating rounds;")
        print("prefill tok/s in brackets. llama.cpp native 1t: llama-bench's tg (after no prompt), then at the page's depth:\n")
        print(
            "| file | ours | wllama 1t | wllama 2t | ours / wllama 1t | ours / wllama 2t | ours / llama.cpp native 1t"
            " | llama.cpp 1t at the depth | ours / it | prompt tokens |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in browser.items():
            get = lambda e: (r.get(e) or {}).get("decode_tok_s")
            pre = lambda e: (r.get(e) or {}).get("prefill_tok_s")
            cell = lambda e: f"{fmt(get(e))} ({fmt(pre(e))})"
            ours_b = get("loom-wasm cpu")
            deep = llama_at_depth(data, name)
            print(
                f"| {name} | {cell('loom-wasm cpu')} | {cell('wllama 1t')} | {cell('wllama 2t')} |"
                f" {ratio(ours_b, get('wllama 1t'))} | {ratio(ours_b, get('wllama 2t'))} |"
                f" {ratio(ours_b, llama(data, name, 1)[1])} | {fmt(deep)} | {ratio(ours_b, deep)} |"
                f" {fmt((r.get('loom-wasm cpu') or {}).get('prompt_tokens'))} |"
            )
    print("\nPrefill, AVX2-capped and wasm (tok/s):\n")
    print("| file | AVX2 prefill 1t | ratio to llama.cpp 1t | wasm prefill (Node) |")
    print("|---|---:|---:|---:|")
    for name in names:
        avx2 = ours(os.path.join(data, f"{name}.ours-avx2.json"))[0]
        wasm = ours(os.path.join(data, f"{name}.wasm.json"))[0]
        print(f"| {name} | {fmt(avx2)} | {ratio(avx2, llama(data, name, 1)[0])} | {fmt(wasm)} |")


main()

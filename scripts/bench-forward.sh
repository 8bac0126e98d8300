#!/usr/bin/env bash
# CPU forward against Loom itself (welvet 0.80.0): native (cargo bench) and wasm (Node), on the same files.
#
#   bash scripts/bench-forward.sh [RUNS] [ONLY]
#
# RUNS: timed runs per measurement after one warm-up (default 15; medians reported). ONLY: comma-separated
# substrings of case names to run a subset (e.g. `dense1024,mha`). Needs python3 with welvet, a Rust toolchain with
# the wasm32-unknown-unknown target, wasm-bindgen-cli 0.2.130 and Node >= 18. Writes under target/bench-data/fwd/
# (about 300 MB, never committed):
#   <net>.entity                    Loom's files: each network built by welvet from architecture JSON, morphed
#   <case>.in.f32 / <case>.loom.f32 the input and Loom's output (raw little-endian float32)
#   loom.json native.json wasm.json raw timings;  report.md  the markdown tables;  runs/<UTC time>/  copies of them
# Both of our sides compare every output bit with Loom's; the script exits non-zero if any differs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

runs="${1:-15}"
only="${2:-}"
data="$PWD/target/bench-data/fwd"
pkg="$PWD/target/bench-wasm/pkg"
mkdir -p "$data"

echo "=== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "=== build: native benchmark (release), bench-wasm (wasm32 release, .cargo/config.toml: simd128) + wasm-bindgen" >&2
cargo bench -q -p loom-wasm --bench forward --no-run
(cd bench-wasm && CARGO_TARGET_DIR="$PWD/../target/bench-wasm" cargo build -q --release --target wasm32-unknown-unknown)
wasm-bindgen --target nodejs --out-dir "$pkg" target/bench-wasm/wasm32-unknown-unknown/release/loom_wasm_bench.wasm

echo "=== Loom (welvet): build, morph, serialize_entity, deserialize_entity; time forward_polymorphic" >&2
python3 scripts/bench_forward.py loom --runs "$runs" --only "$only" "$data" > "$data/loom.json"

status=0
echo "=== ours, native: entity::read + CpuModel::forward on the same files" >&2
cargo bench -q -p loom-wasm --bench forward -- --runs "$runs" "$data/loom.json" > "$data/native.json" || status=1

echo "=== ours, wasm (Node $(node --version), --no-liftoff: TurboFan code from the first call): the same, in wasm" >&2
node --no-liftoff bench-wasm/run.cjs "$pkg/loom_wasm_bench.js" "$data/loom.json" --runs "$runs" > "$data/wasm.json" || status=1

python3 scripts/bench_forward.py report "$data/loom.json" "$data/native.json" "$data/wasm.json" | tee "$data/report.md"
# Keep this run for `python3 scripts/bench_forward.py ranges target/bench-data/fwd/runs/*` (spread over runs).
run="$data/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
cp "$data"/{loom,native,wasm}.json "$data/report.md" "$run/"
echo "=== load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ "$status" != 0 ]; then
    echo "=== some output differs from Loom's (see bit-identical above)" >&2
fi
exit "$status"

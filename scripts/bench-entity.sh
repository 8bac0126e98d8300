#!/usr/bin/env bash
# ENTITY load/save against Loom itself (welvet 0.80.0), and header-only inspection of 1 GiB files.
#
#   bash scripts/bench-entity.sh [RUNS]        (default 7 timed runs per measurement, medians reported)
#
# Needs python3 with welvet, a Rust toolchain, GNU dd and fincore (util-linux); hyperfine and strace for the
# `loom inspect` timing. Writes everything under target/bench-data/ (about 2.3 GB, never committed):
#   dense50m_<dtype>.entity     Loom's files: 12 Dense 2048x2048 (50.3 M weights) morphed to the dtype
#   inspect_1g.{entity,safetensors}   1 GiB files for the inspection benchmark (kept between runs)
#   loom.json ours.json inspect.json cli.json   raw timings;  report.md   the markdown tables
# The benchmark binary asserts that our re-save of each Loom file is byte-identical to it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

runs="${1:-7}"
data="$PWD/target/bench-data"
mkdir -p "$data"

echo "=== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "=== build (release: benchmark binary and loom CLI)" >&2
cargo bench -q -p loom-wasm --bench entity --no-run
cargo build -q --release --bin loom

echo "=== Loom (welvet): build, morph, serialize_entity; time deserialize_entity / serialize_entity" >&2
python3 scripts/bench_loom.py loom --runs "$runs" "$data" > "$data/loom.json"

echo "=== ours: entity::read / entity::write on the same bytes" >&2
cargo bench -q -p loom-wasm --bench entity -- entity --runs "$runs" \
    "$data"/dense50m_{float32,int8,int4,binary}.entity > "$data/ours.json"

echo "=== header-only inspection of 1 GiB .entity and .safetensors (library level)" >&2
cargo bench -q -p loom-wasm --bench entity -- inspect --runs "$((runs < 9 ? 9 : runs))" "$data" > "$data/inspect.json"

rm -f "$data/cli.json"
if ./target/release/loom inspect --help > /dev/null 2>&1 && command -v hyperfine > /dev/null && command -v strace > /dev/null; then
    echo "=== loom inspect (whole process: hyperfine, strace)" >&2
    python3 scripts/bench_loom.py cli --runs 30 ./target/release/loom \
        "$data/inspect_1g.entity" "$data/inspect_1g.safetensors" > "$data/cli.json"
else
    echo "=== skipped loom inspect timing (no 'loom inspect', hyperfine or strace)" >&2
fi

python3 scripts/bench_loom.py report "$data/loom.json" "$data/ours.json" "$data/inspect.json" "$data/cli.json" \
    | tee "$data/report.md"

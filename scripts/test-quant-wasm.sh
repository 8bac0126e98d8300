#!/usr/bin/env bash
# crate/tests/quant_blocks.rs compiled to WebAssembly and run in Node (wasm-bindgen-test-runner): the portable
# kernels and, built with simd128, the simd128 ones. Each build has its own target dir (RUSTFLAGS differ).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
base=${CARGO_TARGET_DIR:-target}
for simd in "" "+simd128"; do
    echo "== wasm32 ${simd:-without simd128}"
    RUSTFLAGS=${simd:+"-C target-feature=$simd"} CARGO_TARGET_DIR="$base/quant-wasm${simd:+-simd128}" \
        cargo test -p loom-wasm --target wasm32-unknown-unknown --test quant_blocks
done

#!/usr/bin/env bash
# All of loom-wasm's checks, in order: format, lints (the fuzz targets' too), native tests, browser tests
# (headless Chromium), the npm package (Node, Playwright, a fresh Vite project), the demo app (Playwright), Loom
# conformance corpus (CPU and GPU). Run `bash scripts/setup.sh` once first on a new machine.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PWD/node_modules/.bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"                   # silences Mesa's "XDG_RUNTIME_DIR is invalid"
export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json  # native wgpu: Mesa lavapipe only
export WGPU_BACKEND=vulkan
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
export CHROMEDRIVER=/usr/bin/chromedriver
export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/webdriver.json"      # Chromium flags (WebGPU, no network noise)
export WASM_BINDGEN_TEST_TIMEOUT=900                               # default is 20 s per test binary; gpu_ops takes ~300 s here
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

t0=$SECONDS
step() { echo "=== $* (t=$((SECONDS - t0))s)"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings   # the fuzz targets too (API drift; they run under cargo-fuzz)
cargo clippy -p loom-wasm -p loom-grammar --lib --target wasm32-unknown-unknown -- -D warnings   # the wasm bindings build only there
for half in inspector chat; do   # each npm wasm module is built with one of them alone (scripts/build-pkg.sh)
  cargo clippy -p loom-wasm --lib --target wasm32-unknown-unknown --no-default-features --features $half -- -D warnings
done
cargo clippy -p loom-wasm-browser-tests --tests --target wasm32-unknown-unknown -- -D warnings   # the browser tests

step "native tests"
cargo test --workspace

step "browser tests (wasm-bindgen-test in headless Chromium)"
# No debug info: the test .wasm is several times smaller and the runner loads it faster.
CARGO_PROFILE_DEV_DEBUG=0 cargo test -p loom-wasm-browser-tests --target wasm32-unknown-unknown

step "npm package: wasm build (scripts/build-pkg.sh), raw bindings under Node"
bash scripts/build-pkg.sh
node --test tests-wasm/node/

step "npm package: Node, Chromium (Playwright) and fresh-Vite tests (scripts/test-web.sh)"
LOOM_WEB_SKIP_PKG=1 bash scripts/test-web.sh

step "release readiness: npm and cargo publish --dry-run (scripts/check-release.sh)"
bash scripts/check-release.sh

step "demo app: Playwright suite in Chromium (scripts/test-www.sh)"
bash scripts/test-www.sh

step "conformance corpus (loom conformance testdata/conformance)"
cargo run -q --bin loom -- conformance testdata/conformance --check all
cargo run -q --bin loom -- conformance testdata/loom-extra --check all
cargo run -q --bin loom -- conformance testdata/conformance --check forward --device gpu
cargo run -q --bin loom -- conformance testdata/loom-extra --check forward --device gpu

step "all checks passed"

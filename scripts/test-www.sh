#!/usr/bin/env bash
# The demo app's checks: builds what is stale (scripts/build-www.sh), type-checks the tests, then runs the
# Playwright suite in Debian's Chromium with WebGPU (www/e2e). Run `bash scripts/setup.sh` once first.
# WWW_SCREENSHOTS=1 also retakes the README's screenshots (docs/screenshots/).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"   # the conversion tests compare with `cargo run --bin loom -- convert`
t0=$SECONDS
step() { echo "=== www: $* (t=$((SECONDS - t0))s)"; }

step "build (wasm core, npm package, app) where stale"
bash scripts/build-www.sh

cd www
step "tsc (e2e)"
node_modules/.bin/tsc --noEmit -p tsconfig.e2e.json

step "Playwright (www/e2e, /usr/bin/chromium)"
node_modules/.bin/playwright test

step "www checks passed"

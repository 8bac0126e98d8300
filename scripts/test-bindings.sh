#!/usr/bin/env bash
# Builds web/pkg (scripts/build-pkg.sh) and runs the Node tests of the raw wasm-bindgen API against Loom's corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-pkg.sh
node --test tests-wasm/node/

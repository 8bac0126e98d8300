#!/usr/bin/env bash
# The npm package's checks: builds the wasm (scripts/build-pkg.sh → web/pkg) and web/dist, then the Node tests
# (node:test), the Chromium tests (Playwright, Debian's /usr/bin/chromium) and the packed tarball in a fresh Vite
# project. Run `bash scripts/setup.sh` once first. LOOM_WEB_SKIP_PKG=1 reuses an existing web/pkg.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
t0=$SECONDS
step() { echo "=== web: $* (t=$((SECONDS - t0))s)"; }

if [ "${LOOM_WEB_SKIP_PKG:-}" != 1 ]; then
  step "wasm build (scripts/build-pkg.sh)"
  bash scripts/build-pkg.sh
fi

cd web
step "tsc → web/dist"
node scripts/build.mjs
for wasm in dist/pkg/loom_wasm_bg.wasm dist/pkg-chat/loom_chat_bg.wasm; do
  echo "web: $wasm $(stat -c %s $wasm) bytes, $(gzip -9 -c $wasm | wc -c) gzipped"
done

step "node tests"
node --test test/*.test.mjs

step "the openai package's types against ours (tsc -p test/types)"
node_modules/.bin/tsc -p test/types

step "Chromium tests (Playwright) and the tarball in a fresh Vite project"
node_modules/.bin/playwright test

step "web checks passed"

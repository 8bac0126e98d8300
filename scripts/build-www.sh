#!/usr/bin/env bash
# Builds what the demo app needs, skipping what is up to date: the wasm modules (scripts/build-pkg.sh) when
# a Rust/WGSL source is newer than them, the npm package (web/dist) when its sources or the wasm are newer, then the
# app itself (www/dist) with the sample network copied into it. Used by start.sh and test-www.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
log() { echo "[build-www] $*"; }

# Is any file under the given paths newer than $1 (or $1 missing)?
stale() {
  local target=$1
  shift
  [ ! -e "$target" ] || [ -n "$(find "$@" -newer "$target" -type f -print -quit 2>/dev/null)" ]
}

wasm=web/pkg-chat/loom_chat_bg.wasm   # build-pkg.sh builds it last
if stale "$wasm" crate/src crate/Cargo.toml shaders Cargo.toml Cargo.lock; then
  log "wasm core (scripts/build-pkg.sh)"
  bash scripts/build-pkg.sh
fi

for dir in web www; do
  [ -d "$dir/node_modules" ] || { echo "build-www: $dir/node_modules is missing: run scripts/setup.sh" >&2; exit 1; }
done

if stale web/dist/index.js web/src web/pkg web/pkg-chat web/scripts web/package.json web/tsconfig.json; then
  log "npm package (web/dist)"
  (cd web && node scripts/build.mjs)
fi

# The app: the two sample networks are served next to it (www/public is copied into www/dist by Vite).
mkdir -p www/public
cp -p testdata/sample/decoder.entity www/public/decoder.entity
cp -p testdata/sample/sample.entity www/public/sample.entity
if stale www/dist/index.html www/src www/public www/index.html www/vite.config.ts www/package.json web/dist; then
  log "app (www/dist)"
  (cd www && node_modules/.bin/tsc --noEmit && node_modules/.bin/vite build --logLevel warn)
fi

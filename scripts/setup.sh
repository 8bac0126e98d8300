#!/usr/bin/env bash
# Idempotent machine setup for loom-wasm (Debian 12, root, package registries only).
# Each step checks first and skips what is present, so a re-run is a fast no-op.
# Fresh machine: about 5 min, mostly the wasm-bindgen-cli build (see /work/shared/research/toolchain.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
t0=$SECONDS
step_start=$SECONDS
log() { echo "[setup t=$((SECONDS - t0))s] $*"; }
done_step() { log "$1 ($((SECONDS - step_start))s)"; step_start=$SECONDS; }

# 1. Debian packages: Chromium + ChromeDriver for the browser tests, Mesa lavapipe for native wgpu later.
apt_packages=(chromium chromium-driver mesa-vulkan-drivers)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  # Another apt process may hold the lock; wait for it instead of failing.
  apt_opts=(-o DPkg::Lock::Timeout=600)
  "${sudo_cmd[@]}" apt-get "${apt_opts[@]}" update -qq
  "${sudo_cmd[@]}" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
done_step "apt packages"

# 2. Rust: wasm32 target and the rustfmt/clippy components test.sh uses.
installed_targets=$(rustup target list --installed)
grep -qx wasm32-unknown-unknown <<<"$installed_targets" || rustup target add wasm32-unknown-unknown
installed_components=$(rustup component list --installed)
for c in rustfmt clippy; do
  grep -q "^$c" <<<"$installed_components" || rustup component add "$c"
done
done_step "rust target + components"

# 3. wasm-bindgen CLI (wasm-bindgen, wasm-bindgen-test-runner), which must equal the wasm-bindgen in Cargo.lock.
wanted=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ -z "$wanted" ]; then
  echo "setup: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
if [ "$have" != "$wanted" ] || ! command -v wasm-bindgen-test-runner >/dev/null; then
  log "cargo install wasm-bindgen-cli $wanted (have: ${have:-none}; ~4 min on 2 cores)"
  # --locked can fail: the registry mirror lacks some locked versions (webpki-roots 1.0.11 for 0.2.130).
  cargo install wasm-bindgen-cli --version "$wanted" --locked --force 2>/dev/null ||
    cargo install wasm-bindgen-cli --version "$wanted" --force
fi
done_step "wasm-bindgen-cli $wanted"

# 4. wasm-pack, which scripts/build-pkg.sh runs (~6 min to build on 2 cores; skipped when present).
if ! command -v wasm-pack >/dev/null; then
  log "cargo install wasm-pack"
  cargo install wasm-pack --locked
fi
done_step "wasm-pack"

# 5. npm devDependencies of the repo root (binaryen's wasm-opt). `npm ci` fails on this registry mirror,
#    so use `npm install` against the committed lock, and only when node_modules is older than the lock.
marker=node_modules/.package-lock.json
if [ ! -f "$marker" ] || [ package.json -nt "$marker" ] || [ package-lock.json -nt "$marker" ]; then
  log "npm install (repo root)"
  npm install --no-audit --no-fund --loglevel=error
  touch "$marker"
fi
done_step "npm install"

# 6. npm devDependencies of web/ (TypeScript, Playwright; no browser download: the tests use /usr/bin/chromium).
marker=web/node_modules/.package-lock.json
if [ ! -f "$marker" ] || [ web/package.json -nt "$marker" ] || [ web/package-lock.json -nt "$marker" ]; then
  log "npm install (web/)"
  (cd web && npm install --no-audit --no-fund --loglevel=error)
  touch "$marker"
fi
done_step "npm install (web/)"

log "setup done"

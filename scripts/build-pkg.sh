#!/usr/bin/env bash
# Builds the npm package's three wasm modules: web/pkg (the inspector's), web/pkg-chat (the chat's) and
# web/pkg-grammar (the grammar engine, grammar/): `wasm-pack build --target web --release` (cargo → wasm-bindgen →
# wasm-opt from the repo root's npm `binaryen`), then prints each raw and gzipped .wasm size and fails when one
# exceeds 1.5 MB gzipped. `scripts/setup.sh` installs wasm-pack and binaryen.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PWD/node_modules/.bin:$PATH"
for tool in wasm-pack wasm-bindgen wasm-opt; do
  command -v "$tool" >/dev/null || { echo "build-pkg: $tool not found; run scripts/setup.sh" >&2; exit 1; }
done

# Fat LTO, one codegen unit and opt-level "s" for dependencies (Cargo.toml keeps our crate at 3): the LLM runtime's
# dependencies put the module over the size limit otherwise (1.66 MB gzipped without, 1.37 MB with). The text and
# binding crates, off every hot path, get "z" (1,498,321 → 1,427,342 bytes gzipped; SmolLM2's open and a 32-token
# reply in Node took the same time, within 2 %, in an A/B of the two builds).
size_crates="tokenizers minijinja minijinja-contrib fancy-regex regex regex-automata regex-syntax aho-corasick daachorse
  esaxx-rs spm_precompiled unicode-normalization-alignments unicode-segmentation unicode_categories compact_str wgpu
  wgpu-types web-sys js-sys serde_json serde-wasm-bindgen safetensors itertools rayon rayon-core futures-util
  wasm-bindgen-futures"
size_config=()
for crate in $size_crates; do size_config+=(--config "profile.release.package.$crate.opt-level=\"z\""); done
# Each module under the size limit, and a page loads only those it uses: from this crate the inspector's
# (web/pkg/loom_wasm) and the chat's (web/pkg-chat/loom_chat); the grammar engine (grammar/, llguidance) only once
# a reply is constrained.
build() { # crate, out dir, out name, cargo arguments
  local crate=$1 dir=$2 name=$3
  shift 3
  CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=s \
    wasm-pack build "$crate" --target web --release --out-dir "../web/$dir" --out-name "$name" -- "$@"
}
build crate pkg loom_wasm --no-default-features --features inspector "${size_config[@]}"
build crate pkg-chat loom_chat --no-default-features --features chat "${size_config[@]}"
build grammar pkg-grammar loom_grammar

limit=1500000
status=0
for wasm in web/pkg/loom_wasm_bg.wasm web/pkg-chat/loom_chat_bg.wasm web/pkg-grammar/loom_grammar_bg.wasm; do
  raw=$(stat -c %s "$wasm")
  gz=$(gzip -9 -c "$wasm" | wc -c)
  echo "build-pkg: $wasm $raw bytes raw, $gz bytes gzipped (limit $limit)"
  if [ "$gz" -gt "$limit" ]; then
    echo "build-pkg: $wasm gzipped is over the limit" >&2
    status=1
  fi
done
exit $status

#!/usr/bin/env bash
# Builds the npm package's two wasm modules, web/pkg (the inspector's) and web/pkg-chat (the chat's): `wasm-pack
# build --target web --release` (cargo → wasm-bindgen → wasm-opt from the repo root's npm `binaryen`), then prints
# each raw and gzipped .wasm size and fails when one exceeds 1.5 MB gzipped. `scripts/setup.sh` installs wasm-pack and binaryen.
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
# Two modules from the one crate, each under the size limit: the inspector's (web/pkg/loom_wasm) and the chat's
# (web/pkg-chat/loom_chat). A page loads only the one it uses.
build() { # feature, out dir, out name
  CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=s \
    wasm-pack build crate --target web --release --out-dir "../web/$2" --out-name "$3" \
    -- --no-default-features --features "$1" "${size_config[@]}"
}
build inspector pkg loom_wasm
build chat pkg-chat loom_chat

limit=1500000
status=0
for wasm in web/pkg/loom_wasm_bg.wasm web/pkg-chat/loom_chat_bg.wasm; do
  raw=$(stat -c %s "$wasm")
  gz=$(gzip -9 -c "$wasm" | wc -c)
  echo "build-pkg: $wasm $raw bytes raw, $gz bytes gzipped (limit $limit)"
  if [ "$gz" -gt "$limit" ]; then
    echo "build-pkg: $wasm gzipped is over the limit" >&2
    status=1
  fi
done
exit $status

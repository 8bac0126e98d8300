#!/usr/bin/env bash
# Builds the npm package's wasm core into web/pkg: `wasm-pack build --target web --release` (cargo → wasm-bindgen
# → wasm-opt from the repo root's npm `binaryen`), then prints the raw and gzipped .wasm size and fails when the
# gzipped wasm exceeds 1.5 MB. `scripts/setup.sh` installs wasm-pack and binaryen.
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
CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=s \
  wasm-pack build crate --target web --release --out-dir ../web/pkg -- "${size_config[@]}"

wasm=web/pkg/loom_wasm_bg.wasm
raw=$(stat -c %s "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
limit=1500000
echo "build-pkg: $wasm $raw bytes raw, $gz bytes gzipped (limit $limit)"
if [ "$gz" -gt "$limit" ]; then
  echo "build-pkg: the gzipped wasm is over the limit" >&2
  exit 1
fi

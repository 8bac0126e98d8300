#!/usr/bin/env bash
# Fetches llama.cpp's vocab-only GGUFs that are too large to commit (llama-bpe 7.8 MB, qwen2 5.9 MB,
# deepseek-llm 4.0 MB) with their golden .inp/.out files into models/llama-vocab/ (git-ignored), from the
# llama-cpp-python 0.3.36 sdist (MIT). crate/tests/llm_tokenizer.rs tests them when present and skips otherwise.
# The small ones (llama-spm, gpt-2) are committed under testdata/llm/vocab/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/llama-vocab
names=(llama-bpe qwen2 deepseek-llm)
if [ -f "$out/ggml-vocab-${names[-1]}.gguf.out" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# pip prepares the sdist's metadata (installing its build backend) before it keeps the file: a few minutes.
python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$tmp" llama-cpp-python==0.3.36 || true
sdist=$(ls "$tmp"/llama_cpp_python-0.3.36.tar.gz 2>/dev/null || true)
if [ -z "$sdist" ]; then
  echo "fetch-llama-vocab: could not download the llama-cpp-python 0.3.36 sdist" >&2
  exit 1
fi
mkdir -p "$out"
members=()
for n in "${names[@]}"; do
  for ext in "" .inp .out; do members+=("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$n.gguf$ext"); done
done
tar -xzf "$sdist" -C "$tmp" "${members[@]}"
cp "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-* "$out/"
echo "fetch-llama-vocab: wrote $out"

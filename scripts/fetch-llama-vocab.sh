#!/usr/bin/env bash
# Fetches llama.cpp's vocab-only GGUFs that are too large to commit (llama-bpe 7.8 MB, qwen2 5.9 MB,
# deepseek-llm 4.0 MB) with their golden .inp/.out files into models/llama-vocab/ (git-ignored), from the
# llama-cpp-python 0.3.36 sdist (MIT). crate/tests/llm_tokenizer.rs tests them when present and skips otherwise.
# The small ones (llama-spm, gpt-2) are committed under testdata/llm/vocab/.
#
# `pip download` of this sdist unpacks it and then prepares its metadata, which builds llama.cpp (very slow).
# The files are taken from the unpacked tree as soon as it appears, and pip is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/llama-vocab
names=(llama-bpe qwen2 deepseek-llm)
if [ -f "$out/ggml-vocab-${names[-1]}.gguf.out" ]; then exit 0; fi
tmp=$(mktemp -d)
TMPDIR=$tmp python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$tmp/dl" llama-cpp-python==0.3.36 >/dev/null 2>&1 &
pip_pid=$!
trap 'kill $pip_pid 2>/dev/null || true; wait $pip_pid 2>/dev/null || true; rm -rf "$tmp" 2>/dev/null || true' EXIT
models=""
for _ in $(seq 600); do
  models=$(find "$tmp" -path "*vendor/llama.cpp/models/ggml-vocab-${names[-1]}.gguf.out" 2>/dev/null | head -1)
  [ -n "$models" ] && break
  kill -0 $pip_pid 2>/dev/null || break
  sleep 1
done
if [ -z "$models" ]; then
  echo "fetch-llama-vocab: the llama-cpp-python 0.3.36 sdist did not unpack" >&2
  exit 1
fi
sleep 2 # let the unpacking finish
mkdir -p "$out"
for n in "${names[@]}"; do
  cp "$(dirname "$models")/ggml-vocab-$n.gguf"{,.inp,.out} "$out/"
done
echo "fetch-llama-vocab: wrote $out"

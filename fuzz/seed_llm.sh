#!/usr/bin/env bash
# Seeds fuzz/corpus/{gguf_model,tokenizer_template,safetensors_hf}/ from the tiny-llama goldens
# (GOLDEN, default ../../shared/golden beside the checkout) and the chat templates of testdata/templates/
# (TEMPLATES to take them from elsewhere).
set -euo pipefail
cd "$(dirname "$0")"
golden=${GOLDEN:-../../shared/golden}
tiny=$golden/tiny-llama
mkdir -p corpus/gguf_model corpus/tokenizer_template corpus/safetensors_hf
for f in "$tiny"/*.gguf; do
    cp "$f" "corpus/gguf_model/$(basename "$f")"
    chmod u+w "corpus/gguf_model/$(basename "$f")"
done
for f in "$tiny"/*.safetensors; do
    { cat "$tiny/config.json"; printf '\0'; cat "$f"; } > "corpus/safetensors_hf/$(basename "$f")"
done
# Tokenizer + template pairs: the tiny tokenizer with each template; the template alone (empty tokenizer part).
templates=("${TEMPLATES:-../testdata/templates}"/*.jinja)
[ -e "${templates[0]}" ] || templates=()
python3 - "$golden/smollm2/expected.json" corpus/tokenizer_template/chatml.jinja <<'PY'
import json, sys
open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["chat_template"])
PY
templates+=(corpus/tokenizer_template/chatml.jinja)
for f in "${templates[@]}"; do
    name=$(basename "$f" .jinja)
    { cat "$tiny/tokenizer.json"; printf '\0'; cat "$f"; } > "corpus/tokenizer_template/tok-$name"
    { printf '\0'; cat "$f"; } > "corpus/tokenizer_template/tpl-$name"
done
rm corpus/tokenizer_template/chatml.jinja
cp "$tiny/tokenizer.json" corpus/tokenizer_template/tokenizer.json
for t in corpus/gguf_model corpus/tokenizer_template corpus/safetensors_hf; do echo "$t: $(ls "$t" | wc -l) files"; done

#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from Loom's corpora (the corpus directories are not committed).
set -euo pipefail
cd "$(dirname "$0")"
cases=../testdata/conformance/cases
mkdir -p corpus/entity_read corpus/entity_header corpus/loom_json_read corpus/q4_0_parse
for dir in ../testdata/conformance/cases ../testdata/loom-extra/cases; do
    [ -d "$dir" ] || continue
    tag=$(basename "$(dirname "$dir")")
    for f in "$dir"/*/*.entity; do
        id=$tag-$(basename "$(dirname "$f")")-$(basename "$f")
        cp "$f" "corpus/entity_read/$id"
        cp "$f" "corpus/entity_header/$id"
    done
    for f in "$dir"/*/*.json; do
        cp "$f" "corpus/loom_json_read/$tag-$(basename "$(dirname "$f")")-$(basename "$f")"
    done
done
for f in "$cases"/q4_0_pack_vectors/*.bin; do
    cp "$f" "corpus/q4_0_parse/$(basename "$f")"
done
# The Q4_0 blobs of the emulated transformer entity.
python3 - "$cases/q4_0_transformer_entity/emulated_q4.entity" corpus/q4_0_parse <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[12:20])[0]
payload = data[20 + n:]
for b in json.loads(data[20:20 + n])["blobs"]:
    if b["dtype"] == "Q4_0":
        open(f"{sys.argv[2]}/{b['path']}", "wb").write(payload[b["offset"]:b["offset"] + b["length"]])
PY
for t in corpus/*; do echo "$t: $(ls "$t" | wc -l) files"; done

#!/usr/bin/env bash
# The GPU device check: one command on a GPU machine (Vulkan, no network), with binaries built beforehand here.
#
#   bash scripts/device-check.sh --build     here: release `loom`, the device_check bench and the gpu_ops / llm_gpu
#                                           test binaries (stripped, gzipped), the tiny-llama goldens and the Vulkan
#                                           loader packages, all into .devcheck/ (ignored; about 15 MB)
#   bash scripts/device-check.sh --build --base COMMIT [COMMIT...]
#                                           the same, plus each COMMIT's device_check (built in a worktree under
#                                           target/) as .devcheck/bin/device_check_base_COMMIT: the run then measures
#                                           those engines beside this one, same machine, same call
#   bash scripts/device-check.sh             there (the device tool: carry [".devcheck"]), or here on lavapipe
#
# No model file travels: device_check generates each model's weights from a seed at the real shapes of
# SmolLM2-135M, Qwen2.5-0.5B, Llama-3.2-1B and Gemma-3-270M in Q4_0, Q4_1, Q8_0, Q4_K_M and F16. The run writes
# $OUT/device-check.json (adapter, features, limits, the GPU op cases and tiny-llama goldens on the GPU, `loom
# generate --device gpu` against the goldens' greedy ids, then per shape × type: decode and prefill tok/s,
# dispatches per token and per-kernel GPU time from timestamp queries with each matvec's bytes/s against the
# measured copy bandwidth), and the logs and raw JSON beside it in logs.tar.gz. It takes about 3 minutes on an H100.
# Environment: OUT (default target/device-check), SHAPES (all, or e.g. tiny on a CPU adapter), TYPES,
# PREFILL_TOKENS (512), DECODE_TOKENS (64), RUNS (2), FOLD_NORMS (0, 1 or both; default: the engine's choice),
# PREFILL_CHUNKS (prompt tokens per submit to time the prefill at too; default 64,128,256,512; none: empty),
# DECODE_SUBMIT_BLOCKS (a decode step's blocks per submit to time the decode at too; default 0,4,8,16; none: empty),
# ATTENTION_RUNS (fewest positions of a decode attention run to time the decode at too, e.g. 8,16,32),
# ATTENTION_MAX_SPLITS (runs a decode attention query takes before its runs grow, to time the decode at too, e.g. 8,16),
# TILED_FULL_GROUPS (64-row workgroups a prefill product fills before a lane a row, to time the prefill at too),
# TILED_ROWS (rows a lane of a prefill product takes, to time the prefill at too; default 1,2,4; none: empty),
# CASES (a pattern: only the GPU op cases it matches), BASE_TYPES (the types of the baseline runs).
set -uo pipefail
cd "$(dirname "$0")/.."
dc=.devcheck

if [ "${1:-}" = "--build" ]; then
    set -e
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    rm -rf "$dc" && mkdir -p "$dc/bin" "$dc/shared/golden" "$dc/gl"
    exe() { jq -r 'select(.executable != null) | .executable' | tail -n 1; }
    command -v jq >/dev/null || { echo "needs jq (apt-get install jq)" >&2; exit 1; }
    cargo build --release --bin loom
    strip -o "$dc/bin/loom" target/release/loom
    strip -o "$dc/bin/device_check" \
        "$(cargo bench -p loom-wasm --bench device_check --no-run --message-format=json 2>/dev/null | exe)"
    for t in gpu_ops llm_gpu; do
        strip -o "$dc/bin/$t" \
            "$(cargo test --release -p loom-wasm --test "$t" --no-run --message-format=json 2>/dev/null | exe)"
    done
    cp -r ../shared/golden/tiny-llama "$dc/shared/golden/"
    # The test binaries find the repository and ../shared by the paths they were built at.
    pwd > "$dc/build-root"
    # The device image may lack the Vulkan loader (the driver's ICD is there): Debian's, unpacked at run time.
    (cd "$dc/gl" && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1) || echo "no Vulkan loader package fetched" >&2
    if [ "${2:-}" = "--base" ]; then
        shift 2
        wt=target/devcheck-base/tree
        for base in "$@"; do
            short="$(git rev-parse --short "$base")"
            rm -rf "$wt" && git worktree prune && git worktree add --detach "$wt" "$base" >/dev/null
            strip -o "$dc/bin/device_check_base_$short" "$(cd "$wt" && CARGO_TARGET_DIR=../target cargo bench \
                -p loom-wasm --bench device_check --no-run --message-format=json 2>/dev/null | exe)"
            git worktree remove --force "$wt"
        done
    fi
    # Compressed, so that they and the tree stay under the device tool's 64 MiB; unpacked there.
    gzip -9 "$dc"/bin/*
    du -sh "$dc"
    exit 0
fi

OUT="${OUT:-$PWD/target/device-check}"
mkdir -p "$OUT"
for f in "$dc"/bin/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
[ -x "$dc/bin/device_check" ] || { echo "run scripts/device-check.sh --build first" >&2; exit 1; }
started=$(date +%s)
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# NVIDIA's driver is mounted at /usr/local/nvidia; its Vulkan ICD needs the loader and glvnd (Debian's, unpacked).
nv=/usr/local/nvidia/share
if [ -f "$nv/vulkan/icd.d/nvidia_icd.json" ]; then
    for f in "$dc"/gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES="${VK_DRIVER_FILES:-$nv/vulkan/icd.d/nvidia_icd.json}"
    export __EGL_VENDOR_LIBRARY_FILENAMES="${__EGL_VENDOR_LIBRARY_FILENAMES:-$nv/glvnd/egl_vendor.d/10_nvidia.json}"
fi
root="$(cat "$dc/build-root")"
if [ "$root" != "$PWD" ] && [ ! -e "$root" ]; then mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; fi
# CARGO_TARGET_TMPDIR, baked in too.
mkdir -p "$root/target/tmp"
shared="$(dirname "$root")/shared"
[ -e "$shared/golden/tiny-llama" ] || { mkdir -p "$(dirname "$shared")" && ln -sfn "$PWD/$dc/shared" "$shared"; }

echo "Vulkan loader: $(ldconfig -p | grep -c libvulkan.so.1) found; ICD: ${VK_DRIVER_FILES:-none set}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory,clocks.max.sm --format=csv \
    >"$OUT/nvidia-smi.csv" 2>&1 || true
echo "=== GPU op cases against their CPU twins, each in its own process (a hang or a crash names its case)"
: >"$OUT/gpu_ops.log"
"$dc/bin/gpu_ops" --list --format terse 2>/dev/null | sed -n 's/: test$//p' | grep -e "${CASES:-}" | while read -r case; do
    timeout 60 "$dc/bin/gpu_ops" --exact "$case" --test-threads 1 >"$OUT/case.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then echo "test $case ... ok" >>"$OUT/gpu_ops.log"; else
        echo "test $case ... FAILED (exit $rc)" >>"$OUT/gpu_ops.log"; tail -n 20 "$OUT/case.log" >>"$OUT/gpu_ops.log"; fi
done
rm -f "$OUT/case.log"
grep -c "\.\.\. ok$" "$OUT/gpu_ops.log" | sed 's/^/gpu_ops cases passed: /'
echo "=== tiny-llama goldens on the GPU (SmolLM2's file does not travel)"
# The fit check reads SmolLM2 too.
timeout 120 "$dc/bin/llm_gpu" --skip smollm2 --skip the_fit_check_from_the_headers --test-threads 2 >"$OUT/llm_gpu.log" 2>&1
echo "llm_gpu exit $?"
echo "=== loom generate --device gpu"
: >"$OUT/generate.jsonl"
for f in f32 f16 q8_0 q4_0 q4_1; do
    ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$dc/shared/golden/tiny-llama/expected.json'))['prompts'][2])))")
    out=$(timeout 60 "$dc/bin/loom" generate "$dc/shared/golden/tiny-llama/model.$f.gguf" --device gpu --ids "$ids" \
        --greedy --max-tokens 16 --json 2>&1 | tail -n 1)
    echo "{\"file\": \"model.$f.gguf\", \"output\": $(python3 -c 'import json,sys;print(json.dumps(sys.argv[1]))' "$out")}" \
        >>"$OUT/generate.jsonl"
done
echo "=== device_check at real shapes"
chunks="${PREFILL_CHUNKS-64,128,256,512}"
submit_blocks="${DECODE_SUBMIT_BLOCKS-0,4,8,16}"
attention_runs="${ATTENTION_RUNS-}"
max_splits="${ATTENTION_MAX_SPLITS-}"
full_groups="${TILED_FULL_GROUPS-}"
tiled_rows="${TILED_ROWS-1,2,4}"
timeout 300 "$dc/bin/device_check" --shapes "${SHAPES:-all}" --types "${TYPES:-q4_0,q4_1,q8_0,q4_k_m,f16}" \
    --prefill-tokens "${PREFILL_TOKENS:-512}" --decode-tokens "${DECODE_TOKENS:-64}" --runs "${RUNS:-2}" \
    ${FOLD_NORMS:+--fold-norms "$FOLD_NORMS"} ${chunks:+--prefill-chunks "$chunks"} \
    ${submit_blocks:+--decode-submit-blocks "$submit_blocks"} ${attention_runs:+--attention-runs "$attention_runs"} \
    ${max_splits:+--attention-max-splits "$max_splits"} \
    ${full_groups:+--tiled-full-groups "$full_groups"} ${tiled_rows:+--tiled-rows "$tiled_rows"} >"$OUT/shapes.json" 2>"$OUT/device_check.log"
echo "device_check exit $?"
tail -n 25 "$OUT/device_check.log"
# Baselines: earlier commits' device_check (--build --base), the same harness over an older engine, run on the same
# machine in the same call so that the engines compare.
for bin in "$dc"/bin/device_check_base_*; do
    [ -x "$bin" ] || continue
    commit="${bin##*_}"
    echo "=== baseline device_check ($commit)"
    timeout 300 "$bin" --shapes "${SHAPES:-all}" --types "${BASE_TYPES:-${TYPES:-q4_0,q4_1,q8_0,q4_k_m,f16}}" \
        --prefill-tokens "${PREFILL_TOKENS:-512}" --decode-tokens "${DECODE_TOKENS:-64}" --runs "${RUNS:-2}" \
        >"$OUT/shapes-base-$commit.json" 2>"$OUT/device_check_base_$commit.log"
    echo "baseline $commit exit $?"
done

python3 - "$OUT" "$dc" "$started" <<'EOF'
import glob, json, re, sys, time
out, dc, started = sys.argv[1], sys.argv[2], int(sys.argv[3])

def tests(name):
    try:
        log = open(f"{out}/{name}.log").read()
    except OSError:
        return {"ran": False}
    results = re.findall(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", log, re.M)
    summary = re.findall(r"^test result: .*$", log, re.M)
    return {"passed": sum(r == "ok" for _, r in results),
            "failed": [t for t, r in results if r == "FAILED"],
            "ignored": [t for t, r in results if r == "ignored"],
            "summary": summary[-1] if summary else f"{len(results)} cases, each in its own process"}

expected = json.load(open(f"{dc}/shared/golden/tiny-llama/expected.json"))
generate = []
for line in open(f"{out}/generate.jsonl"):
    g = json.loads(line)
    ws = next((w for w in expected["weight_sets"].values() if w["file"] == g["file"]), None)
    want = ws["results"][2]["greedy_ids"] if ws else None
    try:
        got = json.loads(g["output"])["ids"]
    except (ValueError, KeyError, TypeError):
        generate.append({"file": g["file"], "error": g["output"][-300:]})
        continue
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    generate.append({"file": g["file"], "ids": got, "golden": want, "same_prefix": same})
try:
    shapes = json.load(open(f"{out}/shapes.json"))
except (OSError, ValueError) as e:
    shapes = {"error": f"device_check gave no JSON: {e}"}
try:
    smi = open(f"{out}/nvidia-smi.csv").read().strip().splitlines()
except OSError:
    smi = []
report = {"nvidia_smi": smi, "op_cases": tests("gpu_ops"), "goldens": tests("llm_gpu"),
          "loom_generate": generate, **shapes, "seconds": int(time.time()) - started}
report["baselines"] = []
for path in sorted(glob.glob(f"{out}/shapes-base-*.json")):
    try:
        report["baselines"].append({"commit": path.rsplit("-", 1)[1][:-5], "runs": json.load(open(path))["runs"]})
    except (OSError, ValueError, KeyError) as e:
        report["baselines"].append({"commit": path, "error": str(e)})
json.dump(report, open(f"{out}/device-check.json", "w"), indent=1)
print(json.dumps({k: report[k] for k in ("op_cases", "goldens", "seconds")}, indent=1))
for r in report.get("runs", []) + [dict(r, type=r["type"] + " " + b["commit"])
                                   for b in report["baselines"] for r in b.get("runs", [])]:
    if "error" in r:
        print(f"{r['shape']:>14} {r['type']:>7}  ERROR {r['error']}")
    else:
        print(f"{r['shape']:>14} {r['type']:>7}  decode {r['decode']['tok_s']:8.1f} tok/s  prefill "
              f"{r['prefill']['tok_s']:9.1f} tok/s  deep {r.get('decode_after_prompt', {}).get('tok_s', 0):7.1f}  "
              f"{r['per_decoded_token']['dispatches']} dispatches/token  "
              f"folded {r['fold_norms']['decode']:d}/{r['fold_norms']['prefill']:d}  "
              f"gpu {r['decode']['gpu_ms_per_token']:.3f} ms/token"
              + "".join(f"  prefill@{c['chunk']} {c['tok_s']:.0f}" for c in r.get("prefill_by_chunk", []))
              + "".join(f"  rows{c['rows']} {c['tok_s']:.0f}" for c in r.get("prefill_by_tiled_rows", [])))
EOF
# The device tool brings back at most 8 files: the report, and the logs and raw JSON in one archive.
(cd "$OUT" && find . -maxdepth 1 -type f ! -name device-check.json ! -name logs.tar.gz -printf '%P\n' \
    | tar czf logs.tar.gz --remove-files -T -)

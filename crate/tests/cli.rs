//! The `loom` binary against Loom's corpus: inspect reads only headers and agrees with the manifest; convert
//! reproduces Loom's bytes, refuses lossy conversions and never overwrites silently.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance")
}

fn loom(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loom")).args(args).output().unwrap()
}

fn manifest_case(id: &str) -> Value {
    let m: Value = serde_json::from_slice(&std::fs::read(corpus().join("manifest.json")).unwrap()).unwrap();
    m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
        .clone()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loom-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn inspect_json_matches_the_manifest_and_reads_only_the_header() {
    for id in [
        "nested_int4",
        "grid_2x1x2x2",
        "transformer_int8",
        "layer_LSTM_fp4",
        "layer_MultiHeadAttention_int2",
    ] {
        let case = manifest_case(id);
        let file = corpus().join(case["files"]["loom.entity"].as_str().unwrap());
        let out = loom(&["inspect", "--json", file.to_str().unwrap()]);
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let header_json = case["sizes"]["entity_header_json"].as_u64().unwrap();
        assert_eq!(r["format"], "entity");
        assert_eq!(r["header_bytes"].as_u64().unwrap(), 20 + header_json, "{id}");
        assert_eq!(
            r["bytes_read"].as_u64().unwrap(),
            20 + header_json,
            "{id}: read beyond the header"
        );
        assert_eq!(r["weight_bytes"], case["sizes"]["entity_payload"], "{id}");
        // Every blob of the manifest is a layer row with its length, dtype and scale.
        for blob in case["blobs"].as_array().unwrap() {
            let row = r["layers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["path"] == blob["path"])
                .unwrap();
            assert_eq!(row["bytes"], blob["length"], "{id} {}", blob["path"]);
            assert_eq!(row["dtype"], blob["dtype"], "{id} {}", blob["path"]);
            assert_eq!(
                row["scale"].as_f64().map(|s| s as f32),
                blob["scale"].as_f64().map(|s| s as f32)
            );
        }
    }
}

#[test]
fn inspect_refuses_a_truncated_file_with_a_message() {
    let dir = scratch("truncated");
    let bytes = std::fs::read(corpus().join("cases/nested_int8/loom.entity")).unwrap();
    let cut = dir.join("cut.entity");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let out = loom(&["inspect", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the payload"));
}

#[test]
fn convert_reproduces_loom_bytes_both_ways() {
    let dir = scratch("convert");
    for id in [
        "layer_Dense_int4",
        "grid_2x1x2x2",
        "transformer_fp4",
        "layer_SwiGLU_binary",
    ] {
        let case = corpus().join("cases").join(id);
        let json = dir.join(format!("{id}.json"));
        let ent = dir.join(format!("{id}.entity"));
        assert!(loom(&[
            "convert",
            case.join("loom.entity").to_str().unwrap(),
            json.to_str().unwrap()
        ])
        .status
        .success());
        assert!(loom(&[
            "convert",
            case.join("loom.json").to_str().unwrap(),
            ent.to_str().unwrap()
        ])
        .status
        .success());
        assert_eq!(
            std::fs::read(&json).unwrap(),
            std::fs::read(case.join("loom.json")).unwrap(),
            "{id}"
        );
        assert_eq!(
            std::fs::read(&ent).unwrap(),
            std::fs::read(case.join("loom.entity")).unwrap(),
            "{id}"
        );
    }
}

#[test]
fn lossy_conversions_are_refused_unless_allowed_and_outputs_are_not_overwritten() {
    let dir = scratch("lossy");
    let input = corpus().join("cases/layer_Dense_float32/loom.entity");
    let out_path = dir.join("q.entity");
    let (inp, out) = (input.to_str().unwrap(), out_path.to_str().unwrap());
    let refused = loom(&["convert", inp, out, "--dtype", "int4"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("float32 → int4"));
    assert!(!out_path.exists());
    assert!(loom(&["convert", inp, out, "--dtype", "int4", "--allow-lossy"])
        .status
        .success());
    // The written int4 layer is what Loom's own int4 quantization of the same weights gives.
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        std::fs::read(corpus().join("cases/layer_Dense_int4/loom.entity")).unwrap()
    );
    let before = std::fs::read(&out_path).unwrap();
    assert_eq!(
        loom(&["convert", inp, out, "--dtype", "int8", "--allow-lossy"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        before,
        "an existing output was overwritten"
    );
    assert!(
        loom(&["convert", inp, out, "--dtype", "int8", "--allow-lossy", "--force"])
            .status
            .success()
    );
}

#[test]
fn safetensors_round_trip_keeps_the_topology_and_values() {
    use loom_wasm::formats::{entity, loom_json};
    let dir = scratch("st");
    let case = corpus().join("cases/nested_fp4");
    let st = dir.join("n.safetensors");
    let back = dir.join("n.json");
    assert!(loom(&[
        "convert",
        case.join("loom.entity").to_str().unwrap(),
        st.to_str().unwrap()
    ])
    .status
    .success());
    assert!(loom(&["convert", st.to_str().unwrap(), back.to_str().unwrap()])
        .status
        .success());
    // Back as float32 layers holding exactly the values Loom's fp4 layers compute with.
    let mut original = entity::read(&std::fs::read(case.join("loom.entity")).unwrap()).unwrap();
    let mut restored = loom_json::read(&std::fs::read(&back).unwrap()).unwrap();
    let mut values = Vec::new();
    loom_wasm::convert::for_each_layer_mut(&mut original, &mut |path, l| {
        if let Some(ws) = &l.weights {
            values.push((path.to_string(), ws.active(l.dtype)));
        }
    });
    let mut seen = 0;
    loom_wasm::convert::for_each_layer_mut(&mut restored, &mut |path, l| {
        if let Some(ws) = &l.weights {
            let (p, v) = &values[seen];
            assert_eq!((p.as_str(), l.dtype.name()), (path, "float32"));
            assert_eq!(&ws.master_values(), v, "{path}");
            seen += 1;
        }
    });
    assert_eq!(seen, values.len());
}

#[test]
fn export_writes_an_inference_copy_of_a_training_checkpoint() {
    let dir = scratch("export");
    let ckpt = dir.join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    std::fs::write(
        ckpt.join("weights.json"),
        r#"{"fc.weight": [[1.5, -2.0], [0.25, 3.0]]}"#,
    )
    .unwrap();
    std::fs::write(ckpt.join("meta.json"), r#"{"model": "tiny"}"#).unwrap();
    let out_dir = dir.join("out");
    let out = loom(&["export", ckpt.to_str().unwrap(), out_dir.to_str().unwrap(), "--half"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(
        &loom(&[
            "inspect",
            "--json",
            out_dir.join("weights.safetensors").to_str().unwrap(),
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(r["tensors"][0]["name"], "fc.weight");
    assert_eq!(r["tensors"][0]["dtype"], "F16");
    assert_eq!(r["tensors"][0]["shape"], serde_json::json!([2, 2]));
    assert_eq!(
        std::fs::read(out_dir.join("meta.json")).unwrap(),
        br#"{"model": "tiny"}"#
    );
}

#[test]
fn run_prints_loom_forward_output_and_refuses_bad_shapes() {
    for id in ["nested_fp4", "grid_2x1x2x2", "softmax_Entmax", "layer_SwiGLU_int4"] {
        let case = manifest_case(id);
        // loom.json: an .entity reload of a quantized RMSNorm changes its output (Loom's own quirk).
        let file = corpus().join(case["files"]["loom.json"].as_str().unwrap());
        let input = serde_json::to_string(&case["input"]).unwrap();
        let shape: Vec<String> = case["input_shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.to_string())
            .collect();
        let out = loom(&[
            "run",
            file.to_str().unwrap(),
            "--input",
            &input,
            "--shape",
            &shape.join(","),
            "--json",
        ]);
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let ours: Vec<u32> = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v.as_f64().unwrap() as f32).to_bits())
            .collect();
        let hex = case["expected_output_f32_hex"].as_str().unwrap();
        let loom_out: Vec<u32> = (0..hex.len() / 8)
            .map(|i| u32::from_le_bytes(u32::from_str_radix(&hex[8 * i..8 * i + 8], 16).unwrap().to_be_bytes()))
            .collect();
        assert_eq!(ours, loom_out, "{id}");
    }
    let file = corpus().join("cases/layer_Dense_int8/loom.entity");
    let bad = loom(&["run", file.to_str().unwrap(), "--input", "[1, 2, 3]", "--shape", "3"]);
    assert_eq!(bad.status.code(), Some(2));
    // layer_Dense_int8's spec: a Dense layer with input_height 5.
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the input must be [batch, 5] float values"));
}

#[test]
fn run_refuses_token_ids_that_are_not_integers_below_the_vocabulary() {
    // transformer_int8 (the sample) starts with an Embedding of vocab_size 10 (its spec.json).
    let case = manifest_case("transformer_int8");
    let file = corpus().join(case["files"]["loom.entity"].as_str().unwrap());
    for (input, value) in [
        ("[1, 4.5, 2, 9]", "value 1 is 4.5"),
        ("[1, 4, 10, 9]", "value 2 is 10"),
        ("[-1, 4, 2, 9]", "value 0 is -1"),
    ] {
        let out = loom(&["run", file.to_str().unwrap(), "--input", input, "--shape", "4"]);
        assert_eq!(out.status.code(), Some(2), "{input}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the input must be token ids, integers from 0 to 9"),
            "{err}"
        );
        assert!(err.contains(value), "{err}");
    }
}

/// The weights forward reads in one file, per layer path.
fn active_weights(path: &Path) -> Vec<(String, Vec<f32>)> {
    let net = loom_wasm::convert::read_network(std::fs::read(path).unwrap().into()).unwrap();
    let mut out = Vec::new();
    net.for_each_layer(&mut |p, l| {
        if let Some(ws) = &l.weights {
            out.push((p.to_string(), ws.active(l.dtype)));
        }
    });
    out
}

/// `(path, changed, max abs error)` from the report `loom convert` prints.
fn reported_losses(stdout: &str) -> Vec<(String, usize, f32)> {
    stdout
        .lines()
        .filter(|l| l.contains(" weights change, max abs error "))
        .map(|l| {
            let (path, rest) = l.split_once(" (").unwrap();
            let (_, counts) = rest.split_once("): ").unwrap();
            let changed = counts.split(' ').next().unwrap().parse().unwrap();
            let err = counts.rsplit(' ').next().unwrap().parse().unwrap();
            (path.to_string(), changed, err)
        })
        .collect()
}

/// What changes between two files' weights, as the report words it: `(path, changed, max abs error)`.
fn expected_losses(before: &[(String, Vec<f32>)], after: &[(String, Vec<f32>)]) -> Vec<(String, usize, f32)> {
    assert_eq!(before.len(), after.len());
    before
        .iter()
        .zip(after)
        .filter_map(|((path, old), (_, new))| {
            let diffs: Vec<f32> = old
                .iter()
                .zip(new)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .map(|(a, b)| (a - b).abs())
                .collect();
            let max = diffs.iter().copied().fold(0f32, f32::max);
            (!diffs.is_empty()).then(|| (path.clone(), diffs.len(), max))
        })
        .collect()
}

const LOOM_DTYPES: [&str; 21] = [
    "float32", "float64", "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "fp4", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "int4", "uint4", "int2", "uint2", "ternary", "binary",
];

#[test]
fn the_loss_report_describes_the_file_written_for_every_format_and_dtype() {
    let dir = scratch("loss");
    // Loom's own files are the truth: converting its float32 layer to dtype D writes Loom's D file byte for
    // byte, and the report must list exactly the weights that differ between Loom's two files. An `.entity`
    // keeps RMSNorm in float32 with its exact values (spec §8), so there an RMSNorm never changes.
    for layer in ["Dense", "RMSNorm"] {
        let source = corpus().join(format!("cases/layer_{layer}_float32/loom.json"));
        let before = active_weights(&source);
        for dtype in LOOM_DTYPES {
            for ext in ["entity", "json"] {
                let out = dir.join(format!("{layer}.{dtype}.{ext}"));
                let run = loom(&[
                    "convert",
                    source.to_str().unwrap(),
                    out.to_str().unwrap(),
                    "--dtype",
                    dtype,
                    "--allow-lossy",
                ]);
                assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
                let loom_file = corpus().join(format!("cases/layer_{layer}_{dtype}/loom.{ext}"));
                assert_eq!(
                    std::fs::read(&out).unwrap(),
                    std::fs::read(&loom_file).unwrap(),
                    "{layer} {dtype} {ext}"
                );
                let expected = expected_losses(&before, &active_weights(&loom_file));
                let reported = reported_losses(&String::from_utf8_lossy(&run.stdout));
                assert_eq!(reported, expected, "{layer} {dtype} {ext}");
                if layer == "RMSNorm" && ext == "entity" {
                    assert!(
                        reported.is_empty(),
                        "{dtype}: an .entity RMSNorm keeps its float32 values"
                    );
                }
            }
        }
    }
}

#[test]
fn the_loss_report_of_safetensors_is_the_rounding_to_its_tensor_type() {
    let dir = scratch("loss-st");
    let source = corpus().join("cases/layer_Dense_float32/loom.json");
    let before = active_weights(&source);
    for (dtype, tensor_type) in [("float32", "F32"), ("float16", "F16"), ("bfloat16", "BF16")] {
        let out = dir.join(format!("dense.{dtype}.safetensors"));
        let run = loom(&[
            "convert",
            source.to_str().unwrap(),
            out.to_str().unwrap(),
            "--dtype",
            dtype,
            "--allow-lossy",
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        // The file as the safetensors crate reads it, each value widened by the `half` crate.
        let bytes = std::fs::read(&out).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let tensor = file.tensor("layer_0.weights").unwrap();
        assert_eq!(format!("{:?}", tensor.dtype()), tensor_type);
        let width = tensor.data().len() / before[0].1.len();
        let written: Vec<f32> = tensor
            .data()
            .chunks_exact(width)
            .map(|c| match tensor_type {
                "F16" => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
                "BF16" => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
                _ => f32::from_le_bytes(c.try_into().unwrap()),
            })
            .collect();
        let expected = expected_losses(&before, &[("layers.0".to_string(), written)]);
        assert_eq!(
            reported_losses(&String::from_utf8_lossy(&run.stdout)),
            expected,
            "{dtype}"
        );
        if tensor_type == "F32" {
            assert!(expected.is_empty());
        }
    }
}

/// The app's tiny sample is Loom's own file: the corpus case it was copied from, byte for byte.
#[test]
fn the_sample_is_the_corpus_file_loom_wrote() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let sample = std::fs::read(root.join("sample/sample.entity")).unwrap();
    let corpus = std::fs::read(root.join("conformance/cases/transformer_int8/loom.entity")).unwrap();
    assert!(
        sample == corpus,
        "testdata/sample/sample.entity is not the corpus's transformer_int8"
    );
}

#[test]
fn the_loss_report_of_the_sample_leaves_entity_rmsnorm_alone() {
    let dir = scratch("loss-sample");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sample/sample.entity");
    let rmsnorms = [
        "layers.1.parallel_branches.0.sequential_layers.0",
        "layers.2.parallel_branches.0.sequential_layers.0",
        "layers.3",
    ];
    for (ext, names_rmsnorm) in [("entity", false), ("json", true)] {
        let out = dir.join(format!("sample.int4.{ext}"));
        let run = loom(&[
            "convert",
            sample.to_str().unwrap(),
            out.to_str().unwrap(),
            "--dtype",
            "int4",
            "--allow-lossy",
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let reported = reported_losses(&String::from_utf8_lossy(&run.stdout));
        for path in rmsnorms {
            assert_eq!(reported.iter().any(|(p, ..)| p == path), names_rmsnorm, "{ext} {path}");
        }
    }
}

/// An HF checkpoint (safetensors without a Loom topology, config.json beside it) re-exported to BF16: refused as
/// lossy without `--allow-lossy`, then written with the values torch wrote in the BF16 golden, and its report
/// lists exactly the tensors whose values differ between the F32 and BF16 goldens.
#[test]
fn an_hf_safetensors_file_re_exports_to_another_float_type() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden/tiny-llama");
    let inp = golden.join("model.f32.safetensors");
    let dir = scratch("retype");
    let out = dir.join("model.bf16.safetensors");
    let (inp_s, out_s) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let refused = loom(&["convert", inp_s, out_s, "--dtype", "bfloat16"]);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!out.exists());
    let done = loom(&["convert", inp_s, out_s, "--dtype", "bfloat16", "--allow-lossy"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let read = |p: &Path| {
        let f = loom_wasm::formats::safetensors::SafetensorsFile::open(p).unwrap();
        f.tensors()
            .map(|t| {
                let v = t.to_f32(loom_wasm::formats::safetensors::Semantics::Standard).unwrap();
                (t.name().to_string(), v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (source, written, torch) = (read(&inp), read(&out), read(&golden.join("model.bf16.safetensors")));
    assert_eq!(written, torch);
    let mut reported: Vec<String> = reported_losses(&String::from_utf8_lossy(&done.stdout))
        .into_iter()
        .map(|(p, _, _)| p)
        .collect();
    reported.sort();
    let differ: Vec<String> = source
        .iter()
        .filter(|(n, v)| torch[*n] != **v)
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!differ.is_empty());
    assert_eq!(reported, differ);
    let _ = std::fs::remove_dir_all(dir);
}

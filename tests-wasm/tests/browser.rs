//! Browser tests: the library compiled to wasm32 and run in headless Chromium by wasm-bindgen-test-runner
//! (`bash scripts/test.sh`, or `cargo test -p loom-wasm-browser-tests --target wasm32-unknown-unknown`).
//!
//! The expected values are Loom's own output from the conformance corpus in `testdata/conformance`, embedded at
//! compile time because the browser has no file system. `crate/tests/codecs_corpus.rs` runs the full native set.
#![cfg(target_arch = "wasm32")]

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use loom_wasm::dtype::q4_0::{self, Q4Blocks};
use loom_wasm::dtype::{auto_scale, dequantize, quantize, DType};
use serde_json::Value;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

/// Embeds a corpus file, path relative to `testdata/conformance/`.
macro_rules! corpus_str {
    ($path:expr) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/conformance/", $path))
    };
}
macro_rules! corpus_bytes {
    ($path:expr) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/conformance/", $path))
    };
}

/// `(dtype name, spec.json, loom.json)` of a `layer_Dense_<dtype>` case.
macro_rules! dense_case {
    ($dtype:literal) => {
        (
            $dtype,
            corpus_str!(concat!("cases/layer_Dense_", $dtype, "/spec.json")),
            corpus_str!(concat!("cases/layer_Dense_", $dtype, "/loom.json")),
        )
    };
}

/// One dtype of each codec family: wide float, half float, fp8, wrapping int, unsigned, sub-byte int, fp4,
/// 2-bit, binary (mean-abs scale).
const DENSE_CASES: [(&str, &str, &str); 10] = [
    dense_case!("float64"),
    dense_case!("float32"),
    dense_case!("bfloat16"),
    dense_case!("fp8e4m3"),
    dense_case!("int8"),
    dense_case!("uint16"),
    dense_case!("int4"),
    dense_case!("fp4"),
    dense_case!("ternary"),
    dense_case!("binary"),
];

/// `(name, payload)` of Loom's Q4_0 vectors; their inputs are in the manifest.
const Q4_0_FILES: [(&str, &[u8]); 3] = [
    ("n70", corpus_bytes!("cases/q4_0_pack_vectors/n70.q4_0.bin")),
    (
        "n64_with_zero_block",
        corpus_bytes!("cases/q4_0_pack_vectors/n64_with_zero_block.q4_0.bin"),
    ),
    ("n2240", corpus_bytes!("cases/q4_0_pack_vectors/n2240.q4_0.bin")),
];

fn first_layer_weights(doc: &Value) -> Vec<u8> {
    let b64 = doc["layers"][0]["weights"].as_str().expect("layers[0].weights");
    BASE64.decode(b64).expect("base64 weights")
}

fn f32_le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}

#[wasm_bindgen_test]
fn dense_quantize_matches_loom() {
    for (name, spec_text, loom_text) in DENSE_CASES {
        let dt = DType::parse(name).unwrap();
        let spec: Value = serde_json::from_str(spec_text).unwrap();
        let loom: Value = serde_json::from_str(loom_text).unwrap();
        let master = f32_le(&first_layer_weights(&spec));
        // Loom writes the scale as the shortest decimal of an f32, so f64 → f32 recovers it exactly.
        let expected_scale = loom["layers"][0]["scale"].as_f64().unwrap() as f32;

        let scale = auto_scale(dt, &master);
        assert_eq!(
            scale.to_bits(),
            expected_scale.to_bits(),
            "{name}: scale {scale:e} vs Loom {expected_scale:e}"
        );
        let bytes = quantize(dt, &master, scale);
        assert_eq!(bytes, first_layer_weights(&loom), "{name}: packed bytes");
        // Decoding gives one value per weight (padding dropped) and never NaN for these inputs.
        let values = dequantize(dt, &bytes, scale, master.len());
        assert_eq!(values.len(), master.len(), "{name}: dequantized length");
        assert!(
            values.iter().all(|v| v.is_finite()),
            "{name}: dequantized values finite"
        );
    }
}

#[wasm_bindgen_test]
fn q4_0_pack_matches_loom_vectors() {
    let manifest: Value = serde_json::from_str(corpus_str!("manifest.json")).unwrap();
    let case = manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "q4_0_pack_vectors")
        .unwrap();
    for (name, expected) in Q4_0_FILES {
        let vector = &case["vectors"][name];
        let input = f32_le(&from_hex(vector["input_f32_hex"].as_str().expect("input_f32_hex")));
        assert!(
            q4_0::pack(&input) == expected,
            "{name}: q4_0::pack differs from Loom's payload"
        );
        let blocks = Q4Blocks::parse(expected).expect("Loom's payload parses");
        assert_eq!(
            blocks.scales.len() as u64,
            vector["n_scales"].as_u64().unwrap(),
            "{name}: n_scales"
        );
        assert_eq!(blocks.to_bytes(), expected, "{name}: parse → to_bytes");
    }
}

/// Loom-written files of cases covering grids, nesting, every codec family and a transformer-like stack.
const ROUND_TRIP_CASES: &[(&str, &[u8], &[u8])] = &[
    (
        "grid_2x1x2x2",
        include_bytes!("../../testdata/conformance/cases/grid_2x1x2x2/loom.entity"),
        include_bytes!("../../testdata/conformance/cases/grid_2x1x2x2/loom.json"),
    ),
    (
        "transformer_int4",
        include_bytes!("../../testdata/conformance/cases/transformer_int4/loom.entity"),
        include_bytes!("../../testdata/conformance/cases/transformer_int4/loom.json"),
    ),
    (
        "layer_LSTM_fp8e5m2",
        include_bytes!("../../testdata/conformance/cases/layer_LSTM_fp8e5m2/loom.entity"),
        include_bytes!("../../testdata/conformance/cases/layer_LSTM_fp8e5m2/loom.json"),
    ),
    (
        "layer_MultiHeadAttention_binary",
        include_bytes!("../../testdata/conformance/cases/layer_MultiHeadAttention_binary/loom.entity"),
        include_bytes!("../../testdata/conformance/cases/layer_MultiHeadAttention_binary/loom.json"),
    ),
    (
        "layer_CNN2_uint16",
        include_bytes!("../../testdata/conformance/cases/layer_CNN2_uint16/loom.entity"),
        include_bytes!("../../testdata/conformance/cases/layer_CNN2_uint16/loom.json"),
    ),
];

#[wasm_bindgen_test]
fn entity_and_json_round_trip_byte_identical_to_loom() {
    use loom_wasm::formats::{entity, loom_json};
    for (id, loom_entity, loom_json_bytes) in ROUND_TRIP_CASES {
        let mut net = entity::read(loom_entity).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(
            entity::write(&mut net).unwrap() == *loom_entity,
            "{id}: entity → entity"
        );
        assert!(
            loom_json::write(&mut net).unwrap() == *loom_json_bytes,
            "{id}: entity → JSON"
        );
        let mut from_json = loom_json::read(loom_json_bytes).unwrap();
        assert!(
            entity::write(&mut from_json).unwrap() == *loom_entity,
            "{id}: JSON → entity"
        );
    }
}

#[wasm_bindgen_test]
fn header_only_inspection_in_the_browser() {
    let (_, loom_entity, _) = ROUND_TRIP_CASES[1];
    let n = loom_wasm::formats::entity::header_len(loom_entity).unwrap() as usize;
    let header_only = &loom_entity[..20 + n];
    let header = loom_wasm::formats::entity::read_header(header_only).unwrap();
    assert_eq!(header.payload_offset() + header.payload_len(), loom_entity.len() as u64);
    let report = loom_wasm::inspect::inspect_bytes(loom_entity).unwrap();
    assert_eq!(report.bytes_read, 20 + n as u64);
    assert_eq!(report.weight_bytes, header.payload_len());
}

/// `(case id, loom.json)` of the forward cases run in the browser: one per layer type, several dtypes.
macro_rules! forward_case {
    ($id:literal) => {
        ($id, corpus_bytes!(concat!("cases/", $id, "/loom.json")))
    };
}

const FORWARD_CASES: &[(&str, &[u8])] = &[
    forward_case!("layer_Dense_int4"),
    forward_case!("layer_Dense_fp8e5m2"),
    forward_case!("dense_tile_size_3"),
    forward_case!("layer_SwiGLU_bfloat16"),
    forward_case!("layer_RMSNorm_uint8"),
    forward_case!("layer_LayerNorm_float16"),
    forward_case!("layer_Embedding_ternary"),
    forward_case!("layer_KMeans_fp4"),
    forward_case!("softmax_Entmax"),
    forward_case!("softmax_Grid"),
    forward_case!("nested_int2"),
    forward_case!("grid_2x1x2x2"),
    forward_case!("layer_MultiHeadAttention_int8"),
    forward_case!("layer_MultiHeadAttention_fp4"),
    forward_case!("layer_RNN_float16"),
    forward_case!("layer_LSTM_uint4"),
    forward_case!("layer_CNN1_int2"),
    forward_case!("layer_CNN3_float32"),
    forward_case!("layer_ConvTransposed2D_float64"),
    forward_case!("transformer_int4"),
];

#[wasm_bindgen_test]
fn forward_is_bit_identical_to_loom_in_the_browser() {
    use loom_wasm::cpu::CpuModel;
    use loom_wasm::formats::loom_json;
    let manifest: Value = serde_json::from_str(corpus_str!("manifest.json")).unwrap();
    for (id, json) in FORWARD_CASES {
        let case = manifest["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == *id)
            .unwrap();
        let input = f32_le(&from_hex(case["input_f32_hex"].as_str().unwrap()));
        let expected = f32_le(&from_hex(case["expected_output_f32_hex"].as_str().unwrap()));
        let shape: Vec<usize> = case["input_shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let out = CpuModel::new(loom_json::read(json).unwrap())
            .forward(&input, &shape)
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out.data), bits(&expected), "{id}");
    }
}

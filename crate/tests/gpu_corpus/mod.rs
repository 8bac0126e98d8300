//! Loom-written layers with Loom's own forward outputs, for the `gpu_*` suites of the layer families the GPU took
//! over from the CPU: the one-layer cases of the corpora in `testdata/conformance` and `testdata/loom-extra`
//! (manifest inputs and outputs), and the calls of `testdata/forward/*.json` (stride, padding, tile, dtype variants).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use loom_wasm::conformance::hex_f32s;
use loom_wasm::cpu::Tensor;
use loom_wasm::formats::loom_json;
use loom_wasm::network::Network;
use serde_json::Value;

use crate::gpu_util::{close, cpu};

/// The tolerance of `loom conformance --device gpu` (`GPU_TOLERANCE`, from the error measured over both corpora).
const CORPUS_ABS: f32 = loom_wasm::gpu::GPU_TOLERANCE.0;
const CORPUS_REL: f32 = loom_wasm::gpu::GPU_TOLERANCE.1;

/// One forward call of a one-layer network, with Loom's output.
pub struct Case {
    pub id: String,
    pub net: Network,
    pub input: Vec<f32>,
    pub shape: Vec<usize>,
    pub loom: Vec<f32>,
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn shape(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

/// The forward cases of corpus `dir` (`conformance` or `loom-extra`) whose id starts with one of `prefixes`.
pub fn corpus(dir: &str, prefixes: &[&str]) -> Vec<Case> {
    let root = testdata().join(dir);
    let manifest = json(&root.join("manifest.json"));
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let id = c["id"].as_str().unwrap();
            prefixes.iter().any(|p| id.starts_with(p)) && c.get("input_f32_hex").is_some()
        })
        .map(|c| {
            let text = std::fs::read(root.join(c["files"]["loom.json"].as_str().unwrap())).unwrap();
            Case {
                id: format!("{dir}/{}", c["id"].as_str().unwrap()),
                net: loom_json::read(&text).unwrap(),
                input: hex_f32s(c["input_f32_hex"].as_str().unwrap()).unwrap(),
                shape: shape(&c["input_shape"]),
                loom: hex_f32s(c["expected_output_f32_hex"].as_str().unwrap()).unwrap(),
            }
        })
        .collect()
}

/// Every call of every case in `testdata/forward/<file>`.
pub fn forward(file: &str) -> Vec<Case> {
    let doc = json(&testdata().join("forward").join(file));
    let mut out = Vec::new();
    for case in doc["cases"].as_array().unwrap() {
        let net = loom_json::read(case["network"].as_str().unwrap().as_bytes()).unwrap();
        for (n, call) in case["calls"].as_array().unwrap().iter().enumerate() {
            out.push(Case {
                id: format!("{file}/{} call {n}", case["id"].as_str().unwrap()),
                net: net.clone(),
                input: hex_f32s(call["input_f32_hex"].as_str().unwrap()).unwrap(),
                shape: shape(&call["shape"]),
                loom: hex_f32s(call["expected_f32_hex"].as_str().unwrap()).unwrap(),
            });
        }
    }
    out
}

/// Checks `got`, the GPU's output for `case`, against the CPU twin within `abs + rel·|cpu|` and against Loom's own
/// output within the corpus tolerance.
pub fn check(case: &Case, got: &Tensor, abs: f32, rel: f32) {
    let want = cpu(&case.net, &case.input, &case.shape);
    assert_eq!(got.shape, want.shape, "{}", case.id);
    close(&case.id, &got.data, &want.data, abs, rel);
    close(
        &format!("{} vs Loom", case.id),
        &got.data,
        &case.loom,
        CORPUS_ABS,
        CORPUS_REL,
    );
}

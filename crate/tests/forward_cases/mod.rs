//! Shared by the `forward_*` tests: runs the cases of a `testdata/forward/*.json` file, whose expected outputs
//! Loom computed (see `testdata/forward/gen_forward_cases.py`), and compares them bit for bit.

use std::path::Path;

use loom_wasm::conformance::{hex_f32s, run, CheckKind, Outcome};
use loom_wasm::cpu::CpuModel;
use loom_wasm::formats::{entity, loom_json};
use loom_wasm::LoomError;
use serde_json::Value;

fn data(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/forward")
        .join(file)
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Every call of every case in `file`, each case on one model so that state (the MHA KV cache) carries over.
/// Returns how many calls ran.
pub fn check(file: &str) -> usize {
    let text = std::fs::read_to_string(data(file)).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut failures = Vec::new();
    let mut calls = 0;
    for case in doc["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let net = match case["entity_hex"].as_str() {
            Some(hex) => entity::read(&bytes(hex)).unwrap(),
            None => loom_json::read(case["network"].as_str().unwrap().as_bytes()).unwrap(),
        };
        let mut model = CpuModel::new(net);
        for (n, call) in case["calls"].as_array().unwrap().iter().enumerate() {
            calls += 1;
            let shape: Vec<usize> = call["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let input = hex_f32s(call["input_f32_hex"].as_str().unwrap()).unwrap();
            let want = hex_f32s(call["expected_f32_hex"].as_str().unwrap()).unwrap();
            match model.forward(&input, &shape) {
                Err(e) => failures.push(format!("{id} call {n}: {e}")),
                Ok(out) => {
                    let bad = out
                        .data
                        .iter()
                        .zip(&want)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    if bad > 0 || out.data.len() != want.len() {
                        failures.push(format!(
                            "{id} call {n}: {bad} of {} values differ (ours {} values {:?}…, Loom {:?}…)",
                            want.len(),
                            out.data.len(),
                            &out.data[..out.data.len().min(4)],
                            &want[..want.len().min(4)]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    calls
}

/// The network of case `id` in `file`, its single layer edited by `edit`.
pub fn model(file: &str, id: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> CpuModel {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(data(file)).unwrap()).unwrap();
    let case = doc["cases"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap();
    let mut net: Value = serde_json::from_str(case["network"].as_str().unwrap()).unwrap();
    edit(net["layers"][0].as_object_mut().unwrap());
    CpuModel::new(loom_json::read(net.to_string().as_bytes()).unwrap())
}

/// Runs `shape` (filled with `n` values) and expects a typed error whose message contains every one of `parts`.
pub fn refuses(model: &mut CpuModel, n: usize, shape: &[usize], invalid_input: bool, parts: &[&str]) {
    let err = model.forward(&vec![0.5; n], shape).unwrap_err();
    match (&err, invalid_input) {
        (LoomError::InvalidInput(m), true) | (LoomError::InvalidNetwork(m), false) => {
            for p in parts {
                assert!(m.contains(p), "{m:?} lacks {p:?}");
            }
        }
        _ => panic!("unexpected error {err:?}"),
    }
}

/// Runs `--check forward` on the shared corpus and asserts that every case whose id starts with one of `prefixes`
/// passes. Returns how many there were.
pub fn corpus(prefixes: &[&str]) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance");
    let report = run(&dir, CheckKind::Forward).unwrap();
    let mine: Vec<_> = report
        .cases
        .iter()
        .filter(|(id, _)| prefixes.iter().any(|p| id.starts_with(p)))
        .collect();
    let failures: Vec<_> = mine
        .iter()
        .filter_map(|(id, o)| match o {
            Outcome::Passed => None,
            other => Some(format!("{id}: {other:?}")),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    mine.len()
}

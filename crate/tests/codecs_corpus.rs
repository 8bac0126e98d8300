//! The dtype codecs against Loom's own output in the conformance corpus (`testdata/conformance`).
//!
//! `layer_Dense_<dtype>/spec.json` holds the float32 master weights (scale 1); `loom.json` holds what Loom wrote
//! after quantizing them at load: its native packed bytes and the auto-scale. `q4_0_pack_vectors` holds Loom's
//! Q4_0 payloads for known inputs. The browser suite (`tests-wasm/tests/browser.rs`) runs a subset of the same checks.

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use loom_wasm::dtype::q4_0::{self, Q4Blocks};
use loom_wasm::dtype::{auto_scale, pack_codes, quantize, unpack_codes, DType};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance")
}

fn read_json(relative: &str) -> Value {
    let path = corpus_dir().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first layer's `weights` field, base64-decoded.
fn first_layer_weights(doc: &Value) -> Vec<u8> {
    let b64 = doc["layers"][0]["weights"].as_str().expect("layers[0].weights");
    BASE64.decode(b64).expect("base64 weights")
}

fn f32_le(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0, "f32 bytes");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn from_hex(hex: &str) -> Vec<u8> {
    assert_eq!(hex.len() % 2, 0, "hex length");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Quantizes the Dense case's master weights and compares with Loom's bytes and scale; `Err` describes a mismatch.
fn check_dense_case(dt: DType) -> Result<(), String> {
    let case = format!("layer_Dense_{}", dt.name());
    let spec = read_json(&format!("cases/{case}/spec.json"));
    let loom = read_json(&format!("cases/{case}/loom.json"));
    let master = f32_le(&first_layer_weights(&spec));
    let expected_bytes = first_layer_weights(&loom);
    // Loom writes the scale as the shortest decimal of an f32, so f64 → f32 recovers it exactly.
    let expected_scale = loom["layers"][0]["scale"].as_f64().expect("layers[0].scale") as f32;

    let scale = auto_scale(dt, &master);
    let bytes = quantize(dt, &master, scale);
    let mut problems = Vec::new();
    if scale.to_bits() != expected_scale.to_bits() {
        problems.push(format!("scale: expected {expected_scale:e}, got {scale:e}"));
    }
    if bytes != expected_bytes {
        problems.push(format!(
            "bytes: expected {}, got {}",
            to_hex(&expected_bytes),
            to_hex(&bytes)
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{case}: {}", problems.join("; ")))
    }
}

#[test]
fn dense_quantize_matches_loom_for_all_dtypes() {
    let failures: Vec<String> = DType::ALL.iter().filter_map(|dt| check_dense_case(*dt).err()).collect();
    assert!(failures.is_empty(), "codec mismatches:\n{}", failures.join("\n"));
}

#[test]
fn sub_byte_codes_repack_to_loom_bytes() {
    // Decoding Loom's packed bytes to codes and packing them again must give the same bytes (spec §4).
    for dt in DType::ALL.iter().filter(|dt| dt.bits() < 8) {
        let loom = read_json(&format!("cases/layer_Dense_{}/loom.json", dt.name()));
        let bytes = first_layer_weights(&loom);
        assert_eq!(pack_codes(*dt, &unpack_codes(*dt, &bytes)), bytes, "{dt}");
    }
}

#[test]
fn q4_0_pack_matches_loom_vectors() {
    let manifest = read_json("manifest.json");
    let case = manifest["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["id"] == "q4_0_pack_vectors")
        .expect("q4_0_pack_vectors case");
    let vectors = case["vectors"].as_object().expect("vectors");
    assert!(vectors.len() >= 3, "expected at least 3 Q4_0 vectors");
    for (name, v) in vectors {
        let input = f32_le(&from_hex(v["input_f32_hex"].as_str().expect("input_f32_hex")));
        let file = corpus_dir().join(v["file"].as_str().expect("file"));
        let expected = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(
            expected.len() as u64,
            v["blob_bytes"].as_u64().unwrap(),
            "{name}: blob_bytes"
        );

        let packed = q4_0::pack(&input);
        assert!(packed == expected, "{name}: q4_0::pack differs from Loom's payload");

        let blocks = Q4Blocks::parse(&expected).expect("Loom's payload parses");
        assert_eq!(
            blocks.scales.len() as u64,
            v["n_scales"].as_u64().unwrap(),
            "{name}: n_scales"
        );
        assert_eq!(
            blocks.words.len() as u64,
            v["n_packed_words"].as_u64().unwrap(),
            "{name}: words"
        );
        assert_eq!(blocks.to_bytes(), expected, "{name}: parse → to_bytes");
    }
}

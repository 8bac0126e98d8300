//! safetensors against the conformance corpus (Loom's decode and Loom's writer bytes) and writer round trips.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use loom_wasm::formats::safetensors::{
    self, decode, inspect, write, write_loom, Dtype, SafetensorsFile, Semantics, TensorData,
};
use loom_wasm::LoomError;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance")
}

fn manifest_case(id: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(corpus().join("manifest.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("case {id} missing"))
        .clone()
}

fn all_dtypes_bytes() -> Vec<u8> {
    std::fs::read(corpus().join("cases/safetensors_read_all_dtypes/input.safetensors")).unwrap()
}

#[test]
fn header_of_all_dtypes_case() {
    let bytes = all_dtypes_bytes();
    let need = safetensors::header_size(&bytes[..8]).unwrap();
    assert_eq!(need, 8 + 792);
    // Only the header prefix is needed.
    let h = inspect(&bytes[..need as usize]).unwrap();
    assert_eq!(h, inspect(&bytes).unwrap());
    assert_eq!(h.file_len(), bytes.len() as u64);
    assert_eq!(h.metadata().get("format").map(String::as_str), Some("pt"));
    let names: Vec<&str> = h.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["f32", "f64", "f16", "bf16", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f4"]
    );
    let f32t = h.tensor("f32").unwrap();
    assert_eq!(f32t.dtype, Dtype::F32);
    assert_eq!(f32t.shape, [2, 3]);
    assert_eq!(f32t.elements, 6);
    assert_eq!(f32t.offsets, (0, 24));
    assert_eq!(f32t.absolute, (800, 824));
    assert_eq!(f32t.byte_len(), 24);
    let f4 = h.tensor("f4").unwrap();
    assert_eq!((f4.dtype, f4.elements, f4.byte_len()), (Dtype::F4, 12, 6));
    assert!(h.tensor("nope").is_none());
}

/// Outside truth: the manifest's `loom_decoded` is what Loom's `LoadSafetensorsFromBytes` returned.
#[test]
fn loom_decode_matches_manifest_exactly() {
    let case = manifest_case("safetensors_read_all_dtypes");
    let expected = case["loom_decoded"].as_object().unwrap();
    let file = SafetensorsFile::from_bytes(all_dtypes_bytes()).unwrap();
    assert_eq!(file.tensors().count(), expected.len());
    for t in file.tensors() {
        let want: Vec<f64> = expected[t.name()]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let got = t.to_f32(Semantics::Loom).unwrap();
        assert_eq!(got.len(), want.len(), "{}", t.name());
        for (g, w) in got.iter().zip(&want) {
            // `==` on purpose: the manifest's JSON cannot tell -0 from 0 (F4 code 8).
            assert!(f64::from(*g) == *w, "{}: {g} != {w}", t.name());
        }
    }
}

#[test]
fn standard_decode_differs_only_for_f4() {
    let file = SafetensorsFile::from_bytes(all_dtypes_bytes()).unwrap();
    for t in file.tensors() {
        let std_ = t.to_f32(Semantics::Standard).unwrap();
        let loom = t.to_f32(Semantics::Loom).unwrap();
        if t.name() == "f4" {
            // OCP E2M1, low nibble first: codes 0..=5 then 8..=13.
            assert_eq!(std_, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0]);
        } else {
            assert_eq!(std_, loom, "{}", t.name());
        }
    }
    // Raw bytes are zero-copy slices of the file.
    let bf16 = file.tensor("bf16").unwrap();
    assert_eq!(bf16.bytes(), &file.as_bytes()[884..896]);
    assert_eq!(
        decode(Dtype::BF16, bf16.bytes(), Semantics::Standard).unwrap(),
        [0.0, -1.5, 2.25, 3.0, -0.125, 100.0]
    );
    assert!(matches!(file.tensor("missing"), Err(LoomError::UnknownName { .. })));
}

#[test]
fn f16_subnormals_and_specials() {
    let bits: [u16; 5] = [0x0001, 0x8200, 0x7C00, 0xFC00, 0x7BFF];
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let v = decode(Dtype::F16, &bytes, Semantics::Loom).unwrap();
    assert_eq!(
        v,
        [
            2f32.powi(-24),
            -(2f32.powi(-15)),
            f32::INFINITY,
            f32::NEG_INFINITY,
            65504.0
        ]
    );
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn open_memory_maps_the_file() {
    let path = corpus().join("cases/safetensors_read_all_dtypes/input.safetensors");
    let file = SafetensorsFile::open(&path).unwrap();
    assert_eq!(file.header().tensors().len(), 13);
    assert_eq!(
        file.tensor("i16").unwrap().to_f32(Semantics::Standard).unwrap()[3],
        32767.0
    );
    let missing = SafetensorsFile::open(path.with_file_name("absent.safetensors"));
    assert!(matches!(missing, Err(LoomError::Io(m)) if m.contains("absent.safetensors")));
    // A borrowed slice works too (the wasm path).
    let bytes = all_dtypes_bytes();
    let borrowed = SafetensorsFile::from_bytes(&bytes[..]).unwrap();
    assert_eq!(borrowed.header(), file.header());
}

fn write_single_weights() -> Vec<f32> {
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(corpus().join("cases/safetensors_write_single/spec.json")).unwrap(),
    )
    .unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(spec["layers"][0]["weights"].as_str().unwrap())
        .unwrap();
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn loom_writer_reproduces_loom_bytes() {
    let weights = write_single_weights();
    assert_eq!(weights.len(), 15);
    let ours = write_loom(&[TensorData {
        name: "layer_0.weights",
        shape: &[15],
        values: &weights,
    }])
    .unwrap();
    let loom = std::fs::read(corpus().join("cases/safetensors_write_single/loom.safetensors")).unwrap();
    assert_eq!(ours, loom);
    let case = manifest_case("safetensors_write_single");
    let h = inspect(&ours).unwrap();
    assert_eq!(
        &ours[8..h.data_start() as usize],
        case["header"].as_str().unwrap().as_bytes()
    );
    assert_eq!(case["sizes"]["loom.safetensors"], ours.len());
}

#[test]
fn loom_writer_sorts_names_and_offsets() {
    let a = [1.0f32, 2.0];
    let b = [3.0f32; 6];
    let c = [-1.0f32];
    let items = [
        TensorData {
            name: "layer_2.weights",
            shape: &[2],
            values: &a,
        },
        TensorData {
            name: "layer_10.weights",
            shape: &[2, 3],
            values: &b,
        },
        TensorData {
            name: "layer_0.weights",
            shape: &[1],
            values: &c,
        },
    ];
    let bytes = write_loom(&items).unwrap();
    let header = inspect(&bytes).unwrap();
    assert_eq!(
        std::str::from_utf8(&bytes[8..header.data_start() as usize]).unwrap(),
        concat!(
            r#"{"layer_0.weights":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"#,
            r#""layer_10.weights":{"dtype":"F32","shape":[2,3],"data_offsets":[4,28]},"#,
            r#""layer_2.weights":{"dtype":"F32","shape":[2],"data_offsets":[28,36]}}"#
        )
    );
    // Same input in another order: same bytes.
    let mut rev = items;
    rev.reverse();
    assert_eq!(write_loom(&rev).unwrap(), bytes);
    let file = SafetensorsFile::from_bytes(bytes).unwrap();
    assert_eq!(
        file.tensor("layer_10.weights")
            .unwrap()
            .to_f32(Semantics::Loom)
            .unwrap(),
        b
    );
    // The reference crate reads it too.
    let st = ::safetensors::SafeTensors::deserialize(file.as_bytes()).unwrap();
    assert_eq!(st.len(), 3);
    assert_eq!(write_loom(&[]).unwrap(), b"\x02\0\0\0\0\0\0\0{}");
}

#[test]
fn writer_rejects_bad_items() {
    let v = [1.0f32, 2.0];
    let bad_shape = [TensorData {
        name: "w",
        shape: &[3],
        values: &v,
    }];
    assert!(matches!(write_loom(&bad_shape), Err(LoomError::InvalidInput(_))));
    let twice = [
        TensorData {
            name: "w",
            shape: &[2],
            values: &v,
        },
        TensorData {
            name: "w",
            shape: &[2],
            values: &v,
        },
    ];
    assert!(matches!(
        write(&twice, Dtype::F32, &BTreeMap::new()),
        Err(LoomError::InvalidInput(_))
    ));
    let meta_name = [TensorData {
        name: "__metadata__",
        shape: &[2],
        values: &v,
    }];
    assert!(write_loom(&meta_name).is_err());
    let ok = [TensorData {
        name: "w",
        shape: &[2],
        values: &v,
    }];
    assert!(matches!(
        write(&ok, Dtype::I8, &BTreeMap::new()),
        Err(LoomError::Unsupported(_))
    ));
}

/// Our general writer matches `safetensors::serialize` byte for byte (with at most one metadata key, where the
/// crate's `HashMap` order cannot vary).
#[test]
fn general_writer_matches_reference_crate() {
    let w = [0.1f32, -2.5, 3.75e-6, 65519.0, f32::NAN, -0.0];
    let b = [1.0f32, 2.0, 3.0];
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let mut meta = BTreeMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        let items = [
            TensorData {
                name: "w",
                shape: &[2, 3],
                values: &w,
            },
            TensorData {
                name: "b\"<x>",
                shape: &[3],
                values: &b,
            },
        ];
        let ours = write(&items, dtype, &meta).unwrap();

        let encode = |vals: &[f32]| -> Vec<u8> {
            match dtype {
                Dtype::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Dtype::F16 => vals
                    .iter()
                    .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                    .collect(),
                _ => vals
                    .iter()
                    .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                    .collect(),
            }
        };
        let (wb, bb) = (encode(&w), encode(&b));
        let views = vec![
            (
                "w".to_string(),
                ::safetensors::tensor::TensorView::new(dtype, vec![2, 3], &wb).unwrap(),
            ),
            (
                "b\"<x>".to_string(),
                ::safetensors::tensor::TensorView::new(dtype, vec![3], &bb).unwrap(),
            ),
        ];
        let reference = ::safetensors::serialize(views, Some(meta.clone().into_iter().collect())).unwrap();
        assert_eq!(ours, reference, "{dtype}");

        let file = SafetensorsFile::from_bytes(ours).unwrap();
        assert_eq!(file.header().metadata(), &meta);
        assert_eq!(file.tensor("w").unwrap().bytes(), &wb[..]);
        let back = file.tensor("w").unwrap().to_f32(Semantics::Standard).unwrap();
        for (x, y) in back.iter().zip(&w) {
            let want = match dtype {
                Dtype::F32 => *y,
                Dtype::F16 => half::f16::from_f32(*y).to_f32(),
                _ => half::bf16::from_f32(*y).to_f32(),
            };
            assert_eq!(x.to_bits(), want.to_bits());
        }
    }
    // Several metadata keys are written sorted, so the bytes never vary.
    let meta: BTreeMap<String, String> = (0..20).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let items = [TensorData {
        name: "b",
        shape: &[3],
        values: &b,
    }];
    let one = write(&items, Dtype::F32, &meta).unwrap();
    assert_eq!(one, write(&items, Dtype::F32, &meta.clone()).unwrap());
    let h = inspect(&one).unwrap();
    assert_eq!(h.metadata(), &meta);
    assert_eq!(h.data_start() % 8, 0);
}

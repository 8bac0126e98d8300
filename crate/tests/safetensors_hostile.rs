//! Hostile safetensors input: every failure is a typed error naming what is wrong, never a panic or a huge allocation.

use std::path::PathBuf;

use loom_wasm::formats::safetensors::{
    header_size, inspect, write_loom, SafetensorsFile, SafetensorsHeader, TensorData, MAX_HEADER_LEN,
};
use loom_wasm::{LoomError, Result};
use proptest::prelude::*;

/// A file with the given header text and `data_len` data bytes.
fn file(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend((0..data_len).map(|i| i as u8));
    out
}

fn both(bytes: &[u8]) -> Result<SafetensorsHeader> {
    let h = inspect(bytes);
    let f = SafetensorsFile::from_bytes(bytes);
    if let Ok(file) = &f {
        assert_eq!(Ok(file.header()), h.as_ref());
    }
    f.map(|f| f.header().clone())
}

fn st_message(r: Result<SafetensorsHeader>) -> String {
    match r {
        Err(LoomError::Safetensors(m)) => m,
        other => panic!("expected a Safetensors error, got {other:?}"),
    }
}

fn corpus_file() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/conformance/cases/safetensors_read_all_dtypes/input.safetensors");
    std::fs::read(p).unwrap()
}

#[test]
fn every_prefix_is_an_error_or_the_right_header() {
    let v = [1.0f32, 2.0, 3.0];
    let small = write_loom(&[
        TensorData {
            name: "a",
            shape: &[3],
            values: &v,
        },
        TensorData {
            name: "b",
            shape: &[1],
            values: &v[..1],
        },
    ])
    .unwrap();
    for full in [small, corpus_file()] {
        let header = inspect(&full).unwrap();
        let need = header.data_start() as usize;
        for len in 0..=full.len() {
            let prefix = &full[..len];
            match inspect(prefix) {
                Ok(h) => {
                    assert!(len >= need, "header parsed from {len} bytes");
                    assert_eq!(h, header);
                }
                Err(LoomError::Truncated { needed, available, .. }) => {
                    assert!(len < need);
                    assert_eq!(available, len as u64);
                    assert_eq!(needed, if len < 8 { 8 } else { need as u64 });
                }
                Err(e) => panic!("prefix of {len} bytes: unexpected {e:?}"),
            }
            let file = SafetensorsFile::from_bytes(prefix);
            if len == full.len() {
                assert!(file.is_ok());
            } else {
                assert!(matches!(file, Err(LoomError::Truncated { .. })), "{len}: {file:?}");
            }
        }
    }
}

#[test]
fn header_length_beyond_the_file_or_absurd() {
    let mut bytes = file(r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, 1);
    bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
    let len = bytes.len() as u64;
    assert!(matches!(
        inspect(&bytes),
        Err(LoomError::Truncated { needed: 1008, available, .. }) if available == len
    ));
    for n in [u64::MAX, MAX_HEADER_LEN + 1, 1 << 40] {
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        assert!(matches!(header_size(&bytes), Err(LoomError::TooLarge { len, .. }) if len == n));
        assert!(matches!(inspect(&bytes), Err(LoomError::TooLarge { .. })));
        assert!(matches!(
            SafetensorsFile::from_bytes(&bytes[..]),
            Err(LoomError::TooLarge { .. })
        ));
    }
    assert_eq!(header_size(&MAX_HEADER_LEN.to_le_bytes()).unwrap(), MAX_HEADER_LEN + 8);
    assert!(matches!(
        header_size(&[1, 2, 3]),
        Err(LoomError::Truncated {
            needed: 8,
            available: 3,
            ..
        })
    ));
    // header_len 0: empty JSON.
    assert!(matches!(inspect(&0u64.to_le_bytes()), Err(LoomError::Json { .. })));
}

#[test]
fn invalid_utf8_and_json() {
    let mut bytes = file(r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, 1);
    bytes[10] = 0xFF;
    assert!(matches!(inspect(&bytes), Err(LoomError::Json { message, .. }) if message.contains("UTF-8")));
    for bad in [
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#,
        "[]",
        "null",
        r#"{"a":1}"#,
        r#"{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1]}}"#,
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}"#,
        r#"{"__metadata__":{"k":1},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
        r#"{"__metadata__":{},"__metadata__":{}}"#,
        r#"{} x"#,
    ] {
        let r = both(&file(bad, 1));
        assert!(matches!(r, Err(LoomError::Json { .. })), "{bad}: {r:?}");
    }
    // Tensor errors from the JSON layer name the tensor.
    let r = inspect(&file(r#"{"w.0":{"dtype":"U8","shape":[1]}}"#, 1));
    assert!(matches!(r, Err(LoomError::Json { message, .. }) if message.contains("\"w.0\"")));
}

#[test]
fn unknown_dtype_names_the_tensor() {
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#,
        16,
    )));
    assert!(m.contains("\"w\"") && m.contains("F128"), "{m}");
    // Dtype strings are case-sensitive, as in the safetensors crate.
    st_message(both(&file(
        r#"{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}"#,
        4,
    )));
}

#[test]
fn shape_overflow() {
    for header in [
        r#"{"big":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,1]}}"#,
        r#"{"big":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,1]}}"#,
    ] {
        match both(&file(header, 1)) {
            Err(LoomError::ShapeOverflow { what, shape }) => {
                assert!(what.contains("\"big\""));
                assert!(!shape.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn offsets_out_of_range() {
    // A plausible header whose data lies past the end of the file: header-only inspection cannot know, the file can.
    let bytes = file(r#"{"w":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}}"#, 24);
    assert_eq!(inspect(&bytes).unwrap().file_len(), bytes.len() as u64 - 24 + 400);
    assert!(matches!(
        SafetensorsFile::from_bytes(&bytes[..]),
        Err(LoomError::Truncated { what, .. }) if what.contains("\"w\"")
    ));
    // Offsets near u64::MAX.
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"U8","shape":[3],"data_offsets":[18446744073709551612,18446744073709551615]}}"#,
        3,
    )));
    assert!(m.contains("\"w\""), "{m}");
    // Data must start at 0.
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#,
        4,
    )));
    assert!(m.contains("covered by no tensor"), "{m}");
    // Bytes after the last tensor.
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
        5,
    )));
    assert!(m.contains("3 bytes after"), "{m}");
}

#[test]
fn overlapping_and_gapped_offsets() {
    let over = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let m = st_message(both(&file(over, 12)));
    assert!(
        m.contains("\"b\"") && m.contains("overlap") && m.contains("\"a\""),
        "{m}"
    );
    let same = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    assert!(st_message(both(&file(same, 8))).contains("overlap"));
    let gap = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}"#;
    let m = st_message(both(&file(gap, 20)));
    assert!(m.contains("\"b\"") && m.contains("8..12"), "{m}");
    // Header order is free: tensors are listed by offset.
    let swapped = r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let h = both(&file(swapped, 16)).unwrap();
    assert_eq!(h.tensors()[0].name, "a");
    // Empty tensors may share an offset.
    let empty = r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}"#;
    let h = both(&file(empty, 1)).unwrap();
    assert_eq!(h.tensor("c").unwrap().elements, 1);
}

#[test]
fn length_disagreeing_with_dtype_and_shape() {
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
        8,
    )));
    assert!(m.contains("\"w\"") && m.contains("needs 12"), "{m}");
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"U8","shape":[3],"data_offsets":[3,0]}}"#,
        3,
    )));
    assert!(m.contains("before they start"), "{m}");
    // Three F4 elements are one and a half bytes.
    let m = st_message(both(&file(
        r#"{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
        2,
    )));
    assert!(m.contains("whole bytes"), "{m}");
}

#[test]
fn duplicate_names_and_lenient_extras() {
    let dup =
        r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    assert!(st_message(both(&file(dup, 2))).contains("twice"));
    // Unknown fields are ignored and padding is allowed, as in the safetensors crate.
    let extra = r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"note":[1,{"x":2}]}}      "#;
    assert_eq!(both(&file(extra, 1)).unwrap().tensors().len(), 1);
}

fn valid_small() -> Vec<u8> {
    let v = [0.5f32, -1.0, 2.0, 4.0];
    write_loom(&[
        TensorData {
            name: "x",
            shape: &[2, 2],
            values: &v,
        },
        TensorData {
            name: "y",
            shape: &[1],
            values: &v[..1],
        },
    ])
    .unwrap()
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = inspect(&bytes);
        let _ = SafetensorsFile::from_bytes(&bytes[..]);
    }

    #[test]
    fn random_headers_never_panic(json in proptest::collection::vec(any::<u8>(), 0..200), data in 0usize..64) {
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&json);
        bytes.extend(std::iter::repeat_n(0u8, data));
        let _ = both(&bytes);
    }

    #[test]
    fn mutated_valid_files_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = valid_small();
        for (at, b) in edits {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        if let Ok(file) = SafetensorsFile::from_bytes(&bytes[..]) {
            for t in file.tensors() {
                prop_assert_eq!(t.bytes().len() as u64, t.info().byte_len());
                let _ = t.to_f32(loom_wasm::formats::safetensors::Semantics::Standard);
            }
        }
    }

    #[test]
    fn structured_headers_never_panic(
        dtype in prop::sample::select(vec!["F32", "F4", "F6_E2M3", "BOOL", "U64", "X"]),
        shape in proptest::collection::vec(prop_oneof![0u64..5, any::<u64>()], 0..4),
        start in prop_oneof![0u64..16, any::<u64>()],
        end in prop_oneof![0u64..16, any::<u64>()],
        data in 0usize..32,
    ) {
        let header = format!(
            r#"{{"t":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{start},{end}]}}}}"#
        );
        if let Ok(h) = both(&file(&header, data)) {
            let t = &h.tensors()[0];
            prop_assert_eq!(t.offsets, (0, data as u64));
        }
    }
}

//! `convert_with`: a dtype per layer path beside the global one, against Loom's own files.

use std::collections::BTreeMap;
use std::path::Path;

use loom_wasm::convert::{self, OutputFormat};
use loom_wasm::formats::entity;
use loom_wasm::{DType, LoomError};

fn read(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/conformance/cases")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn a_layer_dtype_gives_the_file_loom_writes_for_that_dtype() {
    // layer_Dense_<dtype> cases share one float32 master; Loom morphed it to each dtype and saved.
    let float32 = read("layer_Dense_float32/loom.entity");
    for dt in [
        DType::Int8,
        DType::Int4,
        DType::Uint8,
        DType::Float16,
        DType::Fp8E4M3,
        DType::Ternary,
    ] {
        let mut net = entity::read(&float32).unwrap();
        let per_layer = BTreeMap::from([("layers.0".to_string(), dt)]);
        let (bytes, report) = convert::convert_with(&mut net, OutputFormat::Entity, None, &per_layer).unwrap();
        assert_eq!(bytes, read(&format!("layer_Dense_{}/loom.entity", dt.name())), "{dt}");
        assert_eq!(report.layers.len(), 1, "{dt}");
    }
}

#[test]
fn layer_dtypes_override_the_global_one_and_leave_other_layers_alone() {
    let grid = read("grid_2x1x2x2/loom.entity");
    let original = entity::read(&grid).unwrap();
    let per_layer = BTreeMap::from([("layers.2".to_string(), DType::Int8)]);
    let mut net = original.clone();
    let (bytes, report) = convert::convert_with(&mut net, OutputFormat::Entity, None, &per_layer).unwrap();
    let out = entity::read(&bytes).unwrap();
    for (i, (a, b)) in original.layers.iter().zip(&out.layers).enumerate() {
        let expected = if i == 2 { DType::Int8 } else { a.dtype };
        assert_eq!(b.dtype, expected, "layers.{i}");
        if i != 2 {
            assert_eq!(
                a.weights.as_ref().and_then(|w| w.version(a.dtype).map(<[u8]>::to_vec)),
                b.weights.as_ref().and_then(|w| w.version(b.dtype).map(<[u8]>::to_vec)),
                "layers.{i}"
            );
        }
    }
    assert_eq!(
        report.layers.iter().map(|l| l.path.as_str()).collect::<Vec<_>>(),
        ["layers.2"]
    );

    // Global int4 with layers.0 kept as int8 (its current dtype): the other Dense and SwiGLU layers become int4
    // (norms are written as float32 in .entity whatever their dtype, as Loom does).
    let mut net = original.clone();
    let keep = BTreeMap::from([("layers.0".to_string(), DType::Int8)]);
    let (bytes, _) = convert::convert_with(&mut net, OutputFormat::Entity, Some(DType::Int4), &keep).unwrap();
    let out = entity::read(&bytes).unwrap();
    assert_eq!(out.layers[0].dtype, DType::Int8);
    let projections = out.layers[1..]
        .iter()
        .filter(|l| matches!(l.layer_type.name(), "Dense" | "SwiGLU"));
    assert_eq!(projections.clone().count(), 4);
    assert!(projections.clone().all(|l| l.dtype == DType::Int4));

    // Paths without weights, and per-layer dtypes for safetensors output, are refused.
    let bad = BTreeMap::from([("layers.9".to_string(), DType::Int8)]);
    let e = convert::convert_with(&mut original.clone(), OutputFormat::Entity, None, &bad).unwrap_err();
    assert!(matches!(e, LoomError::InvalidInput(_)), "{e}");
    let st = OutputFormat::Safetensors(loom_wasm::formats::safetensors::Dtype::F32);
    let e = convert::convert_with(&mut original.clone(), st, None, &per_layer).unwrap_err();
    assert!(matches!(e, LoomError::InvalidInput(_)), "{e}");
}

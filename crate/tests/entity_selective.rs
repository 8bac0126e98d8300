//! Loom's selective `.entity` load and `LayerPersistenceFromEntity`, on Loom-written files.

use std::path::Path;

use loom_wasm::formats::entity;

fn corpus_file(rel: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/conformance/cases")
            .join(rel),
    )
    .unwrap()
}

#[test]
fn selective_load_applies_only_the_requested_layers() {
    let bytes = corpus_file("grid_2x1x2x2/loom.entity");
    let full = entity::read(&bytes).unwrap();
    let only = entity::read_layers(&bytes, &[2, 4]).unwrap();
    for (i, (a, b)) in full.layers.iter().zip(&only.layers).enumerate() {
        // Topology is always complete.
        assert_eq!(
            (a.layer_type, a.dtype, a.input_height),
            (b.layer_type, b.dtype, b.input_height)
        );
        if i == 2 || i == 4 {
            assert_eq!(a.weights, b.weights, "layer {i}");
            assert!(b.weights.is_some());
        } else {
            assert!(b.weights.is_none(), "layer {i} was not requested");
        }
    }
}

#[test]
fn layer_blob_returns_the_raw_bytes_scale_and_native_flag() {
    let bytes = corpus_file("grid_2x1x2x2/loom.entity");
    let header = entity::read_header(&bytes).unwrap();
    for (i, b) in header.blobs.iter().enumerate() {
        let (data, scale, native) = entity::layer_blob(&bytes, i).unwrap().unwrap();
        let start = (header.payload_offset() + b.offset) as usize;
        assert_eq!(b.path, format!("layers.{i}"));
        assert_eq!(data, &bytes[start..start + b.length as usize]);
        assert_eq!((scale, native), (b.scale, b.native));
    }
    assert!(entity::layer_blob(&bytes, 99).unwrap().is_none());
}

//! CNN1/2/3 and ConvTransposed1D/2D/3D forward against Loom's own outputs (testdata/forward/conv.json): stride,
//! padding, output_padding, kernel 0, stride 0, flat inputs, every activation Loom rounds like we do, quantized
//! dtypes (ConvTransposed: zeros), float64 weights float32 cannot hold.

mod forward_cases;

use forward_cases::{check, corpus, model, refuses};
use serde_json::json;

#[test]
fn every_shared_corpus_case_matches_loom() {
    assert_eq!(corpus(&["layer_CNN", "layer_ConvTransposed"]), 126);
}

#[test]
fn matches_loom_bit_for_bit() {
    assert_eq!(check("conv.json"), 38);
}

#[test]
fn short_or_scalar_inputs_are_typed_errors() {
    let mut m = model("conv.json", "cnn2_stride2_pad1", |_| {});
    refuses(&mut m, 1, &[], true, &["layers.0", "scalar"]);
    refuses(&mut m, 59, &[1, 59], true, &["layers.0", "[batch, 2, 5, 6]", "got 59"]);
    let mut m = model("conv.json", "convt3_stride2", |_| {});
    refuses(
        &mut m,
        7,
        &[1, 1, 7],
        true,
        &["layers.0", "[batch, 1, 2, 2, 2]", "8 values"],
    );
    refuses(
        &mut m,
        12,
        &[2, 6],
        true,
        &["layers.0", "[batch, 1, 2, 2, 2]", "16 values"],
    );
}

#[test]
fn impossible_output_sizes_are_refused_not_aborted() {
    let mut m = model("conv.json", "cnn1_kernel0", |l| {
        l.insert("output_height".into(), json!(1u64 << 60));
    });
    refuses(&mut m, 8, &[1, 2, 4], true, &["layers.0"]);
}

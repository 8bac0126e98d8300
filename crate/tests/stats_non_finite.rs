//! Tensor statistics of a tensor holding NaN, ±Inf and an outlier: the values are built here, so the expected
//! counts and moments are known without our code (numpy's `histogram` agreement is in gguf_stats.rs).

use std::collections::HashMap;

use bytes::Bytes;
use loom_wasm::model::LoadedModel;
use safetensors::tensor::{Dtype, TensorView};

#[test]
fn nan_and_infinities_are_counted_apart_and_outliers_get_a_clipped_histogram() {
    // 10 000 values 0, 1e-4, …, 0.9999; one outlier 1e30; 2 NaN, 3 +Inf, 1 −Inf.
    let mut values: Vec<f32> = (0..10_000).map(|i| i as f32 * 1e-4).collect();
    values.extend([
        1e30,
        f32::NAN,
        f32::NAN,
        f32::INFINITY,
        f32::INFINITY,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, vec![values.len()], &data).unwrap();
    let file = safetensors::serialize(HashMap::from([("w", view)]), None).unwrap();
    let model = LoadedModel::from_bytes(Bytes::from(file), "w.safetensors").unwrap();
    let s = model.tensor_stats("w", 48).unwrap();
    assert_eq!(
        (s.count, s.nan, s.pos_inf, s.neg_inf, s.non_finite),
        (10_007, 2, 3, 1, 6)
    );
    assert_eq!((s.min, s.max), (0.0, f64::from(1e30f32)));
    assert_eq!(s.histogram.counts.iter().sum::<u64>(), 10_001);
    // The full-range histogram puts every ordinary value into its first bin; the clipped one spreads them.
    assert_eq!(s.histogram.counts[0], 10_000);
    let c = s
        .clipped
        .expect("an outlier 1e30 beside values below 1 needs a clipped histogram");
    assert_eq!(c.percentiles, [0.1, 99.9]);
    assert_eq!(c.above, 1);
    assert_eq!(c.below + c.above + c.histogram.counts.iter().sum::<u64>(), 10_001);
    assert!(c.histogram.max < 1.01 && c.histogram.min >= 0.0);
    assert!(c.histogram.counts.iter().filter(|&&n| n > 0).count() > 40);
}

#[test]
fn an_ordinary_tensor_has_no_clipped_histogram() {
    let values: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, vec![values.len()], &data).unwrap();
    let file = safetensors::serialize(HashMap::from([("w", view)]), None).unwrap();
    let model = LoadedModel::from_bytes(Bytes::from(file), "w.safetensors").unwrap();
    let s = model.tensor_stats("w", 16).unwrap();
    assert_eq!((s.nan, s.pos_inf, s.neg_inf), (0, 0, 0));
    assert!(s.clipped.is_none());
}

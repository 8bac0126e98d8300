//! The Softmax layer and its variants (spec §7): float32 throughout, over the whole tensor or per grid row.

use super::{gomath, Tensor};
use crate::error::{LoomError, Result};
use crate::network::{Layer, SoftmaxType};

/// `e = f32(exp(x − max))`, an f32 sum, `p = e / sum`.
pub(crate) fn softmax_f32(x: &[f32]) -> Vec<f32> {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, v| if *v > m { *v } else { m });
    let e: Vec<f32> = x.iter().map(|v| gomath::exp(f64::from(v - max)) as f32).collect();
    let sum = e.iter().fold(0f32, |a, v| a + v);
    e.iter().map(|v| v / sum).collect()
}

/// Sparsemax: the Euclidean projection onto the simplex, in f32.
fn sparsemax(x: &[f32]) -> Vec<f32> {
    let mut z = x.to_vec();
    z.sort_by(|a, b| b.total_cmp(a));
    let (mut cum, mut k, mut cum_k) = (0f32, 0usize, 0f32);
    for (j, v) in z.iter().enumerate() {
        cum += v;
        if 1.0 + (j + 1) as f32 * v > cum {
            k = j + 1;
            cum_k = cum;
        }
    }
    let tau = (cum_k - 1.0) / k.max(1) as f32;
    x.iter().map(|v| (v - tau).max(0.0)).collect()
}

fn variant(layer: &Layer, x: &[f32]) -> Vec<f32> {
    match layer.softmax_type {
        SoftmaxType::Temperature => {
            let t = if layer.temperature != 0.0 {
                layer.temperature as f32
            } else {
                1.0
            };
            softmax_f32(&x.iter().map(|v| v / t).collect::<Vec<_>>())
        }
        SoftmaxType::Sparse => sparsemax(x),
        SoftmaxType::Entmax => {
            let alpha = if layer.entmax_alpha != 0.0 {
                layer.entmax_alpha as f32
            } else {
                1.5
            };
            let w = alpha - 1.0;
            let (s, sp) = (softmax_f32(x), sparsemax(x));
            let blend: Vec<f32> = s.iter().zip(&sp).map(|(a, b)| (1.0 - w) * a + w * b).collect();
            let sum = blend.iter().fold(0f32, |a, v| a + v);
            blend.iter().map(|v| v / sum).collect()
        }
        _ => softmax_f32(x),
    }
}

/// The Softmax layer; its activation is ignored, as in Loom.
pub(crate) fn softmax(layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
    if layer.softmax_type == SoftmaxType::Gumbel {
        return Err(LoomError::Unsupported(format!(
            "{path}: Gumbel softmax adds unseeded noise in Loom, so no output can match it"
        )));
    }
    let per_row = matches!(layer.softmax_type, SoftmaxType::Grid | SoftmaxType::Hierarchical);
    let out = if per_row && layer.softmax_cols > 0 {
        let cols = layer.softmax_cols as usize;
        x.data.chunks(cols).flat_map(|row| variant(layer, row)).collect()
    } else {
        variant(layer, &x.data)
    };
    Tensor::new(out, x.shape.clone())
}

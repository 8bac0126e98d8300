//! Embedding lookup and KMeans soft assignment (spec §7).

use super::softmax::softmax_f32;
use super::{activate, dim, weights, State, Tensor};
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::network::Layer;

/// Output row `W[int(id)]` per input value (ids truncate toward zero; out-of-range ids give a zero row).
pub(crate) fn embedding(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let vocab = dim(layer.vocab_size, "vocab_size", path)?;
    let d = dim(layer.embedding_dim, "embedding_dim", path)?;
    let w = weights(layer, path, state)?;
    let mut out = Vec::with_capacity(x.data.len() * d);
    for id in &x.data {
        // Go's int(x) truncates; NaN and huge values land out of range.
        let t = id.trunc();
        match (t >= 0.0 && t < vocab as f32).then_some(t as usize) {
            Some(row) => out.extend(w[row * d..(row + 1) * d].iter().map(|v| activate(layer.activation, *v))),
            None => out.extend(std::iter::repeat_n(activate(layer.activation, 0.0), d)),
        }
    }
    let mut shape = x.shape.clone();
    shape.push(d);
    Tensor::new(out, shape)
}

/// A KMeans layer's settings, checked against `inputs` values and `centers` centre values (shared with the GPU host,
/// which validates exactly as this forward does).
pub(crate) struct KMeansConfig {
    pub clusters: usize,
    /// `2T²` (T = `kmeans_temperature`, 1 when unset), rounded to f32 from f64 as Loom does.
    pub denom: f32,
    /// Loom leaves the logits at 0 for the integer dtypes (a uniform output).
    pub integer: bool,
    /// `output_mode` "features": the probability-weighted centre instead of the probabilities.
    pub features: bool,
}

impl KMeansConfig {
    pub fn new(layer: &Layer, path: &str, inputs: usize, centers: usize) -> Result<KMeansConfig> {
        // A count past usize (wasm32's 32 bits included) is refused as one that overflows the product: the same
        // error on every platform.
        let k = usize::try_from(layer.num_clusters)
            .ok()
            .filter(|&k| k > 0 && k.checked_mul(inputs).is_some_and(|n| n <= centers))
            .ok_or_else(|| {
                LoomError::InvalidInput(format!(
                    "{path}: KMeans has {centers} centre values for {} clusters of {inputs} inputs",
                    layer.num_clusters
                ))
            })?;
        let t = if layer.kmeans_temperature != 0.0 {
            layer.kmeans_temperature
        } else {
            1.0
        };
        Ok(KMeansConfig {
            clusters: k,
            denom: (2.0 * t * t) as f32,
            integer: matches!(
                layer.dtype,
                DType::Int8
                    | DType::Uint8
                    | DType::Int16
                    | DType::Uint16
                    | DType::Int32
                    | DType::Uint32
                    | DType::Int64
                    | DType::Uint64
            ),
            features: layer.output_mode == "features",
        })
    }

    /// Output values for `inputs` input values.
    pub fn outputs(&self, inputs: usize) -> usize {
        if self.features {
            inputs
        } else {
            self.clusters
        }
    }
}

/// Logits `-Σ(x−c)² / (2T²)` accumulated in f32, an f32 softmax, then probabilities or (`features`) the
/// probability-weighted centre. The whole input is one point.
pub(crate) fn kmeans(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let d = x.data.len();
    let centers = weights(layer, path, state)?;
    let cfg = KMeansConfig::new(layer, path, d, centers.len())?;
    let logits: Vec<f32> = (0..cfg.clusters)
        .map(|c| {
            if cfg.integer {
                return 0.0;
            }
            let dist = x
                .data
                .iter()
                .zip(&centers[c * d..(c + 1) * d])
                .fold(0f32, |acc, (a, b)| {
                    let diff = a - b;
                    acc + diff * diff
                });
            -dist / cfg.denom
        })
        .collect();
    let probs = softmax_f32(&logits);
    let out: Vec<f32> = if cfg.features {
        (0..d)
            .map(|f| (0..cfg.clusters).fold(0f32, |acc, c| acc + probs[c] * centers[c * d + f]))
            .collect()
    } else {
        probs
    };
    let n = out.len();
    Tensor::new(
        out.into_iter().map(|v| activate(layer.activation, v)).collect(),
        vec![1, n],
    )
}

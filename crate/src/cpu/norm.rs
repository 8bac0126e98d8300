//! RMSNorm and LayerNorm over rows (spec §7): statistics in f64, one rounding per output, no activation.

use super::{dim, weights, State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

/// Loom's fixed epsilons (`rms_norm_eps` is not persisted).
const RMS_EPS: f64 = 1e-6;
const LAYER_NORM_EPS: f64 = 1e-5;

/// Row length: `output_height`, else the input split into `shape[0]` rows.
fn row_len(layer: &Layer, path: &str, x: &Tensor, params: usize) -> Result<usize> {
    let rows = x.batch().max(1);
    let n = if layer.output_height > 0 {
        dim(layer.output_height, "output_height", path)?
    } else {
        x.data.len() / rows
    };
    if n == 0 || !x.data.len().is_multiple_of(n) || n > params {
        return Err(LoomError::InvalidInput(format!(
            "{path}: {} cannot normalise {} values in rows of {n} with {params} parameters",
            layer.layer_type,
            x.data.len()
        )));
    }
    Ok(n)
}

pub(crate) fn rms_norm(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let gamma = weights(layer, path, state)?;
    let n = row_len(layer, path, x, gamma.len())?;
    let mut out = Vec::with_capacity(x.data.len());
    for row in x.data.chunks(n) {
        let ss: f64 = row.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
        let rms = (ss / n as f64 + RMS_EPS).sqrt();
        // Loom accumulates into a zeroed output, so a −0 product (zero γ) comes out as +0.
        out.extend(
            row.iter()
                .zip(gamma.iter())
                .map(|(v, g)| (0.0 + f64::from(*v) / rms * f64::from(*g)) as f32),
        );
    }
    Tensor::new(out, x.shape.clone())
}

pub(crate) fn layer_norm(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let w = weights(layer, path, state)?;
    let (gamma, beta) = w.split_at(w.len() / 2);
    let n = row_len(layer, path, x, gamma.len())?;
    let mut out = Vec::with_capacity(x.data.len());
    for row in x.data.chunks(n) {
        let sum: f64 = row.iter().map(|v| f64::from(*v)).sum();
        let sq: f64 = row.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        let inv = (var + LAYER_NORM_EPS).sqrt();
        out.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(v, (g, b))| ((f64::from(*v) - mean) / inv * f64::from(*g) + f64::from(*b)) as f32),
        );
    }
    Tensor::new(out, x.shape.clone())
}

//! CPU forward pass, bit-exact with Loom's `ForwardPolymorphic[float32]` (spec §7).
//!
//! Every layer reads its weights dequantized (`GetActive`) and computes in float32 with Loom's rounding points,
//! which the per-family files spell out. Summation orders are fixed by Loom and must not be reordered.

mod activation;
mod attention;
mod conv;
mod dense;
mod recurrent;

use std::collections::HashMap;
use std::sync::Arc;

pub use activation::activate;

use crate::error::{LoomError, Result};
use crate::network::{Layer, LayerType, Network};

/// A float32 tensor with its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
}

impl Tensor {
    /// Checks that `shape` describes `data`.
    pub fn new(data: Vec<f32>, shape: Vec<usize>) -> Result<Tensor> {
        let n = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
        if n != Some(data.len()) {
            return Err(LoomError::InvalidInput(format!(
                "shape {shape:?} does not describe {} values",
                data.len()
            )));
        }
        Ok(Tensor { data, shape })
    }

    /// Batch size: the first dimension (Loom's convention).
    pub fn batch(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// Per-layer state carried between calls (MHA KV caches), keyed by blob path.
#[derive(Default)]
pub(crate) struct State {
    weights: HashMap<String, Arc<Vec<f32>>>,
    /// ConvTransposed weights as f64 (a float64 layer's own values), by layer path.
    weights64: HashMap<String, Arc<Vec<f64>>>,
    /// MHA KV caches and transposed projections, by layer path.
    mha: HashMap<String, attention::MhaState>,
}

/// A network ready for CPU inference. It owns the network and the state Loom keeps between forward calls.
pub struct CpuModel {
    net: Network,
    state: State,
}

impl CpuModel {
    pub fn new(net: Network) -> CpuModel {
        CpuModel {
            net,
            state: State::default(),
        }
    }

    pub fn network(&self) -> &Network {
        &self.net
    }

    /// Runs the whole grid in `(z, y, x, l)` order on `input` of shape `shape`, skipping disabled layers.
    pub fn forward(&mut self, input: &[f32], shape: &[usize]) -> Result<Tensor> {
        let mut x = Tensor::new(input.to_vec(), shape.to_vec())?;
        for (i, layer) in self.net.layers.iter().enumerate() {
            if layer.is_disabled {
                continue;
            }
            x = forward_layer(layer, &format!("layers.{i}"), x, None, &mut self.state)?;
        }
        Ok(x)
    }
}

/// The dequantized weights of a layer, computed once per model.
pub(crate) fn weights(layer: &Layer, path: &str, state: &mut State) -> Result<Arc<Vec<f32>>> {
    if let Some(w) = state.weights.get(path) {
        return Ok(w.clone());
    }
    let ws = layer.weights.as_ref().ok_or_else(|| {
        LoomError::InvalidNetwork(format!(
            "{path}: the {} layer has no weights (Loom would panic here)",
            layer.layer_type
        ))
    })?;
    let w = Arc::new(ws.active(layer.dtype));
    state.weights.insert(path.to_string(), w.clone());
    Ok(w)
}

/// Checked `usize` conversion of a layer dimension.
pub(crate) fn dim(v: i64, what: &str, path: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| LoomError::InvalidNetwork(format!("{path}: {what} is {v}")))
}

/// Forward of one layer. `skip` is what a Residual inside a Sequential adds (the previous sub-layer's input).
pub(crate) fn forward_layer(
    layer: &Layer,
    path: &str,
    x: Tensor,
    skip: Option<&Tensor>,
    state: &mut State,
) -> Result<Tensor> {
    match layer.layer_type {
        LayerType::Dense => dense::dense(layer, path, &x, state),
        LayerType::MultiHeadAttention => attention::mha(layer, path, &x, state),
        LayerType::RNN => recurrent::rnn(layer, path, &x, state),
        LayerType::LSTM => recurrent::lstm(layer, path, &x, state),
        LayerType::CNN1 | LayerType::CNN2 | LayerType::CNN3 => conv::cnn(layer, path, &x, state),
        LayerType::ConvTransposed1D | LayerType::ConvTransposed2D | LayerType::ConvTransposed3D => {
            conv::conv_transposed(layer, path, &x, state)
        }
        LayerType::Residual => Ok(residual(x, skip)),
        LayerType::Sequential => {
            let mut prev_input: Option<Tensor> = None;
            let mut x = x;
            for (j, sub) in layer.sequential_layers.iter().enumerate() {
                let input = x.clone();
                x = forward_layer(
                    sub,
                    &format!("{path}.sequential_layers.{j}"),
                    x,
                    prev_input.as_ref(),
                    state,
                )?;
                prev_input = Some(input);
            }
            Ok(x)
        }
        other => Err(LoomError::Unsupported(format!("CPU forward of {other} layers"))),
    }
}

/// Residual: `x + skip` in float32 when a skip of equal length exists, else the identity.
fn residual(mut x: Tensor, skip: Option<&Tensor>) -> Tensor {
    if let Some(s) = skip.filter(|s| s.data.len() == x.data.len()) {
        x.data.iter_mut().zip(&s.data).for_each(|(a, b)| *a += b);
    }
    x
}

//! CPU forward pass, bit-exact with Loom's `ForwardPolymorphic[float32]` (spec §7).
//!
//! Every layer reads its weights dequantized (`GetActive`) and computes in float32 with Loom's rounding points,
//! which the per-family files spell out. Summation orders are fixed by Loom and must not be reordered.

mod activation;
mod attention;
mod conv;
mod dense;
mod embedding;
mod gomath;
mod norm;
pub mod ops;
mod recurrent;
mod softmax;

use std::collections::HashMap;
use std::sync::Arc;

pub use activation::activate;
pub(crate) use attention::mha_layout;
pub(crate) use conv::ConvGeometry;
pub(crate) use dense::tile;
pub(crate) use embedding::KMeansConfig;
pub(crate) use recurrent::RecurrentDims;

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
        self.net.check_input_shape(shape)?;
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

/// `Π dims`, refusing overflow.
pub(crate) fn product(dims: &[usize], what: &str, path: &str) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |a, d| a.checked_mul(*d))
        .ok_or_else(|| LoomError::InvalidInput(format!("{path}: {what} {dims:?} overflows")))
}

/// A zeroed buffer of `len` floats; an impossible size is an error, not an abort.
pub(crate) fn zeros(len: usize, path: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| LoomError::InvalidInput(format!("{path}: cannot allocate {len} output values")))?;
    v.resize(len, 0.0);
    Ok(v)
}

/// The batch size, `shape[0]`: Loom indexes it without a check, so a scalar input is refused.
pub(crate) fn batch(shape: &[usize], path: &str, layer: LayerType, expected: &str) -> Result<usize> {
    shape
        .first()
        .copied()
        .ok_or_else(|| LoomError::InvalidInput(format!("{path}: {layer} needs a {expected} input, got a scalar")))
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
        LayerType::SwiGLU => dense::swiglu(layer, path, &x, state),
        LayerType::RMSNorm => norm::rms_norm(layer, path, &x, state),
        LayerType::LayerNorm => norm::layer_norm(layer, path, &x, state),
        LayerType::Embedding => embedding::embedding(layer, path, &x, state),
        LayerType::KMeans => embedding::kmeans(layer, path, &x, state),
        LayerType::Softmax => softmax::softmax(layer, path, &x),
        LayerType::Residual => Ok(residual(x, skip)),
        LayerType::Parallel => parallel(layer, path, x, state),
        LayerType::Metacognition => match layer.meta_observed_layer.as_deref() {
            // Without rules Metacognition is its observed layer; Loom's rules act on training, not on forward.
            Some(observed) => forward_layer(observed, &format!("{path}.meta_observed_layer"), x, skip, state),
            None => Ok(x),
        },
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
    }
}

/// Parallel: every branch sees the same input; `concat` (or empty) joins the branches per batch row, `add`
/// sums them in f32, `avg` sums then multiplies by `1/n`, `filter` gives zeros (see below).
fn parallel(layer: &Layer, path: &str, x: Tensor, state: &mut State) -> Result<Tensor> {
    let mut outs = Vec::with_capacity(layer.parallel_branches.len());
    for (j, b) in layer.parallel_branches.iter().enumerate() {
        outs.push(forward_layer(
            b,
            &format!("{path}.parallel_branches.{j}"),
            x.clone(),
            None,
            state,
        )?);
    }
    combine(layer, path, x, outs)
}

/// Joins a Parallel layer's branch outputs as its `combine_mode` says (shared by the CPU and GPU paths: exact
/// f32 host arithmetic either way). `x` is the layer input, returned as is when there are no branches.
pub(crate) fn combine(layer: &Layer, path: &str, x: Tensor, outs: Vec<Tensor>) -> Result<Tensor> {
    let batch = x.batch().max(1);
    let Some(first) = outs.first() else {
        return Ok(x);
    };
    match layer.combine_mode.as_str() {
        // grid_scatter joins the branches like concat when there is no grid to scatter into.
        "" | "concat" | "grid_scatter" => {
            if outs.iter().any(|o| !o.data.len().is_multiple_of(batch)) {
                return Err(LoomError::InvalidInput(format!(
                    "{path}: branch outputs do not split into {batch} rows"
                )));
            }
            let mut data = Vec::with_capacity(outs.iter().map(|o| o.data.len()).sum());
            for b in 0..batch {
                for o in &outs {
                    let n = o.data.len() / batch;
                    data.extend_from_slice(&o.data[b * n..(b + 1) * n]);
                }
            }
            let n = data.len() / batch;
            Tensor::new(data, vec![batch, n])
        }
        mode @ ("add" | "avg") => {
            if outs.iter().any(|o| o.data.len() != first.data.len()) {
                return Err(LoomError::InvalidInput(format!(
                    "{path}: branch outputs differ in size, cannot {mode}"
                )));
            }
            let mut sum = first.clone();
            for o in &outs[1..] {
                sum.data.iter_mut().zip(&o.data).for_each(|(a, b)| *a += b);
            }
            if mode == "avg" {
                // 1/n is a float64 constant in Loom: the product is rounded once, from f64.
                let inv = 1.0 / outs.len() as f64;
                sum.data.iter_mut().for_each(|v| *v = (f64::from(*v) * inv) as f32);
            }
            Ok(sum)
        }
        // Loom does not persist the filter gate, so a loaded filter layer outputs zeros shaped like its first
        // branch; we reproduce that rather than invent a gate.
        "filter" => Ok(Tensor {
            data: vec![0.0; first.data.len()],
            shape: first.shape.clone(),
        }),
        other => Err(LoomError::InvalidNetwork(format!(
            "{path}: unknown combine mode {other:?}"
        ))),
    }
}

/// Residual: `x + skip` in float32 when a skip of equal length exists, else the identity.
pub(crate) fn residual(mut x: Tensor, skip: Option<&Tensor>) -> Tensor {
    if let Some(s) = skip.filter(|s| s.data.len() == x.data.len()) {
        x.data.iter_mut().zip(&s.data).for_each(|(a, b)| *a += b);
    }
    x
}

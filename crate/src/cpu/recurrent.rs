//! RNN and LSTM (spec §7): input `[B, T, in]` with T = the layer's `seq_length`, output `[B, T, hidden]`. Batch
//! rows are independent and each starts from zero state. The layer's activation is never applied.

use super::dense::tile;
use super::{batch, dim, gomath, product, weights, zeros, State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

/// Sizes shared by both layers, checked against the input and the weights (shared with the GPU host, which
/// validates exactly as this forward does).
pub(crate) struct RecurrentDims {
    pub batch: usize,
    pub steps: usize,
    pub input: usize,
    pub hidden: usize,
}

impl RecurrentDims {
    /// An input of `shape` holding `len` values; `gates` weight blocks of `[Wih | Whh | b]` follow each other in the
    /// store.
    pub fn new(
        layer: &Layer,
        path: &str,
        shape: &[usize],
        len: usize,
        weight_count: usize,
        gates: usize,
    ) -> Result<RecurrentDims> {
        let input = dim(layer.input_height, "input_height", path)?;
        let hidden = dim(layer.output_height, "output_height", path)?;
        let steps = dim(layer.seq_length, "seq_length", path)?;
        let t = layer.layer_type;
        let expected = format!("[batch, {steps}, {input}]");
        let batch = batch(shape, path, t, &expected)?;
        let needed = product(&[batch, steps, input], "input size", path)?;
        if len < needed {
            return Err(LoomError::InvalidInput(format!(
                "{path}: {t} expects {expected} = {needed} values for batch {batch}, got {len} (shape {shape:?})"
            )));
        }
        let row = input
            .checked_add(hidden)
            .and_then(|n| n.checked_add(1))
            .unwrap_or(usize::MAX);
        let block = product(&[hidden, row], "weight count", path)?;
        let needed = product(&[gates, block], "weight count", path)?;
        if weight_count < needed {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: {t} needs {needed} weights, the layer has {weight_count}"
            )));
        }
        product(&[batch, steps, hidden], "output size", path)?;
        Ok(RecurrentDims {
            batch,
            steps,
            input,
            hidden,
        })
    }
}

/// One gate's weights: `Wih [hidden × in]`, `Whh [hidden × hidden]`, `b [hidden]`.
struct Gate<'a> {
    wih: &'a [f32],
    whh: &'a [f32],
    b: &'a [f32],
}

impl<'a> Gate<'a> {
    fn new(w: &'a [f32], d: &RecurrentDims, g: usize) -> Gate<'a> {
        let (ih, hh) = (d.hidden * d.input, d.hidden * d.hidden);
        let start = g * (ih + hh + d.hidden);
        Gate {
            wih: &w[start..start + ih],
            whh: &w[start + ih..start + ih + hh],
            b: &w[start + ih + hh..start + ih + hh + d.hidden],
        }
    }
}

/// RNN: `h_t = f32(tanh(b + Σ Wih·x_t + Σ Whh·h_{t−1}))`, one f64 sum in exactly that order (bit-exactness forces
/// it; Loom's tiles do not round), with `h_{t−1}` the rounded f32 output. Always tanh.
pub(crate) fn rnn(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let w = weights(layer, path, state)?;
    let d = RecurrentDims::new(layer, path, &x.shape, x.data.len(), w.len(), 1)?;
    let gate = Gate::new(&w, &d, 0);
    let mut out = zeros(d.batch * d.steps * d.hidden, path)?;
    let mut h_prev = vec![0f32; d.hidden];
    for b in 0..d.batch {
        h_prev.fill(0.0);
        for t in 0..d.steps {
            let xt = &x.data[(b * d.steps + t) * d.input..][..d.input];
            let o = (b * d.steps + t) * d.hidden;
            for h in 0..d.hidden {
                let mut sum = f64::from(gate.b[h]);
                for (xi, wi) in xt.iter().zip(&gate.wih[h * d.input..][..d.input]) {
                    sum += f64::from(*xi) * f64::from(*wi);
                }
                for (hp, wh) in h_prev.iter().zip(&gate.whh[h * d.hidden..][..d.hidden]) {
                    sum += f64::from(*hp) * f64::from(*wh);
                }
                out[o + h] = gomath::tanh(sum) as f32;
            }
            h_prev.copy_from_slice(&out[o..o + d.hidden]);
        }
    }
    Tensor::new(out, vec![d.batch, d.steps, d.hidden])
}

/// `y + f32(Σ_tile a·w)` for every tile of `t` terms: each tile is summed in f64 from zero, rounded to f32, and added
/// to the running f32 value (bit-exactness forces this order and these roundings).
fn tiled_add<A: Copy + Into<f64>>(mut y: f32, a: &[A], w: &[f32], t: usize) -> f32 {
    for (xs, ws) in a.chunks(t).zip(w.chunks(t)) {
        let mut acc = 0f64;
        for (v, wv) in xs.iter().zip(ws) {
            acc += (*v).into() * f64::from(*wv);
        }
        y += acc as f32;
    }
    y
}

/// LSTM, gates i, f, g, o in the store in that order. Each gate's pre-activation starts at f32(bias), adds every
/// input tile and then every hidden tile as [`tiled_add`] (tile = `tile_size` or 8); then in f64: i, f, o = σ,
/// g = tanh, `c = f·c_prev + i·g`, `h = o·tanh(c)`. `h` and `c` are carried in f64, unrounded; the output is f32(h).
pub(crate) fn lstm(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let w = weights(layer, path, state)?;
    let d = RecurrentDims::new(layer, path, &x.shape, x.data.len(), w.len(), 4)?;
    let gates = [0, 1, 2, 3].map(|g| Gate::new(&w, &d, g));
    let t = tile(layer);
    let mut out = zeros(d.batch * d.steps * d.hidden, path)?;
    let (mut h_prev, mut c_prev) = (vec![0f64; d.hidden], vec![0f64; d.hidden]);
    let mut h_next = vec![0f64; d.hidden];
    for b in 0..d.batch {
        h_prev.fill(0.0);
        c_prev.fill(0.0);
        for step in 0..d.steps {
            let xt = &x.data[(b * d.steps + step) * d.input..][..d.input];
            let o = (b * d.steps + step) * d.hidden;
            for h in 0..d.hidden {
                let [i, f, g, og] = gates.each_ref().map(|gate| {
                    let y = tiled_add(gate.b[h], xt, &gate.wih[h * d.input..][..d.input], t);
                    f64::from(tiled_add(y, &h_prev, &gate.whh[h * d.hidden..][..d.hidden], t))
                });
                let c = gomath::sigmoid(f) * c_prev[h] + gomath::sigmoid(i) * gomath::tanh(g);
                let hv = gomath::sigmoid(og) * gomath::tanh(c);
                out[o + h] = hv as f32;
                h_next[h] = hv;
                c_prev[h] = c;
            }
            std::mem::swap(&mut h_prev, &mut h_next);
        }
    }
    Tensor::new(out, vec![d.batch, d.steps, d.hidden])
}

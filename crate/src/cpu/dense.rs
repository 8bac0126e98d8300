//! Dense: `y = act(W·x)`, no bias (spec §7).

use super::{activate, dim, gomath, weights, State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

/// Loom's tile width: `tile_size`, else 8.
pub(crate) fn tile(layer: &Layer) -> usize {
    if layer.tile_size > 0 {
        layer.tile_size as usize
    } else {
        8
    }
}

/// `Σ x·w` over one row, summed in f64 and rounded to f32 every `t` terms (Loom's tiles); the running value
/// starts from `init`. Bit-exactness forces this exact order of summation.
pub(crate) fn tiled_dot(init: f32, x: &[f32], w: &[f32], t: usize) -> f32 {
    let mut y = init;
    for (xs, ws) in x.chunks(t).zip(w.chunks(t)) {
        let mut acc = f64::from(y);
        for (a, b) in xs.iter().zip(ws) {
            acc += f64::from(*a) * f64::from(*b);
        }
        y = acc as f32;
    }
    y
}

pub(crate) fn dense(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let n_in = dim(layer.input_height, "input_height", path)?;
    let n_out = dim(layer.output_height, "output_height", path)?;
    if x.shape.len() < 2 {
        return Err(LoomError::InvalidInput(format!(
            "{path}: Dense needs a [batch, {n_in}] input, got shape {:?} (Loom would crash)",
            x.shape
        )));
    }
    let batch = x.batch();
    if batch * n_in != x.data.len() {
        return Err(LoomError::InvalidInput(format!(
            "{path}: Dense expects {batch}×{n_in} values, got {}",
            x.data.len()
        )));
    }
    let w = weights(layer, path, state)?;
    let t = tile(layer);
    let mut out = vec![0f32; batch * n_out];
    matvec_tiled(&x.data, &w, &mut out, n_in, t);
    out.iter_mut().for_each(|v| *v = activate(layer.activation, *v));
    Tensor::new(out, vec![batch, n_out])
}

/// Outputs computed together: each keeps its own sequential sum, so lanes are independent and vectorize
/// (f64x2 on wasm simd128 / SSE2, wider with AVX) without changing a single rounding.
const LANES: usize = 4;

/// `y[b][o] = tiled_dot(y[b][o], x[b], W[o])` for every batch row `b` of `x` (`[batch][n_in]`) and row `o` of `w`
/// (`[n_out][n_in]`), `LANES` weight rows at a time: each output starts from the value `y` holds (0 for Dense, the
/// bias for SwiGLU's down projection). Output blocks are the outer loop, so a block of weight rows stays in cache
/// while every batch row uses it.
pub(crate) fn matvec_tiled(x: &[f32], w: &[f32], y: &mut [f32], n_in: usize, t: usize) {
    if n_in == 0 || x.is_empty() {
        return; // no inputs: every output keeps its start value, as an empty sum does
    }
    let batch = x.len() / n_in;
    let n_out = y.len() / batch;
    let blocks = n_out / LANES;
    for blk in 0..blocks {
        let o0 = blk * LANES;
        let rows: [&[f32]; LANES] = std::array::from_fn(|k| &w[(o0 + k) * n_in..(o0 + k + 1) * n_in]);
        for (xb, yb) in x.chunks(n_in).zip(y.chunks_mut(n_out)) {
            let mut acc32: [f32; LANES] = std::array::from_fn(|k| yb[o0 + k]);
            let mut start = 0;
            while start < n_in {
                let end = (start + t).min(n_in);
                let mut acc: [f64; LANES] = acc32.map(f64::from);
                for i in start..end {
                    let xi = f64::from(xb[i]);
                    for k in 0..LANES {
                        acc[k] += xi * f64::from(rows[k][i]);
                    }
                }
                acc32 = acc.map(|a| a as f32);
                start = end;
            }
            yb[o0..o0 + LANES].copy_from_slice(&acc32);
        }
    }
    for (xb, yb) in x.chunks(n_in).zip(y.chunks_mut(n_out)) {
        for (o, v) in yb.iter_mut().enumerate().skip(blocks * LANES) {
            *v = tiled_dot(*v, xb, &w[o * n_in..(o + 1) * n_in], t);
        }
    }
}

/// `y[o] = init[o] + Σ x·W[o]` summed entirely in f64 (no tile roundings), `LANES` rows at a time.
fn matvec_f64(x: &[f32], w: &[f32], init: &[f32], y: &mut [f64]) {
    let n = x.len();
    let blocks = y.len() / LANES;
    for blk in 0..blocks {
        let o0 = blk * LANES;
        let rows: [&[f32]; LANES] = std::array::from_fn(|k| &w[(o0 + k) * n..(o0 + k + 1) * n]);
        let mut acc: [f64; LANES] = std::array::from_fn(|k| f64::from(init[o0 + k]));
        for (i, xi) in x.iter().enumerate() {
            let xi = f64::from(*xi);
            for k in 0..LANES {
                acc[k] += xi * f64::from(rows[k][i]);
            }
        }
        y[o0..o0 + LANES].copy_from_slice(&acc);
    }
    for (o, v) in y.iter_mut().enumerate().skip(blocks * LANES) {
        *v = x
            .iter()
            .zip(&w[o * n..(o + 1) * n])
            .fold(f64::from(init[o]), |acc, (a, b)| acc + f64::from(*a) * f64::from(*b));
    }
}

/// SwiGLU: `down(silu(gate·x + bg) ⊙ (up·x + bu)) + bd` per row of `input_height` values. Gate and up sum fully
/// in f64 from their biases; the SiLU product is rounded once; down is tiled like Dense from `bd` (spec §7).
/// Always SiLU: the layer's activation is ignored, as in Loom.
pub(crate) fn swiglu(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let h = dim(layer.input_height, "input_height", path)?;
    let i = dim(layer.output_height, "output_height", path)?;
    if h == 0 || !x.data.len().is_multiple_of(h) {
        return Err(LoomError::InvalidInput(format!(
            "{path}: SwiGLU needs rows of {h} values, got {}",
            x.data.len()
        )));
    }
    let w = weights(layer, path, state)?;
    let (wg, rest) = w.split_at(i * h);
    let (wu, rest) = rest.split_at(i * h);
    let (wd, rest) = rest.split_at(h * i);
    let (bg, rest) = rest.split_at(i);
    let (bu, bd) = rest.split_at(i);
    let t = tile(layer);
    let mut out = Vec::with_capacity(x.data.len());
    let (mut g, mut u, mut inter) = (vec![0f64; i], vec![0f64; i], vec![0f32; i]);
    for row in x.data.chunks(h) {
        matvec_f64(row, wg, bg, &mut g);
        matvec_f64(row, wu, bu, &mut u);
        for ((v, g), u) in inter.iter_mut().zip(&g).zip(&u) {
            *v = (g * gomath::sigmoid(*g) * u) as f32;
        }
        let start = out.len();
        out.extend_from_slice(bd);
        matvec_tiled(&inter, wd, &mut out[start..], i, t);
    }
    Tensor::new(out, x.shape.clone())
}

//! CNN1/2/3 and ConvTransposed1D/2D/3D (spec §7).
//!
//! Both families run on one 3-D loop nest: a 1-D or 2-D layer is a 3-D one whose missing leading dimensions have
//! extent 1, kernel 1, stride 1 and no padding, which adds no term and changes no order. Layout: input
//! `[B][C][D][H][W]`, weights `[F][C][kD][kH][kW]`, output `[B][F][D'][H'][W']`; the batch is `shape[0]` and only
//! the configured sizes are read (Loom ignores the rest of the shape and any values past the last one it reads).

use std::sync::Arc;

use super::{activate, batch, dim, product, weights, zeros, State, Tensor};
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::network::{Layer, LayerType};

/// One convolution's geometry, every dimension in `[D, H, W]` order (shared with the GPU host, which validates
/// exactly as this forward does).
pub(crate) struct ConvGeometry {
    pub batch: usize,
    pub channels: usize,
    pub filters: usize,
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [i64; 3],
    pub padding: [i64; 3],
}

impl ConvGeometry {
    /// Reads the fields `layer`'s type uses (spec §6.2) and checks an input of `shape` holding `len` values and the
    /// weights against them.
    pub fn new(layer: &Layer, path: &str, shape: &[usize], len: usize, weight_count: usize) -> Result<ConvGeometry> {
        let t = layer.layer_type;
        let d = |v: i64, what: &str| dim(v, what, path);
        let (n, input, output) = match t {
            LayerType::CNN1 => (
                1,
                [1, 1, d(layer.input_height, "input_height")?],
                [1, 1, d(layer.output_height, "output_height")?],
            ),
            LayerType::ConvTransposed1D => (
                1,
                [1, 1, d(layer.input_width, "input_width")?],
                [1, 1, d(layer.output_width, "output_width")?],
            ),
            LayerType::CNN2 | LayerType::ConvTransposed2D => (
                2,
                [
                    1,
                    d(layer.input_height, "input_height")?,
                    d(layer.input_width, "input_width")?,
                ],
                [
                    1,
                    d(layer.output_height, "output_height")?,
                    d(layer.output_width, "output_width")?,
                ],
            ),
            _ => (
                3,
                [
                    d(layer.input_depth, "input_depth")?,
                    d(layer.input_height, "input_height")?,
                    d(layer.input_width, "input_width")?,
                ],
                [
                    d(layer.output_depth, "output_depth")?,
                    d(layer.output_height, "output_height")?,
                    d(layer.output_width, "output_width")?,
                ],
            ),
        };
        // Loom loops over `kernel_size` as stored: 0 means no taps (the weight count alone treats 0 as 1).
        let k = d(layer.kernel_size, "kernel_size")?;
        let g = ConvGeometry {
            batch: 0,
            channels: d(layer.input_channels, "input_channels")?,
            filters: d(layer.filters, "filters")?,
            input,
            output,
            kernel: spread(n, k, 1),
            stride: spread(n, layer.stride, 1),
            padding: spread(n, layer.padding, 0),
        };
        let expected = format!(
            "[batch, {}, {}]",
            g.channels,
            input[3 - n..]
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let batch = batch(shape, path, t, &expected)?;
        let per_item = product(&[g.channels, input[0], input[1], input[2]], "input size", path)?;
        let needed = product(&[batch, per_item], "input size", path)?;
        if len < needed {
            return Err(LoomError::InvalidInput(format!(
                "{path}: {t} expects {expected} = {needed} values for batch {batch}, got {len} (shape {shape:?})"
            )));
        }
        let taps = product(
            &[g.filters, g.channels, g.kernel[0], g.kernel[1], g.kernel[2]],
            "weight count",
            path,
        )?;
        if weight_count < taps {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: {t} needs {taps} weights, the layer has {weight_count}"
            )));
        }
        Ok(ConvGeometry { batch, ..g })
    }

    pub fn output_len(&self, path: &str) -> Result<usize> {
        let o = self.output;
        product(&[self.batch, self.filters, o[0], o[1], o[2]], "output size", path)
    }

    pub fn output_shape(&self, layer: LayerType) -> Vec<usize> {
        let skip = match layer {
            LayerType::CNN1 | LayerType::ConvTransposed1D => 2,
            LayerType::CNN2 | LayerType::ConvTransposed2D => 1,
            _ => 0,
        };
        [self.batch, self.filters]
            .into_iter()
            .chain(self.output[skip..].iter().copied())
            .collect()
    }
}

/// `v` on the `n` trailing dimensions of `[D, H, W]`, `idle` on the others.
fn spread<T: Copy>(n: usize, v: T, idle: T) -> [T; 3] {
    match n {
        1 => [idle, idle, v],
        2 => [idle, v, v],
        _ => [v; 3],
    }
}

/// `pos·stride + tap − padding` in Go's wrapping `int` arithmetic, if it lies inside `0..len`.
fn tap(pos: usize, stride: i64, k: usize, padding: i64, len: usize) -> Option<usize> {
    let p = (pos as i64)
        .wrapping_mul(stride)
        .wrapping_add(k as i64)
        .wrapping_sub(padding);
    usize::try_from(p).ok().filter(|p| *p < len)
}

/// CNN1/2/3: each output is `act(f32(Σ_{c, kd, kh, kw} x·w))`, summed in f64 in exactly that order (bit-exactness
/// forces it), with zero padding.
pub(crate) fn cnn(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let w = weights(layer, path, state)?;
    let g = ConvGeometry::new(layer, path, &x.shape, x.data.len(), w.len())?;
    let mut out = zeros(g.output_len(path)?, path)?;
    let ([id, ih, iw], [od, oh, ow], [kd, kh, kw]) = (g.input, g.output, g.kernel);
    let (c_n, f_n) = (g.channels, g.filters);
    let mut o = 0;
    for b in 0..g.batch {
        for f in 0..f_n {
            for pd in 0..od {
                for ph in 0..oh {
                    for pw in 0..ow {
                        let mut sum = 0f64;
                        for c in 0..c_n {
                            let plane = (b * c_n + c) * id;
                            let wc = (f * c_n + c) * kd;
                            for zd in 0..kd {
                                let Some(xd) = tap(pd, g.stride[0], zd, g.padding[0], id) else {
                                    continue;
                                };
                                for zh in 0..kh {
                                    let Some(xh) = tap(ph, g.stride[1], zh, g.padding[1], ih) else {
                                        continue;
                                    };
                                    let row = ((plane + xd) * ih + xh) * iw;
                                    let wrow = ((wc + zd) * kh + zh) * kw;
                                    for zw in 0..kw {
                                        if let Some(xw) = tap(pw, g.stride[2], zw, g.padding[2], iw) {
                                            sum += f64::from(x.data[row + xw]) * f64::from(w[wrow + zw]);
                                        }
                                    }
                                }
                            }
                        }
                        out[o] = activate(layer.activation, sum as f32);
                        o += 1;
                    }
                }
            }
        }
    }
    Tensor::new(out, g.output_shape(layer.layer_type))
}

/// ConvTransposed1D/2D/3D in scatter form: every input value adds `f32(x·w)` to `out[pos·stride − padding + k]`,
/// accumulating in f32 in the order b, c, input position, f, kd, kh, kw (bit-exactness forces it); then the
/// activation. Only float32 and float64 layers compute (float64 with its full-precision weights); Loom's other
/// dtypes fall through every branch and return zeros without the activation.
pub(crate) fn conv_transposed(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let w = weights64(layer, path, state)?;
    let g = ConvGeometry::new(layer, path, &x.shape, x.data.len(), w.len())?;
    let mut out = zeros(g.output_len(path)?, path)?;
    if !matches!(layer.dtype, DType::Float32 | DType::Float64) {
        return Tensor::new(out, g.output_shape(layer.layer_type));
    }
    let ([id, ih, iw], [od, oh, ow], [kd, kh, kw]) = (g.input, g.output, g.kernel);
    let (c_n, f_n) = (g.channels, g.filters);
    let mut i = 0;
    for b in 0..g.batch {
        for c in 0..c_n {
            for pd in 0..id {
                for ph in 0..ih {
                    for pw in 0..iw {
                        let v = f64::from(x.data[i]);
                        i += 1;
                        for f in 0..f_n {
                            let plane = (b * f_n + f) * od;
                            let wc = (f * c_n + c) * kd;
                            for zd in 0..kd {
                                let Some(yd) = tap(pd, g.stride[0], zd, g.padding[0], od) else {
                                    continue;
                                };
                                for zh in 0..kh {
                                    let Some(yh) = tap(ph, g.stride[1], zh, g.padding[1], oh) else {
                                        continue;
                                    };
                                    let row = ((plane + yd) * oh + yh) * ow;
                                    let wrow = ((wc + zd) * kh + zh) * kw;
                                    for zw in 0..kw {
                                        if let Some(yw) = tap(pw, g.stride[2], zw, g.padding[2], ow) {
                                            out[row + yw] += (v * w[wrow + zw]) as f32;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out.iter_mut().for_each(|y| *y = activate(layer.activation, *y));
    Tensor::new(out, g.output_shape(layer.layer_type))
}

/// The weights as Loom's ConvTransposed reads them: a float64 layer's own float64 values (`GetActive` returns the
/// float64 version unrounded), everything else as the dequantized float32 weights.
fn weights64(layer: &Layer, path: &str, state: &mut State) -> Result<Arc<Vec<f64>>> {
    if let Some(w) = state.weights64.get(path) {
        return Ok(w.clone());
    }
    let version = layer.weights.as_ref().and_then(|ws| ws.version(DType::Float64));
    let w: Vec<f64> = match version {
        Some(bytes) if layer.dtype == DType::Float64 => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("chunks of 8")))
            .collect(),
        _ => weights(layer, path, state)?.iter().map(|v| f64::from(*v)).collect(),
    };
    let w = Arc::new(w);
    state.weights64.insert(path.to_string(), w.clone());
    Ok(w)
}

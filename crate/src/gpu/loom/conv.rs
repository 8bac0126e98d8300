//! Host for `shaders/conv.wgsl`: CNN1/2/3 and ConvTransposed1D/2D/3D. CPU twin: `crate::cpu` conv.rs, whose
//! geometry and checks this host shares ([`ConvGeometry`]). CNN sums in f32 where the CPU sums in f64;
//! ConvTransposed adds the same f32 products in the CPU's order (float64 layers: the CPU's products use the f64
//! weights, the GPU's their f32 rounding). Activations are the GPU's f32 maths. Weights go up dequantized as f32.

use std::sync::Arc;

use crate::cpu::{ConvGeometry, Tensor};
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::{check_binding, dispatch, grid_for, run_once, u32_dim};
use crate::gpu::ops::ACTIVATION_WGSL;
use crate::gpu::F32Weights;
use crate::gpu::Recorder;
use crate::gpu::{Gpu, GpuTensor, Pointwise};
use crate::network::{Layer, LayerType};

const CONV_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/conv.wgsl"));
const LANES: u32 = 64;

/// The CNN and ConvTransposed kernels.
pub struct Conv {
    cnn: Arc<wgpu::ComputePipeline>,
    transposed: Arc<wgpu::ComputePipeline>,
}

impl Conv {
    pub fn new(gpu: &Gpu) -> Result<Conv> {
        let source = format!("{ACTIVATION_WGSL}\n{CONV_WGSL}");
        Ok(Conv {
            cnn: gpu.pipeline("conv_cnn", &source, "cnn")?,
            transposed: gpu.pipeline("conv_transposed", &source, "conv_transposed")?,
        })
    }

    /// Uploads `layer`'s dequantized weights.
    pub async fn prepare(&self, gpu: &Gpu, layer: &Layer, path: &str) -> Result<F32Weights> {
        transposed(layer, path)?;
        F32Weights::upload(gpu, layer, path).await
    }

    /// Records the layer on `x` (checked as the CPU checks it) into a new activation of the CPU's output shape.
    pub fn encode(
        &self,
        rec: &mut Recorder,
        layer: &Layer,
        path: &str,
        w: &F32Weights,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        let gpu = rec.gpu();
        let transposed = transposed(layer, path)?;
        let g = ConvGeometry::new(layer, path, &x.shape, x.len(), w.count)?;
        let total = g.output_len(path)?;
        let y = GpuTensor::scratch(rec, g.output_shape(layer.layer_type))?;
        // Loom's ConvTransposed computes only float32 and float64 layers; the others return zeros, unactivated.
        if transposed && !matches!(layer.dtype, DType::Float32 | DType::Float64) {
            rec.encoder().clear_buffer(&y.buffer, 0, None);
            return Ok(y);
        }
        if total == 0 {
            return Ok(y);
        }
        check_binding(gpu, &format!("{path} output"), 4 * total as u64)?;
        if !fits_i32(&g, transposed) {
            return Err(LoomError::Unsupported(format!(
                "{path}: {} positions with this stride and padding overflow the GPU's 32-bit index arithmetic",
                layer.layer_type
            )));
        }
        let u = |v: usize, what: &str| u32_dim(v, &format!("{path}: {what}"));
        let i = |v: i64| v as i32 as u32;
        let [id, ih, iw] = g.input;
        let [od, oh, ow] = g.output;
        let [kd, kh, kw] = g.kernel;
        let words = [
            u(total, "output size")?,
            u(g.channels, "input_channels")?,
            u(g.filters, "filters")?,
            Pointwise::from(layer.activation).id(),
            u(id, "input depth")?,
            u(ih, "input height")?,
            u(iw, "input width")?,
            0,
            u(od, "output depth")?,
            u(oh, "output height")?,
            u(ow, "output width")?,
            0,
            u(kd, "kernel_size")?,
            u(kh, "kernel_size")?,
            u(kw, "kernel_size")?,
            0,
            i(g.stride[0]),
            i(g.stride[1]),
            i(g.stride[2]),
            0,
            i(g.padding[0]),
            i(g.padding[1]),
            i(g.padding[2]),
            0,
        ];
        let pipeline = if transposed { &self.transposed } else { &self.cnn };
        let grid = grid_for(gpu, total as u64, LANES, path)?;
        dispatch(
            rec,
            pipeline,
            &words,
            &[(1, &x.buffer), (2, &w.buffer), (3, &y.buffer)],
            grid,
        );
        Ok(y)
    }

    /// One-shot: uploads the weights and `x`, runs the layer, reads the result back.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, path: &str, x: &Tensor) -> Result<Tensor> {
        let w = self.prepare(gpu, layer, path).await?;
        run_once(gpu, x, |rec, xg| self.encode(rec, layer, path, &w, xg)).await
    }
}

/// Whether `layer` is a ConvTransposed (else a CNN); any other type is refused.
fn transposed(layer: &Layer, path: &str) -> Result<bool> {
    match layer.layer_type {
        LayerType::CNN1 | LayerType::CNN2 | LayerType::CNN3 => Ok(false),
        LayerType::ConvTransposed1D | LayerType::ConvTransposed2D | LayerType::ConvTransposed3D => Ok(true),
        other => Err(LoomError::InvalidInput(format!(
            "{path}: {other} is not a CNN or ConvTransposed layer"
        ))),
    }
}

/// Whether every `pos·stride + k − padding` (CNN) or `q + padding − pos·stride` (ConvTransposed) the kernel forms
/// fits an i32, as it must to equal the CPU's 64-bit arithmetic (this also bounds the stride and padding).
fn fits_i32(g: &ConvGeometry, transposed: bool) -> bool {
    (0..3).all(|d| {
        let (pos, reach) = if transposed {
            (g.input[d], g.output[d].max(g.kernel[d]))
        } else {
            (g.output[d], g.kernel[d].max(g.input[d]))
        };
        let bound = (pos as i128) * i128::from(g.stride[d]).abs() + reach as i128 + i128::from(g.padding[d]).abs();
        bound <= i128::from(i32::MAX)
    })
}

//! Host for `shaders/softmax.wgsl`: softmax over rows, and the sparsemax/entmax variants. CPU twin: the Softmax
//! layer (`crate::cpu` softmax.rs), f32 with Go's f64 `exp` rounded to f32; the GPU's f32 `exp` differs by a few
//! ulp, and sparsemax finds its threshold by bisection where the CPU sorts (see the WGSL).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::{Gpu, GpuTensor, REDUCE_WGSL};
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::network::{Layer, LayerType, SoftmaxType};

const SOFTMAX_WGSL: &str = include_str!("../../../shaders/softmax.wgsl");

/// The row softmax and sparsemax/entmax kernels.
pub struct Softmax {
    pipeline: Arc<wgpu::ComputePipeline>,
    sparse: Arc<wgpu::ComputePipeline>,
}

/// Which kernel a row runs, with its parameter.
#[derive(Clone, Copy)]
enum Variant {
    /// softmax(x / temperature)
    Softmax(f32),
    Sparsemax,
    /// Loom's entmax with blend weight `α − 1`.
    Entmax(f32),
}

impl Softmax {
    pub fn new(gpu: &Gpu) -> Result<Softmax> {
        let source = format!("{REDUCE_WGSL}\n{SOFTMAX_WGSL}");
        Ok(Softmax {
            pipeline: gpu.pipeline("softmax_rows", &source, "softmax")?,
            sparse: gpu.pipeline("softmax_sparse", &source, "sparse")?,
        })
    }

    /// Records `y = softmax(x / temperature)` over `rows` rows of `n` values.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: u32,
        n: u32,
        temperature: f32,
    ) -> Result<()> {
        self.record(gpu, encoder, x, y, rows, n, n, Variant::Softmax(temperature))
    }

    /// Records sparsemax (`entmax_weight` None) or Loom's entmax with blend weight `α − 1` over `rows` rows of `n`
    /// values.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_sparse(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: u32,
        n: u32,
        entmax_weight: Option<f32>,
    ) -> Result<()> {
        let variant = entmax_weight.map_or(Variant::Sparsemax, Variant::Entmax);
        self.record(gpu, encoder, x, y, rows, n, n, variant)
    }

    /// `rows` rows starting every `n` values, the last holding `last` values.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: u32,
        n: u32,
        last: u32,
        variant: Variant,
    ) -> Result<()> {
        if rows == 0 || n == 0 {
            return Ok(());
        }
        let g = grid(gpu, u64::from(rows), "softmax rows")?;
        let (pipeline, temperature, w, entmax) = match variant {
            Variant::Softmax(t) => (&self.pipeline, t, 0.0, 0),
            Variant::Sparsemax => (&self.sparse, 1.0, 0.0, 0),
            Variant::Entmax(w) => (&self.sparse, 1.0, w, 1),
        };
        let words = [rows, n, temperature.to_bits(), last, w.to_bits(), entmax];
        dispatch(gpu, encoder, pipeline, &words, &[(1, x), (2, y)], g);
        Ok(())
    }

    /// One-shot softmax of `x` in rows of `n` values.
    pub async fn run(&self, gpu: &Gpu, x: &[f32], n: usize, temperature: f32) -> Result<Vec<f32>> {
        if n == 0 || !x.len().is_multiple_of(n) {
            return Err(LoomError::InvalidInput(format!(
                "softmax: {} values do not split into rows of {n}",
                x.len()
            )));
        }
        check_binding(gpu, "softmax input", 4 * x.len() as u64)?;
        let rows = u32_dim(x.len() / n, "softmax rows")?;
        let xb = storage_f32(gpu, "softmax x", x, x.len()).await?;
        let yb = gpu.output("softmax y", 4 * x.len() as u64).await?;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.encode(
            gpu,
            &mut encoder,
            &xb,
            &yb,
            rows,
            u32_dim(n, "softmax row")?,
            temperature,
        )?;
        gpu.queue.submit([encoder.finish()]);
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(x.len());
        Ok(out)
    }

    /// Records a Loom Softmax layer on `x` into a new activation of the same shape: the whole tensor as one row, or
    /// rows of `softmax_cols` for Grid and Hierarchical (a shorter last row when they do not divide the length);
    /// Temperature divides by `temperature` (1 when unset); Sparse is sparsemax, Entmax blends with α =
    /// `entmax_alpha` (1.5 when unset); Standard, Masked, Adaptive and Mixture are plain softmax. Gumbel adds
    /// unseeded noise in Loom, so no output can match it: refused.
    pub fn encode_layer(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        layer: &Layer,
        path: &str,
        x: &GpuTensor,
    ) -> Result<GpuTensor> {
        if layer.layer_type != LayerType::Softmax {
            return Err(LoomError::InvalidInput(format!(
                "{path}: {} is not a Softmax layer",
                layer.layer_type
            )));
        }
        let variant = match layer.softmax_type {
            SoftmaxType::Gumbel => {
                return Err(LoomError::Unsupported(format!(
                    "{path}: Gumbel softmax adds unseeded noise in Loom, so no output can match it"
                )))
            }
            SoftmaxType::Temperature if layer.temperature != 0.0 => Variant::Softmax(layer.temperature as f32),
            SoftmaxType::Sparse => Variant::Sparsemax,
            SoftmaxType::Entmax => {
                let alpha = if layer.entmax_alpha != 0.0 {
                    layer.entmax_alpha as f32
                } else {
                    1.5
                };
                Variant::Entmax(alpha - 1.0)
            }
            _ => Variant::Softmax(1.0),
        };
        let len = x.len();
        let per_row = matches!(layer.softmax_type, SoftmaxType::Grid | SoftmaxType::Hierarchical);
        let n = if per_row && layer.softmax_cols > 0 {
            usize::try_from(layer.softmax_cols).unwrap_or(usize::MAX).min(len)
        } else {
            len
        };
        let y = GpuTensor::scratch(gpu, x.shape.clone())?;
        if len == 0 {
            return Ok(y);
        }
        let rows = len.div_ceil(n);
        let last = len - (rows - 1) * n;
        let u = |v: usize, what: &str| u32_dim(v, &format!("{path}: {what}"));
        self.record(
            gpu,
            encoder,
            &x.buffer,
            &y.buffer,
            u(rows, "softmax rows")?,
            u(n, "softmax row")?,
            u(last, "softmax row")?,
            variant,
        )?;
        Ok(y)
    }

    /// One-shot [`Softmax::encode_layer`]: uploads `x`, runs the layer, reads the result back.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let xg = GpuTensor::upload(gpu, x).await?;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        let y = self.encode_layer(gpu, &mut encoder, layer, "softmax", &xg)?;
        gpu.queue.submit([encoder.finish()]);
        y.read(gpu).await
    }
}

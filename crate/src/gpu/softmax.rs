//! Host for `shaders/softmax.wgsl`: softmax over rows. CPU twin: the Softmax layer (`crate::cpu` softmax.rs), f32
//! with Go's f64 `exp` rounded to f32; the GPU's f32 `exp` differs by a few ulp.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::{Gpu, REDUCE_WGSL};
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::network::{Layer, LayerType, SoftmaxType};

const SOFTMAX_WGSL: &str = include_str!("../../../shaders/softmax.wgsl");

/// The row softmax kernel.
pub struct Softmax {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl Softmax {
    pub fn new(gpu: &Gpu) -> Result<Softmax> {
        Ok(Softmax {
            pipeline: gpu.pipeline("softmax_rows", &format!("{REDUCE_WGSL}\n{SOFTMAX_WGSL}"), "softmax")?,
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
        if rows == 0 || n == 0 {
            return Ok(());
        }
        let g = grid(gpu, u64::from(rows), "softmax rows")?;
        let words = [rows, n, temperature.to_bits()];
        dispatch(gpu, encoder, &self.pipeline, &words, &[(1, x), (2, y)], g);
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

    /// A Loom Softmax layer on `x`: the whole tensor as one row, or rows of `softmax_cols` for Grid and Hierarchical;
    /// Temperature divides by `temperature` (1 when unset); Standard, Masked, Adaptive and Mixture are plain softmax.
    /// Sparse and Entmax (a sort) and Gumbel (unseeded noise in Loom) are not GPU kernels.
    pub async fn forward(&self, gpu: &Gpu, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        if layer.layer_type != LayerType::Softmax {
            return Err(LoomError::InvalidInput(format!(
                "{} is not a Softmax layer",
                layer.layer_type
            )));
        }
        let t = match layer.softmax_type {
            SoftmaxType::Temperature if layer.temperature != 0.0 => layer.temperature as f32,
            SoftmaxType::Sparse | SoftmaxType::Entmax | SoftmaxType::Gumbel => {
                return Err(LoomError::Unsupported(format!(
                    "{:?} softmax has no GPU kernel; use the CPU forward",
                    layer.softmax_type
                )))
            }
            _ => 1.0,
        };
        let per_row = matches!(layer.softmax_type, SoftmaxType::Grid | SoftmaxType::Hierarchical);
        let n = if per_row && layer.softmax_cols > 0 {
            layer.softmax_cols as usize
        } else {
            x.data.len()
        };
        if x.data.is_empty() {
            return Ok(x.clone());
        }
        // The CPU's chunks(cols) leaves a shorter last row when cols does not divide the length.
        let whole = x.data.len() / n * n;
        let mut data = self.run(gpu, &x.data[..whole], n, t).await?;
        if whole < x.data.len() {
            data.extend(self.run(gpu, &x.data[whole..], x.data.len() - whole, t).await?);
        }
        Tensor::new(data, x.shape.clone())
    }
}

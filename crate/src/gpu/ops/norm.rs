//! Host for `shaders/norm.wgsl`: RMSNorm and LayerNorm over rows. CPU twin: `crate::cpu` norm.rs, whose statistics
//! are f64; the GPU's are f32 tree sums, so results agree within a tolerance (see `crate/tests/op_cases/norm.rs`).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::tensor::{check_values, same_packed_shape, same_shape, Rows};
use super::REDUCE_WGSL;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const NORM_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/norm.wgsl"));

/// Loom's RMSNorm epsilon (`rms_norm_eps` is not persisted; MHA's Q/K norms use it too).
pub const RMS_NORM_EPS: f32 = 1e-6;
/// Loom's LayerNorm epsilon.
pub const LAYER_NORM_EPS: f32 = 1e-5;

/// The RMSNorm and LayerNorm kernels.
pub struct Norm {
    rms: Arc<wgpu::ComputePipeline>,
    add_rms: Arc<wgpu::ComputePipeline>,
    layer: Arc<wgpu::ComputePipeline>,
}

impl Norm {
    pub fn new(gpu: &Gpu) -> Result<Norm> {
        let source = format!("{REDUCE_WGSL}\n{NORM_WGSL}");
        Ok(Norm {
            rms: gpu.pipeline("norm_rms", &source, "rms_norm")?,
            add_rms: gpu.pipeline("norm_add_rms", &source, "add_rms_norm")?,
            layer: gpu.pipeline("norm_layer", &source, "layer_norm")?,
        })
    }

    /// Records `y = x · 1/√(mean(x²) + eps) · γ` for each row of `x` (packed). `gamma` holds `gamma_rows` rows of
    /// γ used in turn (1: the same γ for every row; per-head norms pass the head count).
    pub fn encode_rms(
        &self,
        rec: &mut Recorder,
        x: Rows,
        gamma: &wgpu::Buffer,
        y: Rows,
        gamma_rows: u32,
        eps: f32,
    ) -> Result<()> {
        let (rows, n) = same_packed_shape("RMSNorm", &x, &y)?;
        if rows == 0 || n == 0 {
            return Ok(());
        }
        if gamma_rows == 0 {
            return Err(LoomError::InvalidInput("RMSNorm with no γ rows".into()));
        }
        check_values("RMSNorm γ", gamma, u64::from(gamma_rows) * u64::from(n))?;
        let g = grid(rec.gpu(), u64::from(rows), "RMSNorm rows")?;
        let words = [rows, n, gamma_rows, 0, eps.to_bits()];
        dispatch(rec, &self.rms, &words, &[(1, x.buffer), (2, gamma), (3, y.buffer)], g);
        Ok(())
    }

    /// Records `h += x`, then `y = h · 1/√(mean(h²) + eps) · γ`, for each row: a residual add and the norm after
    /// it in one dispatch (`h` updated in place). CPU twin: `cpu::ops::add` then `cpu::ops::rms_norm_into`.
    pub fn encode_add_rms(
        &self,
        rec: &mut Recorder,
        h: Rows,
        x: Rows,
        gamma: &wgpu::Buffer,
        y: Rows,
        eps: f32,
    ) -> Result<()> {
        let (rows, n) = same_packed_shape("RMSNorm", &x, &y)?;
        same_shape("residual add", &x, &h)?;
        h.flat("residual add")?;
        if rows == 0 || n == 0 {
            return Ok(());
        }
        check_values("RMSNorm γ", gamma, u64::from(n))?;
        let g = grid(rec.gpu(), u64::from(rows), "RMSNorm rows")?;
        let words = [rows, n, 1, 0, eps.to_bits()];
        let buffers = [(1, x.buffer), (2, gamma), (3, y.buffer), (4, h.buffer)];
        dispatch(rec, &self.add_rms, &words, &buffers, g);
        Ok(())
    }

    /// Records LayerNorm of each row of `x`: `w` holds γ at 0 and β at `beta_offset`.
    pub fn encode_layer_norm(
        &self,
        rec: &mut Recorder,
        x: Rows,
        w: &wgpu::Buffer,
        y: Rows,
        beta_offset: u32,
        eps: f32,
    ) -> Result<()> {
        let (rows, n) = same_packed_shape("LayerNorm", &x, &y)?;
        if rows == 0 || n == 0 {
            return Ok(());
        }
        check_values("LayerNorm γ and β", w, u64::from(beta_offset) + u64::from(n))?;
        let g = grid(rec.gpu(), u64::from(rows), "LayerNorm rows")?;
        let words = [rows, n, 1, beta_offset, eps.to_bits()];
        dispatch(rec, &self.layer, &words, &[(1, x.buffer), (2, w), (3, y.buffer)], g);
        Ok(())
    }

    /// One-shot RMSNorm of `x` in rows of `gamma.len()` values.
    pub async fn run_rms(&self, gpu: &Gpu, x: &[f32], gamma: &[f32], eps: f32) -> Result<Vec<f32>> {
        let n = gamma.len();
        let rows = rows_of(x.len(), n)?;
        self.run(gpu, x, gamma, n, rows, 0, eps, true).await
    }

    /// One-shot LayerNorm of `x` in rows of `gamma.len()` values.
    pub async fn run_layer(&self, gpu: &Gpu, x: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> Result<Vec<f32>> {
        let n = gamma.len();
        if beta.len() != n {
            return Err(LoomError::InvalidInput(format!(
                "LayerNorm: {} β values for {n} γ values",
                beta.len()
            )));
        }
        let rows = rows_of(x.len(), n)?;
        let w = [gamma, beta].concat();
        self.run(gpu, x, &w, n, rows, n, eps, false).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        gpu: &Gpu,
        x: &[f32],
        w: &[f32],
        n: usize,
        rows: usize,
        beta_offset: usize,
        eps: f32,
        rms: bool,
    ) -> Result<Vec<f32>> {
        check_binding(gpu, "norm input", 4 * x.len() as u64)?;
        let xb = storage_f32(gpu, "norm x", x, x.len()).await?;
        let wb = storage_f32(gpu, "norm weights", w, w.len()).await?;
        let yb = gpu.output("norm y", 4 * x.len() as u64).await?;
        let (rows, n) = (u32_dim(rows, "norm rows")?, u32_dim(n, "norm row length")?);
        let (xr, yr) = (Rows::new(&xb, rows, n), Rows::new(&yb, rows, n));
        let mut rec = Recorder::new(gpu);
        if rms {
            self.encode_rms(&mut rec, xr, &wb, yr, 1, eps)?;
        } else {
            let beta_offset = u32_dim(beta_offset, "LayerNorm β offset")?;
            self.encode_layer_norm(&mut rec, xr, &wb, yr, beta_offset, eps)?;
        }
        rec.submit();
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(x.len());
        Ok(out)
    }
}

fn rows_of(len: usize, n: usize) -> Result<usize> {
    if n == 0 || !len.is_multiple_of(n) {
        return Err(LoomError::InvalidInput(format!(
            "{len} values do not split into rows of {n}"
        )));
    }
    Ok(len / n)
}

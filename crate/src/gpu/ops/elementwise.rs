//! Host for `shaders/elementwise.wgsl`: residual and bias adds, activations, SwiGLU's `silu(gate)·up` product, and
//! scaling in place (a Parallel layer's `avg`).
//! CPU twins: Residual (`x + skip` in f32, so the add is exact), `crate::cpu::activate`, and the SwiGLU layer's inner
//! product `f32(g·σ(g)·u)` (f64 there, f32 here).

use std::sync::Arc;

use super::kernel::{dispatch, grid_for, storage_f32, u32_dim};
use super::{Pointwise, ACTIVATION_WGSL};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ELEMENTWISE_WGSL: &str = include_str!("../../../../shaders/elementwise.wgsl");
const LANES: u32 = 256;

/// The elementwise kernels.
pub struct Elementwise {
    add: Arc<wgpu::ComputePipeline>,
    add_inplace: Arc<wgpu::ComputePipeline>,
    act: Arc<wgpu::ComputePipeline>,
    swiglu: Arc<wgpu::ComputePipeline>,
    swiglu_rows: Arc<wgpu::ComputePipeline>,
    scale: Arc<wgpu::ComputePipeline>,
}

impl Elementwise {
    pub fn new(gpu: &Gpu) -> Result<Elementwise> {
        let source = format!("{ACTIVATION_WGSL}\n{ELEMENTWISE_WGSL}");
        Ok(Elementwise {
            add: gpu.pipeline("elementwise_add", &source, "add")?,
            add_inplace: gpu.pipeline("elementwise_add_inplace", &source, "add_inplace")?,
            act: gpu.pipeline("elementwise_act", &source, "act")?,
            swiglu: gpu.pipeline("elementwise_swiglu", &source, "swiglu")?,
            swiglu_rows: gpu.pipeline("elementwise_swiglu_rows", &source, "swiglu_rows")?,
            scale: gpu.pipeline("elementwise_scale", &source, "scale")?,
        })
    }

    /// Records `y[i] = a[i] + b[i % nb]` for `n` values: a residual add (`nb = n`) or a broadcast bias row.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_add(
        &self,
        rec: &mut Recorder,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        nb: u32,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if n == 0 {
            return Ok(());
        }
        check_nb(nb)?;
        let g = grid_for(gpu, u64::from(n), LANES, "add")?;
        dispatch(rec, &self.add, &[n, nb], &[(1, a), (2, b), (3, y)], g);
        Ok(())
    }

    /// Records `y[i] += b[i % nb]` for `n` values (a bias row after a matvec).
    pub fn encode_add_inplace(
        &self,
        rec: &mut Recorder,
        y: &wgpu::Buffer,
        b: &wgpu::Buffer,
        n: u32,
        nb: u32,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if n == 0 {
            return Ok(());
        }
        check_nb(nb)?;
        let g = grid_for(gpu, u64::from(n), LANES, "add")?;
        dispatch(rec, &self.add_inplace, &[n, nb], &[(2, b), (3, y)], g);
        Ok(())
    }

    /// Records `y[i] = act(x[i])` for `n` values.
    pub fn encode_act(
        &self,
        rec: &mut Recorder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        act: Pointwise,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(gpu, u64::from(n), LANES, "activation")?;
        dispatch(rec, &self.act, &[n, 1, act.id()], &[(1, x), (3, y)], g);
        Ok(())
    }

    /// Records `y[i] = silu(gate[i]) · up[i]` for `n` values.
    pub fn encode_swiglu(
        &self,
        rec: &mut Recorder,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(gpu, u64::from(n), LANES, "SwiGLU product")?;
        dispatch(rec, &self.swiglu, &[n, 1], &[(1, gate), (2, up), (3, y)], g);
        Ok(())
    }

    /// Records SwiGLU's product from one buffer holding gate and up side by side (`rows` rows of `2 × width`: a
    /// fused gate|up matvec's output) into `y` (`rows × width`).
    pub fn encode_swiglu_rows(
        &self,
        rec: &mut Recorder,
        gate_up: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: u32,
        width: u32,
    ) -> Result<()> {
        let gpu = rec.gpu();
        let n = rows
            .checked_mul(width)
            .ok_or_else(|| LoomError::Unsupported(format!("SwiGLU of {rows} rows of {width}: too many values")))?;
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(gpu, u64::from(n), LANES, "SwiGLU product")?;
        dispatch(rec, &self.swiglu_rows, &[n, width], &[(1, gate_up), (3, y)], g);
        Ok(())
    }

    /// Records `y[i] *= factor` for `n` values (f32; Loom's Parallel `avg` multiplies by a float64 `1/n`).
    pub fn encode_scale(&self, rec: &mut Recorder, y: &wgpu::Buffer, n: u32, factor: f32) -> Result<()> {
        let gpu = rec.gpu();
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(gpu, u64::from(n), LANES, "scale")?;
        dispatch(rec, &self.scale, &[n, 1, 0, factor.to_bits()], &[(3, y)], g);
        Ok(())
    }

    /// One-shot `a + b`, `b` broadcast over rows of `b.len()` values (equal lengths: a residual add).
    pub async fn add(&self, gpu: &Gpu, a: &[f32], b: &[f32]) -> Result<Vec<f32>> {
        if b.is_empty() || !a.len().is_multiple_of(b.len()) {
            return Err(LoomError::InvalidInput(format!(
                "add: {} values do not split into rows of {}",
                a.len(),
                b.len()
            )));
        }
        let (n, nb) = (u32_dim(a.len(), "add length")?, u32_dim(b.len(), "add row")?);
        self.one_shot(gpu, a, b, |rec, ab, bb, yb| self.encode_add(rec, ab, bb, yb, n, nb))
            .await
    }

    /// One-shot `act(x)`.
    pub async fn activate(&self, gpu: &Gpu, x: &[f32], act: Pointwise) -> Result<Vec<f32>> {
        let n = u32_dim(x.len(), "activation length")?;
        self.one_shot(gpu, x, &[], |rec, xb, _, yb| self.encode_act(rec, xb, yb, n, act))
            .await
    }

    /// One-shot `silu(gate) · up`.
    pub async fn swiglu(&self, gpu: &Gpu, gate: &[f32], up: &[f32]) -> Result<Vec<f32>> {
        if gate.len() != up.len() {
            return Err(LoomError::InvalidInput(format!(
                "SwiGLU product: {} gate values, {} up values",
                gate.len(),
                up.len()
            )));
        }
        let n = u32_dim(gate.len(), "SwiGLU length")?;
        self.one_shot(gpu, gate, up, |rec, gb, ub, yb| self.encode_swiglu(rec, gb, ub, yb, n))
            .await
    }

    /// One-shot [`Elementwise::encode_swiglu_rows`]: `gate_up` holds rows of `width` gate values then `width` up
    /// values.
    pub async fn swiglu_rows(&self, gpu: &Gpu, gate_up: &[f32], width: usize) -> Result<Vec<f32>> {
        if width == 0 || !gate_up.len().is_multiple_of(2 * width) {
            return Err(LoomError::InvalidInput(format!(
                "SwiGLU rows: {} values do not split into rows of 2 × {width}",
                gate_up.len()
            )));
        }
        let rows = u32_dim(gate_up.len() / (2 * width), "SwiGLU rows")?;
        let width = u32_dim(width, "SwiGLU width")?;
        let mut y = self
            .one_shot(gpu, gate_up, &[0.0], |rec, gb, _, yb| {
                self.encode_swiglu_rows(rec, gb, yb, rows, width)
            })
            .await?;
        y.truncate(gate_up.len() / 2);
        Ok(y)
    }

    async fn one_shot(
        &self,
        gpu: &Gpu,
        a: &[f32],
        b: &[f32],
        record: impl FnOnce(&mut Recorder, &wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer) -> Result<()>,
    ) -> Result<Vec<f32>> {
        let ab = storage_f32(gpu, "a", a, a.len()).await?;
        let bb = storage_f32(gpu, "b", b, b.len()).await?;
        let yb = gpu.output("y", 4 * a.len() as u64).await?;
        let mut rec = Recorder::new(gpu);
        record(&mut rec, &ab, &bb, &yb)?;
        rec.submit();
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(a.len());
        Ok(out)
    }
}

fn check_nb(nb: u32) -> Result<()> {
    if nb == 0 {
        return Err(LoomError::InvalidInput("add: an empty b row".into()));
    }
    Ok(())
}

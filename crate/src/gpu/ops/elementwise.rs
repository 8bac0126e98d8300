//! Host for `shaders/elementwise.wgsl`: residual and bias adds, activations, SwiGLU's `silu(gate)·up` product, and
//! scaling in place (a Parallel layer's `avg`).
//! CPU twins: Residual (`x + skip` in f32, so the add is exact), `crate::cpu::activate`, and the SwiGLU layer's inner
//! product `f32(g·σ(g)·u)` (f64 there, f32 here).

use std::sync::Arc;

use super::kernel::{dispatch, grid_for, storage_f32, u32_dim};
use super::{Pointwise, Rows, ACTIVATION_WGSL};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ELEMENTWISE_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/elementwise.wgsl"));
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

    /// Records `y[i] = a[i] + b[i % nb]` over the `n` values of `a` (each view packed; `b` of `nb` values, `nb`
    /// dividing `n`): a residual add (`nb = n`) or a broadcast bias row.
    pub fn encode_add(&self, rec: &mut Recorder, a: Rows, b: Rows, y: Rows) -> Result<()> {
        let n = a.flat("add")?;
        same_len("add", n, &y)?;
        let nb = b.flat("add")?;
        if n == 0 {
            return Ok(());
        }
        check_nb(n, nb)?;
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "add")?;
        dispatch(
            rec,
            &self.add,
            &[n, nb],
            &[(1, a.buffer), (2, b.buffer), (3, y.buffer)],
            g,
        );
        Ok(())
    }

    /// Records `y[i] += b[i % nb]` (a bias row after a matvec, or a residual add in place).
    pub fn encode_add_inplace(&self, rec: &mut Recorder, y: Rows, b: Rows) -> Result<()> {
        let n = y.flat("add")?;
        let nb = b.flat("add")?;
        if n == 0 {
            return Ok(());
        }
        check_nb(n, nb)?;
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "add")?;
        dispatch(rec, &self.add_inplace, &[n, nb], &[(2, b.buffer), (3, y.buffer)], g);
        Ok(())
    }

    /// Records `y[i] = act(x[i])`.
    pub fn encode_act(&self, rec: &mut Recorder, x: Rows, y: Rows, act: Pointwise) -> Result<()> {
        let n = x.flat("activation")?;
        same_len("activation", n, &y)?;
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "activation")?;
        dispatch(rec, &self.act, &[n, 1, act.id()], &[(1, x.buffer), (3, y.buffer)], g);
        Ok(())
    }

    /// Records `y[i] = silu(gate[i]) · up[i]`.
    pub fn encode_swiglu(&self, rec: &mut Recorder, gate: Rows, up: Rows, y: Rows) -> Result<()> {
        self.encode_glu(rec, gate, up, y, Pointwise::Silu)
    }

    /// Records `y[i] = act(gate[i]) · up[i]`: SwiGLU with silu, GeGLU with (tanh) GELU. CPU twins:
    /// `cpu::ops::silu_mul`, `cpu::ops::gelu_tanh_mul`.
    pub fn encode_glu(&self, rec: &mut Recorder, gate: Rows, up: Rows, y: Rows, act: Pointwise) -> Result<()> {
        let n = gate.flat("SwiGLU product")?;
        same_len("SwiGLU product", n, &up)?;
        same_len("SwiGLU product", n, &y)?;
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "SwiGLU product")?;
        let buffers = [(1, gate.buffer), (2, up.buffer), (3, y.buffer)];
        dispatch(rec, &self.swiglu, &[n, 1, act.id()], &buffers, g);
        Ok(())
    }

    /// Records SwiGLU's product from rows holding gate and up side by side (each row `width` gate values then
    /// `width` up values: a fused gate|up matvec's output) into `y` (rows of `width`).
    pub fn encode_swiglu_rows(&self, rec: &mut Recorder, gate_up: Rows, y: Rows) -> Result<()> {
        self.encode_glu_rows(rec, gate_up, y, Pointwise::Silu)
    }

    /// [`Elementwise::encode_glu`] from rows holding gate and up side by side, as
    /// [`Elementwise::encode_swiglu_rows`].
    pub fn encode_glu_rows(&self, rec: &mut Recorder, gate_up: Rows, y: Rows, act: Pointwise) -> Result<()> {
        gate_up.flat("SwiGLU product")?;
        let n = y.flat("SwiGLU product")?;
        if gate_up.rows != y.rows || u64::from(gate_up.cols) != 2 * u64::from(y.cols) {
            return Err(LoomError::InvalidInput(format!("SwiGLU product of {gate_up} into {y}")));
        }
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "SwiGLU product")?;
        let buffers = [(1, gate_up.buffer), (3, y.buffer)];
        dispatch(rec, &self.swiglu_rows, &[n, y.cols, act.id()], &buffers, g);
        Ok(())
    }

    /// Records `y[i] *= factor` (f32; Loom's Parallel `avg` multiplies by a float64 `1/n`).
    pub fn encode_scale(&self, rec: &mut Recorder, y: Rows, factor: f32) -> Result<()> {
        let n = y.flat("scale")?;
        if n == 0 {
            return Ok(());
        }
        let g = grid_for(rec.gpu(), u64::from(n), LANES, "scale")?;
        dispatch(rec, &self.scale, &[n, 1, 0, factor.to_bits()], &[(3, y.buffer)], g);
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
        self.one_shot(gpu, a, b, |rec, ab, bb, yb| {
            self.encode_add(rec, Rows::new(ab, 1, n), Rows::new(bb, 1, nb), Rows::new(yb, 1, n))
        })
        .await
    }

    /// One-shot `act(x)`.
    pub async fn activate(&self, gpu: &Gpu, x: &[f32], act: Pointwise) -> Result<Vec<f32>> {
        let n = u32_dim(x.len(), "activation length")?;
        self.one_shot(gpu, x, &[], |rec, xb, _, yb| {
            self.encode_act(rec, Rows::new(xb, 1, n), Rows::new(yb, 1, n), act)
        })
        .await
    }

    /// One-shot `silu(gate) · up`.
    pub async fn swiglu(&self, gpu: &Gpu, gate: &[f32], up: &[f32]) -> Result<Vec<f32>> {
        self.glu(gpu, gate, up, Pointwise::Silu).await
    }

    /// One-shot [`Elementwise::encode_glu`].
    pub async fn glu(&self, gpu: &Gpu, gate: &[f32], up: &[f32], act: Pointwise) -> Result<Vec<f32>> {
        if gate.len() != up.len() {
            return Err(LoomError::InvalidInput(format!(
                "SwiGLU product: {} gate values, {} up values",
                gate.len(),
                up.len()
            )));
        }
        let n = u32_dim(gate.len(), "SwiGLU length")?;
        self.one_shot(gpu, gate, up, |rec, gb, ub, yb| {
            let view = |b| Rows::new(b, 1, n);
            self.encode_glu(rec, view(gb), view(ub), view(yb), act)
        })
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
        let cols = u32_dim(2 * width, "SwiGLU row")?;
        let width = u32_dim(width, "SwiGLU width")?;
        let mut y = self
            .one_shot(gpu, gate_up, &[0.0], |rec, gb, _, yb| {
                self.encode_swiglu_rows(rec, Rows::new(gb, rows, cols), Rows::new(yb, rows, width))
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

fn check_nb(n: u32, nb: u32) -> Result<()> {
    if nb == 0 || !n.is_multiple_of(nb) {
        return Err(LoomError::InvalidInput(format!(
            "add: {n} values do not split into rows of {nb}"
        )));
    }
    Ok(())
}

fn same_len(what: &str, n: u32, v: &Rows) -> Result<()> {
    if v.flat(what)? != n {
        return Err(LoomError::InvalidInput(format!("{what}: {n} values, then {v}")));
    }
    Ok(())
}

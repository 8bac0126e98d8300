//! Host for `shaders/softmax.wgsl`: softmax over rows, and the sparsemax/entmax variants. CPU twin: the Softmax
//! layer (`crate::cpu` softmax.rs), f32 with Go's f64 `exp` rounded to f32; the GPU's f32 `exp` differs by a few
//! ulp, and sparsemax finds its threshold by bisection where the CPU sorts (see the WGSL).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::tensor::{check_values, same_packed_shape};
use super::{Rows, REDUCE_WGSL};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const SOFTMAX_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/softmax.wgsl"));

/// The row softmax and sparsemax/entmax kernels.
pub struct Softmax {
    pipeline: Arc<wgpu::ComputePipeline>,
    sparse: Arc<wgpu::ComputePipeline>,
}

/// Which kernel a row runs, with its parameter.
#[derive(Clone, Copy)]
pub enum SoftmaxVariant {
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

    /// Records `y = variant(x)` over each row of `x` (packed) into `y` (the same shape).
    pub fn encode(&self, rec: &mut Recorder, x: Rows, y: Rows, variant: SoftmaxVariant) -> Result<()> {
        let (rows, n) = same_packed_shape("softmax", &x, &y)?;
        self.record(rec, x.buffer, y.buffer, rows, n, n, variant)
    }

    /// `rows` rows starting every `n` values, the last holding `last` values.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &self,
        rec: &mut Recorder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        rows: u32,
        n: u32,
        last: u32,
        variant: SoftmaxVariant,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if rows == 0 || n == 0 {
            return Ok(());
        }
        let values = u64::from(rows - 1) * u64::from(n) + u64::from(last);
        check_values("softmax input", x, values)?;
        check_values("softmax output", y, values)?;
        let g = grid(gpu, u64::from(rows), "softmax rows")?;
        let (pipeline, temperature, w, entmax) = match variant {
            SoftmaxVariant::Softmax(t) => (&self.pipeline, t, 0.0, 0),
            SoftmaxVariant::Sparsemax => (&self.sparse, 1.0, 0.0, 0),
            SoftmaxVariant::Entmax(w) => (&self.sparse, 1.0, w, 1),
        };
        let words = [rows, n, temperature.to_bits(), last, w.to_bits(), entmax];
        dispatch(rec, pipeline, &words, &[(1, x), (2, y)], g);
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
        let mut rec = Recorder::new(gpu);
        let n = u32_dim(n, "softmax row")?;
        let variant = SoftmaxVariant::Softmax(temperature);
        self.encode(&mut rec, Rows::new(&xb, rows, n), Rows::new(&yb, rows, n), variant)?;
        rec.submit();
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(x.len());
        Ok(out)
    }
}

//! Host for `shaders/argmax.wgsl`: the index of each row's largest value, for greedy decoding. Its CPU twin is
//! [`first_argmax`]; both give the same index for every input (no arithmetic, only comparisons).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::Rows;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ARGMAX_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/argmax.wgsl"));

/// The CPU twin: the first index of the largest value, compared strictly from −∞ (NaN never wins; a row of
/// −∞/NaN, or an empty one, gives 0).
pub fn first_argmax(row: &[f32]) -> u32 {
    let (mut best, mut idx) = (f32::NEG_INFINITY, 0);
    for (i, v) in row.iter().enumerate() {
        if *v > best {
            best = *v;
            idx = i as u32;
        }
    }
    idx
}

/// The argmax kernel.
pub struct Argmax {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl Argmax {
    pub fn new(gpu: &Gpu) -> Result<Argmax> {
        Ok(Argmax {
            pipeline: gpu.pipeline("argmax_rows", ARGMAX_WGSL, "argmax")?,
        })
    }

    /// Records `out[r] = argmax(row r of x)` (u32) for every row of `x` (packed) into `out` (one value a row).
    pub fn encode(&self, rec: &mut Recorder, x: Rows, out: Rows) -> Result<()> {
        x.flat("argmax input")?;
        if out.flat("argmax output")? != x.rows {
            return Err(LoomError::InvalidInput(format!(
                "argmax of {} rows into {} values",
                x.rows,
                out.len()
            )));
        }
        if x.rows == 0 {
            return Ok(());
        }
        let g = grid(rec.gpu(), u64::from(x.rows), "argmax rows")?;
        let buffers = [(1, x.buffer), (2, out.buffer)];
        dispatch(rec, &self.pipeline, &[x.rows, x.cols], &buffers, g);
        Ok(())
    }

    /// One-shot argmax of `x` in rows of `n` values.
    pub async fn run(&self, gpu: &Gpu, x: &[f32], n: usize) -> Result<Vec<u32>> {
        if n == 0 || !x.len().is_multiple_of(n) {
            return Err(LoomError::InvalidInput(format!(
                "argmax: {} values do not split into rows of {n}",
                x.len()
            )));
        }
        check_binding(gpu, "argmax input", 4 * x.len() as u64)?;
        let rows = x.len() / n;
        let xb = storage_f32(gpu, "argmax x", x, x.len()).await?;
        let ob = gpu.output("argmax out", 4 * rows as u64).await?;
        let mut rec = Recorder::new(gpu);
        let rows = u32_dim(rows, "argmax rows")?;
        let xr = Rows::new(&xb, rows, u32_dim(n, "argmax row")?);
        self.encode(&mut rec, xr, Rows::new(&ob, rows, 1))?;
        rec.submit();
        let mut out: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&ob).await?);
        out.truncate(rows as usize);
        Ok(out)
    }
}

//! Host for `shaders/argmax.wgsl`: the index of each row's largest value, for greedy decoding. Its CPU twin is
//! [`first_argmax`]; both give the same index for every input (no arithmetic, only comparisons).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ARGMAX_WGSL: &str = include_str!("../../../../shaders/argmax.wgsl");

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

    /// Records `out[r] = argmax(x[r·n .. (r+1)·n])` (u32) for `rows` rows.
    pub fn encode(&self, rec: &mut Recorder, x: &wgpu::Buffer, out: &wgpu::Buffer, rows: u32, n: u32) -> Result<()> {
        let gpu = rec.gpu();
        if rows == 0 {
            return Ok(());
        }
        let g = grid(gpu, u64::from(rows), "argmax rows")?;
        dispatch(rec, &self.pipeline, &[rows, n], &[(1, x), (2, out)], g);
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
        self.encode(
            &mut rec,
            &xb,
            &ob,
            u32_dim(rows, "argmax rows")?,
            u32_dim(n, "argmax row")?,
        )?;
        rec.submit();
        let mut out: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&ob).await?);
        out.truncate(rows);
        Ok(out)
    }
}

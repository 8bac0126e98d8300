//! Host for `shaders/argmax.wgsl`: the index of each row's largest value, for greedy decoding. Its CPU twin is
//! [`first_argmax`]; both give the same index for every input (no arithmetic, only comparisons).

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid, storage_f32, u32_dim};
use super::{GpuTensor, Rows};
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

/// Values per workgroup of the first of a long row's two dispatches (`SLICE` in `shaders/argmax.wgsl`).
pub const ARGMAX_SLICE: usize = 2048;
/// A row longer than this runs in slices and a final pick (two dispatches) instead of one workgroup.
const ONE_WORKGROUP_MAX: usize = 2 * ARGMAX_SLICE;

/// The argmax kernels.
pub struct Argmax {
    pipeline: Arc<wgpu::ComputePipeline>,
    slices: Arc<wgpu::ComputePipeline>,
    last: Arc<wgpu::ComputePipeline>,
}

impl Argmax {
    pub fn new(gpu: &Gpu) -> Result<Argmax> {
        Ok(Argmax {
            pipeline: gpu.pipeline("argmax_rows", ARGMAX_WGSL, "argmax")?,
            slices: gpu.pipeline("argmax_slices", ARGMAX_WGSL, "argmax_slices")?,
            last: gpu.pipeline("argmax_final", ARGMAX_WGSL, "argmax_final")?,
        })
    }

    /// Whether one row of `n` values is picked in slices and a final pick (on a grid of at least 65,535
    /// workgroups, WebGPU's least).
    pub fn in_slices(n: usize) -> bool {
        n > ONE_WORKGROUP_MAX && n.div_ceil(ARGMAX_SLICE) <= 65_535
    }

    /// Records `out[r] = argmax(row r of x)` (u32) for every row of `x` (packed) into `out` (one value a row): a
    /// workgroup a row, or one long row (a decode step's logits) in slices and a final pick.
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
        if x.rows == 1 && Argmax::in_slices(x.cols as usize) {
            let slices = x.cols.div_ceil(ARGMAX_SLICE as u32);
            let part = GpuTensor::scratch(rec, vec![slices as usize, 3])?;
            let words = [1, x.cols, slices];
            dispatch(
                rec,
                &self.slices,
                &words,
                &[(1, x.buffer), (3, &part.buffer)],
                (slices, 1),
            );
            dispatch(rec, &self.last, &words, &[(2, out.buffer), (3, &part.buffer)], (1, 1));
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

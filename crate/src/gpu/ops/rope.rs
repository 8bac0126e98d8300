//! Host for `shaders/rope.wgsl`: RoPE in place, rotate-half or adjacent pairs. CPU twin: the RoPE step of `crate::cpu` attention.rs
//! (f64 there; here an f32 rotation by cos/sin computed in f64 on the host and rounded once, see [`rope_table`]).

use std::sync::Arc;

use super::kernel::{dispatch, grid_for, storage_f32, u32_dim};
use super::tensor::check_values;
use super::{GpuTensor, Rows};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ROPE_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/rope.wgsl"));
const LANES: u32 = 64;

/// `(cos, sin)` of angle `pos / θ^(2j/hd)` for `tokens` consecutive positions from `pos0` and `j < hd/2`, as
/// `[tokens][hd/2][2]` f32 (computed in f64, as the CPU does, then rounded).
pub fn rope_table(theta: f64, head_dim: usize, pos0: usize, tokens: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let denom: Vec<f64> = (0..half)
        .map(|j| theta.powf((2 * j) as f64 / head_dim as f64))
        .collect();
    let mut out = Vec::with_capacity(2 * half * tokens);
    for t in 0..tokens {
        let pos = (pos0 + t) as f64;
        for d in &denom {
            let (s, c) = (pos / d).sin_cos();
            out.push(c as f32);
            out.push(s as f32);
        }
    }
    out
}

/// The RoPE kernel.
pub struct Rope {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl Rope {
    pub fn new(gpu: &Gpu) -> Result<Rope> {
        Ok(Rope {
            pipeline: gpu.pipeline("rope_rotate_half", ROPE_WGSL, "rope")?,
        })
    }

    /// A storage buffer holding [`rope_table`] for `tokens` positions from `pos0`, written ahead of the next submit
    /// (from an arena, the same buffer each forward of that shape; a decode step rewrites it).
    pub fn table(
        &self,
        rec: &mut Recorder,
        theta: f64,
        head_dim: usize,
        pos0: usize,
        tokens: usize,
    ) -> Result<GpuTensor> {
        let table = rope_table(theta, head_dim, pos0, tokens);
        let t = GpuTensor::scratch(rec, vec![tokens, head_dim / 2 * 2])?;
        t.write(rec.gpu(), &table)?;
        Ok(t)
    }

    /// Records the rotation of every head of `head_dim` in each row of `x` (rows of whole heads, from column 0 of
    /// their buffer's rows, which may be strided), row `r` by row `r` of `table` (`[rows of x][head_dim / 2]`
    /// (cos, sin)). (The LLM engine's attention turns its q and k itself: [`crate::gpu::RopeIn`].)
    pub fn encode(&self, rec: &mut Recorder, x: Rows, table: &wgpu::Buffer, head_dim: u32) -> Result<()> {
        x.check("RoPE")?;
        if head_dim == 0 || !x.cols.is_multiple_of(head_dim) || x.col0 != 0 {
            return Err(LoomError::InvalidInput(format!("RoPE of heads of {head_dim} over {x}")));
        }
        let (heads, half) = (x.cols / head_dim, head_dim / 2);
        let pairs_total = u64::from(x.rows) * u64::from(heads) * u64::from(half);
        if pairs_total == 0 {
            return Ok(());
        }
        check_values("RoPE table", table, 2 * u64::from(x.rows) * u64::from(half))?;
        u32_dim(pairs_total as usize, "RoPE pairs")?;
        let g = grid_for(rec.gpu(), pairs_total, LANES, "RoPE")?;
        let words = [x.rows, heads, head_dim, x.stride, x.row0];
        dispatch(rec, &self.pipeline, &words, &[(1, x.buffer), (2, table)], g);
        Ok(())
    }

    /// One-shot RoPE of `x`, rows of `heads × head_dim` at positions `pos0..`.
    pub async fn run(
        &self,
        gpu: &Gpu,
        x: &[f32],
        heads: usize,
        head_dim: usize,
        theta: f64,
        pos0: usize,
    ) -> Result<Vec<f32>> {
        let stride = heads * head_dim;
        if stride == 0 || !x.len().is_multiple_of(stride) {
            return Err(LoomError::InvalidInput(format!(
                "RoPE: {} values do not split into rows of {heads}×{head_dim}",
                x.len()
            )));
        }
        let tokens = x.len() / stride;
        let xb = storage_f32(gpu, "rope x", x, x.len()).await?;
        let mut rec = Recorder::new(gpu);
        let table = self.table(&mut rec, theta, head_dim, pos0, tokens)?;
        let xr = Rows::new(&xb, u32_dim(tokens, "RoPE tokens")?, u32_dim(stride, "RoPE row")?);
        self.encode(&mut rec, xr, &table.buffer, u32_dim(head_dim, "head_dim")?)?;
        rec.submit();
        let mut out = gpu.read_f32(&xb).await?;
        out.truncate(x.len());
        Ok(out)
    }
}

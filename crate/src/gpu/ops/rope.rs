//! Host for `shaders/rope.wgsl`: RoPE in place, rotate-half or adjacent pairs. CPU twin: the RoPE step of `crate::cpu` attention.rs
//! (f64 there; here an f32 rotation by cos/sin computed in f64 on the host and rounded once, see [`rope_table`]).

use std::sync::Arc;

use super::kernel::{dispatch, grid_for, storage_f32, u32_dim};
use super::GpuTensor;
use crate::cpu::ops::RopePairs;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ROPE_WGSL: &str = include_str!("../../../../shaders/rope.wgsl");
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

/// Which rows of a buffer a RoPE dispatch turns: `tokens` rows from row `first`, each `stride` floats holding `heads`
/// heads of `head_dim`.
#[derive(Clone, Copy, Debug)]
pub struct RopeRows {
    pub tokens: u32,
    pub heads: u32,
    pub head_dim: u32,
    pub stride: u32,
    pub first: u32,
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

    /// Records the rotation of `heads` heads of `head_dim` in each of `tokens` rows of `x`: row `first + t` starts at
    /// `(first + t)·stride` and turns by row `t` of `table`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        rec: &mut Recorder,
        x: &wgpu::Buffer,
        table: &wgpu::Buffer,
        tokens: u32,
        heads: u32,
        head_dim: u32,
        stride: u32,
        first: u32,
    ) -> Result<()> {
        let rows = RopeRows {
            tokens,
            heads,
            head_dim,
            stride,
            first,
        };
        self.encode_pairs(rec, x, table, rows, head_dim / 2, RopePairs::Half)
    }

    /// Records the rotation of the first `rot` pairs of every head of `rows`, paired as `pairs` says (a decoder's
    /// RoPE: CPU twin [`crate::cpu::ops::rope`]); `table` holds `[tokens][rot]` (cos, sin).
    #[allow(clippy::too_many_arguments)]
    pub fn encode_pairs(
        &self,
        rec: &mut Recorder,
        x: &wgpu::Buffer,
        table: &wgpu::Buffer,
        rows: RopeRows,
        rot: u32,
        pairs: RopePairs,
    ) -> Result<()> {
        let gpu = rec.gpu();
        let RopeRows {
            tokens,
            heads,
            head_dim,
            stride,
            first,
        } = rows;
        let pairs_total = u64::from(tokens) * u64::from(heads) * u64::from(rot);
        if pairs_total == 0 {
            return Ok(());
        }
        if u64::from(heads) * u64::from(head_dim) > u64::from(stride) || 2 * rot > head_dim {
            return Err(LoomError::InvalidInput(format!(
                "RoPE: {heads} heads of {head_dim} ({rot} pairs) do not fit rows of {stride}"
            )));
        }
        u32_dim(pairs_total as usize, "RoPE pairs")?;
        let g = grid_for(gpu, pairs_total, LANES, "RoPE")?;
        let adjacent = u32::from(pairs == RopePairs::Adjacent);
        let words = [tokens, heads, head_dim, stride, first, rot, adjacent];
        dispatch(rec, &self.pipeline, &words, &[(1, x), (2, table)], g);
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
        self.encode(
            &mut rec,
            &xb,
            &table.buffer,
            u32_dim(tokens, "RoPE tokens")?,
            u32_dim(heads, "RoPE heads")?,
            u32_dim(head_dim, "head_dim")?,
            u32_dim(stride, "RoPE row")?,
            0,
        )?;
        rec.submit();
        let mut out = gpu.read_f32(&xb).await?;
        out.truncate(x.len());
        Ok(out)
    }
}

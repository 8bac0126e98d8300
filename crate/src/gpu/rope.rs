//! Host for `shaders/rope.wgsl`: rotate-half RoPE in place. CPU twin: the RoPE step of `crate::cpu` attention.rs
//! (f64 there; here an f32 rotation by cos/sin computed in f64 on the host and rounded once, see [`rope_table`]).

use std::sync::Arc;

use super::kernel::{dispatch, grid_for, storage_f32, u32_dim};
use super::{Gpu, GpuTensor};
use crate::error::{LoomError, Result};

const ROPE_WGSL: &str = include_str!("../../../shaders/rope.wgsl");
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
    /// (under a plan, the same buffer each forward of that shape; a decode step rewrites it).
    pub fn table(&self, gpu: &Gpu, theta: f64, head_dim: usize, pos0: usize, tokens: usize) -> Result<GpuTensor> {
        let table = rope_table(theta, head_dim, pos0, tokens);
        let t = GpuTensor::scratch(gpu, vec![tokens, head_dim / 2 * 2])?;
        t.write(gpu, &table)?;
        Ok(t)
    }

    /// Records the rotation of `heads` heads of `head_dim` in each of `tokens` rows of `x`: row `first + t` starts at
    /// `(first + t)·stride` and turns by row `t` of `table`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        table: &wgpu::Buffer,
        tokens: u32,
        heads: u32,
        head_dim: u32,
        stride: u32,
        first: u32,
    ) -> Result<()> {
        let pairs = u64::from(tokens) * u64::from(heads) * u64::from(head_dim / 2);
        if pairs == 0 {
            return Ok(());
        }
        if u64::from(heads) * u64::from(head_dim) > u64::from(stride) {
            return Err(LoomError::InvalidInput(format!(
                "RoPE: {heads} heads of {head_dim} do not fit rows of {stride}"
            )));
        }
        u32_dim(pairs as usize, "RoPE pairs")?;
        let g = grid_for(gpu, pairs, LANES, "RoPE")?;
        let words = [tokens, heads, head_dim, stride, first];
        dispatch(gpu, encoder, &self.pipeline, &words, &[(1, x), (2, table)], g);
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
        let table = self.table(gpu, theta, head_dim, pos0, tokens)?;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.encode(
            gpu,
            &mut encoder,
            &xb,
            &table.buffer,
            u32_dim(tokens, "RoPE tokens")?,
            u32_dim(heads, "RoPE heads")?,
            u32_dim(head_dim, "head_dim")?,
            u32_dim(stride, "RoPE row")?,
            0,
        )?;
        gpu.queue.submit([encoder.finish()]);
        let mut out = gpu.read_f32(&xb).await?;
        out.truncate(x.len());
        Ok(out)
    }
}

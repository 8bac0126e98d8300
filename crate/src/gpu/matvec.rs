//! Host for `shaders/matvec.wgsl`: `y = act(W·x)` per batch row. CPU twin: `crate::cpu` Dense.

use std::sync::Arc;

use super::{activation_id, Gpu, ACTIVATION_WGSL};
use crate::error::{LoomError, Result};
use crate::network::Activation;

const MATVEC_WGSL: &str = include_str!("../../../shaders/matvec.wgsl");

/// A matrix-vector kernel for one weight encoding.
pub struct MatVec {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl MatVec {
    /// The float32 kernel.
    pub fn f32(gpu: &Gpu) -> Result<MatVec> {
        let source = format!("{ACTIVATION_WGSL}\n{MATVEC_WGSL}");
        Ok(MatVec {
            pipeline: gpu.pipeline("matvec_f32", &source, "matvec_f32")?,
        })
    }

    /// Records `y = act(W·x)` for `batch` rows into `encoder`. `w` holds `[n_out][n_in]` weights.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n_in: u32,
        n_out: u32,
        batch: u32,
        act: Activation,
    ) -> Result<()> {
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if n_out > max || batch > max {
            return Err(LoomError::Unsupported(format!(
                "matvec of {n_out} rows × batch {batch} exceeds {max} workgroups per dimension"
            )));
        }
        let params = gpu.uniform(
            "matvec params",
            bytemuck::cast_slice(&[n_in, n_out, activation_id(act), 0u32]),
        );
        let bind = gpu.bind(&self.pipeline, &[&params, x, w, y]);
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(n_out, batch, 1);
        Ok(())
    }

    /// One-shot `y = act(W·x)`: uploads, runs and reads back (tests and tools; a forward pass keeps its buffers).
    pub async fn run(
        &self,
        gpu: &Gpu,
        x: &[f32],
        w_bytes: &[u8],
        n_in: usize,
        n_out: usize,
        act: Activation,
    ) -> Result<Vec<f32>> {
        let batch = x.len() / n_in.max(1);
        let xb = gpu.upload("x", bytemuck::cast_slice(x)).await?;
        let wb = gpu.upload("w", w_bytes).await?;
        let yb = gpu.output("y", (4 * batch * n_out) as u64).await?;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.encode(
            gpu,
            &mut encoder,
            &xb,
            &wb,
            &yb,
            n_in as u32,
            n_out as u32,
            batch as u32,
            act,
        )?;
        gpu.queue.submit([encoder.finish()]);
        let mut out = gpu.read_f32(&yb).await?;
        out.truncate(batch * n_out);
        Ok(out)
    }
}

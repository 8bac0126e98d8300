//! Plumbing shared by the op-family hosts (norm, rope, attention, softmax, elementwise, embedding, argmax):
//! uniform parameter blocks, dispatch grids that respect the per-dimension workgroup limit, binding-size checks and
//! scratch buffers.
//!
//! Every kernel binds its parameters at binding 0 and its buffers at the binding numbers its WGSL declares; one
//! [`dispatch`] records one compute pass. Uniform blocks and bind groups are small and made per dispatch (a forward
//! pass with many layers still submits once); weights, KV caches and activations live in buffers the hosts create once.

use super::Gpu;
use crate::error::{LoomError, Result};

/// Words every parameter block is padded to: at least the largest `Params` struct of the kernels (48 bytes), so
/// that trailing padding fields may be left out.
const MIN_PARAM_WORDS: usize = 16;

/// A uniform parameter block: 32-bit words (f32 values as their bits), zero-padded to a whole 16 bytes and to at
/// least [`MIN_PARAM_WORDS`].
pub(crate) fn params(words: &[u32]) -> Vec<u8> {
    let mut w = words.to_vec();
    w.resize(words.len().next_multiple_of(4).max(MIN_PARAM_WORDS), 0);
    bytemuck::cast_slice(&w).to_vec()
}

/// `groups` workgroups as an `(x, y)` grid with neither side over the device's per-dimension limit. Kernels recover
/// the flat workgroup id as `wg.y * num_workgroups.x + wg.x` and ignore ids past their work.
pub(crate) fn grid(gpu: &Gpu, groups: u64, what: &str) -> Result<(u32, u32)> {
    let max = u64::from(gpu.limits.max_compute_workgroups_per_dimension.max(1));
    if groups <= max {
        return Ok((groups.max(1) as u32, 1));
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(LoomError::Unsupported(format!(
            "{what}: {groups} workgroups exceed the device's {max}×{max} grid"
        )));
    }
    Ok((groups.div_ceil(y) as u32, y as u32))
}

/// The grid for one thread per element, `lanes` threads per workgroup.
pub(crate) fn grid_for(gpu: &Gpu, elements: u64, lanes: u32, what: &str) -> Result<(u32, u32)> {
    grid(gpu, elements.div_ceil(u64::from(lanes)), what)
}

/// Refuses a buffer the kernels could not bind whole: over `max_storage_buffer_binding_size` (128 MiB on lavapipe,
/// 1 GiB in Chromium) or over the largest buffer.
pub(crate) fn check_binding(gpu: &Gpu, what: &str, bytes: u64) -> Result<()> {
    let max = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    if bytes > max {
        return Err(LoomError::GpuOutOfMemory(format!(
            "{what}: {bytes} bytes exceed the device's largest storage binding ({max} bytes)"
        )));
    }
    Ok(())
}

/// Records one dispatch of `pipeline` over `groups` workgroups: `words` as the uniform at binding 0, each
/// `(binding, buffer)` at its binding.
pub(crate) fn dispatch(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &wgpu::ComputePipeline,
    words: &[u32],
    buffers: &[(u32, &wgpu::Buffer)],
    groups: (u32, u32),
) {
    let uniform = gpu.uniform("params", &params(words));
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    entries.extend(buffers.iter().map(|(binding, b)| wgpu::BindGroupEntry {
        binding: *binding,
        resource: b.as_entire_binding(),
    }));
    let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut pass = encoder.begin_compute_pass(&Default::default());
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, &bind, &[]);
    pass.dispatch_workgroups(groups.0, groups.1, 1);
}

/// A `u32` kernel dimension, refusing what does not fit.
pub(crate) fn u32_dim(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| LoomError::Unsupported(format!("{what} {v} does not fit a GPU index")))
}

/// A storage buffer of `len` f32 values holding `data` (zeros past it), checked against the binding limit.
pub(crate) async fn storage_f32(gpu: &Gpu, label: &str, data: &[f32], len: usize) -> Result<wgpu::Buffer> {
    check_binding(gpu, label, 4 * len.max(data.len()) as u64)?;
    if data.len() >= len {
        return gpu.upload(label, bytemuck::cast_slice(data)).await;
    }
    let mut padded = data.to_vec();
    padded.resize(len, 0.0);
    gpu.upload(label, bytemuck::cast_slice(&padded)).await
}

//! Plumbing shared by the op-family hosts (norm, rope, attention, softmax, elementwise, embedding, argmax):
//! uniform parameter blocks, dispatch grids that respect the per-dimension workgroup limit, binding-size checks and
//! scratch buffers.
//!
//! Every kernel binds its parameters at binding 0 and its buffers at the binding numbers its WGSL declares; one
//! [`dispatch`] records one compute pass.
//!
//! Plans: `GpuModel` encodes each layer inside [`Gpu::with_plan`], handing it that layer's [`Plan`] for the input
//! shape. While a plan is active, [`dispatch`] takes its n-th bind group (with its uniform block) from the plan and
//! [`GpuTensor::scratch`](super::GpuTensor::scratch) its n-th output buffer, creating them only the first time, or
//! when what the layer binds has changed. A uniform block whose words changed (a decode step's position) is
//! rewritten in place with `queue.write_buffer`, which the queue orders before the submit that uses it; a plan is
//! used once per submit (a layer runs once per forward), so no rewrite overtakes a pending use. A second forward on
//! the same shape thus creates no buffers and no bind groups. Without a plan (one-shot runs, tests) everything is
//! created per call.

use super::GpuTensor;
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::{lock, Gpu};

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
    dispatch_3d(gpu, encoder, pipeline, words, buffers, (groups.0, groups.1, 1));
}

/// [`dispatch`] over a 3-D grid of workgroups.
pub(crate) fn dispatch_3d(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &wgpu::ComputePipeline,
    words: &[u32],
    buffers: &[(u32, &wgpu::Buffer)],
    groups: (u32, u32, u32),
) {
    let group = gpu.bind_group(pipeline, &params(words), buffers);
    let mut pass = encoder.begin_compute_pass(&Default::default());
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(groups.0, groups.1, groups.2);
}

/// What one layer's encode created, in the order it asked: bind groups with their uniform blocks, and outputs.
#[derive(Default)]
pub(crate) struct Plan {
    binds: Vec<Bound>,
    outputs: Vec<GpuTensor>,
}

/// A bind group and what it binds (the buffers are kept so that their identities stay unique while cached).
struct Bound {
    pipeline: wgpu::ComputePipeline,
    buffers: Vec<(u32, wgpu::Buffer)>,
    params: Vec<u8>,
    uniform: wgpu::Buffer,
    group: wgpu::BindGroup,
}

/// What an encode did under its plan.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PlanCounts {
    pub dispatches: u32,
    pub bind_groups: u32,
    /// Output and uniform buffers created.
    pub buffers: u32,
}

/// The active plan and how far the encode has drawn on it.
pub(crate) struct Recording {
    plan: Plan,
    next_bind: usize,
    next_output: usize,
    counts: PlanCounts,
}

impl Gpu {
    /// Runs `encode` with `plan` active (see the module docs). Returns its result, the plan as it now stands, and
    /// what it created. One encode at a time per device; `encode` must not call this again.
    pub(crate) fn with_plan<R>(&self, plan: Plan, encode: impl FnOnce() -> R) -> (R, Plan, PlanCounts) {
        let _one_at_a_time = lock(&self.encoding);
        *lock(&self.plan) = Some(Recording {
            plan,
            next_bind: 0,
            next_output: 0,
            counts: PlanCounts::default(),
        });
        let out = encode();
        let mut rec = lock(&self.plan).take().expect("installed above");
        // What this encode no longer asked for is stale.
        rec.plan.binds.truncate(rec.next_bind);
        rec.plan.outputs.truncate(rec.next_output);
        (out, rec.plan, rec.counts)
    }

    /// The bind group for one dispatch: the active plan's next one when it binds the same pipeline and buffers
    /// (its uniform rewritten if the words changed), else a new one.
    fn bind_group(
        &self,
        pipeline: &wgpu::ComputePipeline,
        params: &[u8],
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let mut slot = lock(&self.plan);
        let Some(rec) = slot.as_mut() else {
            return self.new_bind_group(pipeline, params, buffers).1;
        };
        rec.counts.dispatches += 1;
        let i = rec.next_bind;
        rec.next_bind += 1;
        if let Some(b) = rec.plan.binds.get_mut(i) {
            let same = b.pipeline == *pipeline
                && b.params.len() == params.len()
                && b.buffers.len() == buffers.len()
                && b.buffers.iter().zip(buffers).all(|((i, a), (j, b))| i == j && a == *b);
            if same {
                if b.params != params {
                    self.queue.write_buffer(&b.uniform, 0, params);
                    b.params = params.to_vec();
                }
                return b.group.clone();
            }
        }
        let (uniform, group) = self.new_bind_group(pipeline, params, buffers);
        rec.counts.bind_groups += 1;
        rec.counts.buffers += 1;
        let bound = Bound {
            pipeline: pipeline.clone(),
            buffers: buffers.iter().map(|(i, b)| (*i, (*b).clone())).collect(),
            params: params.to_vec(),
            uniform,
            group: group.clone(),
        };
        if i < rec.plan.binds.len() {
            rec.plan.binds[i] = bound;
        } else {
            rec.plan.binds.push(bound);
        }
        group
    }

    fn new_bind_group(
        &self,
        pipeline: &wgpu::ComputePipeline,
        params: &[u8],
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> (wgpu::Buffer, wgpu::BindGroup) {
        let uniform = self.uniform("params", params);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        entries.extend(buffers.iter().map(|(binding, b)| wgpu::BindGroupEntry {
            binding: *binding,
            resource: b.as_entire_binding(),
        }));
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        (uniform, group)
    }

    /// A storage buffer of `bytes` for a kernel output of `shape`: the active plan's next output when it has that
    /// shape, else a new one. A reused buffer holds the last forward's values.
    pub(crate) fn output_tensor(&self, shape: Vec<usize>, bytes: u64) -> GpuTensor {
        let mut slot = lock(&self.plan);
        let Some(rec) = slot.as_mut() else {
            return self.new_output(shape, bytes);
        };
        let i = rec.next_output;
        rec.next_output += 1;
        if let Some(t) = rec.plan.outputs.get(i).filter(|t| t.shape == shape) {
            return t.clone();
        }
        let t = self.new_output(shape, bytes);
        rec.counts.buffers += 1;
        if i < rec.plan.outputs.len() {
            rec.plan.outputs[i] = t.clone();
        } else {
            rec.plan.outputs.push(t.clone());
        }
        t
    }

    fn new_output(&self, shape: Vec<usize>, bytes: u64) -> GpuTensor {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("activation"),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        GpuTensor { buffer, shape }
    }
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

/// Runs one layer on its own (the hosts' `forward`, for tests and one-off calls): uploads `x`, records `encode`,
/// submits and reads the output back.
pub(crate) async fn run_once(
    gpu: &Gpu,
    x: &Tensor,
    encode: impl FnOnce(&mut wgpu::CommandEncoder, &GpuTensor) -> Result<GpuTensor>,
) -> Result<Tensor> {
    let xg = GpuTensor::upload(gpu, x).await?;
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    let y = encode(&mut encoder, &xg)?;
    gpu.queue.submit([encoder.finish()]);
    y.read(gpu).await
}

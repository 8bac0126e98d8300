//! Plumbing shared by the op-family hosts (norm, rope, attention, softmax, elementwise, embedding, argmax):
//! uniform parameter blocks, dispatch grids that respect the per-dimension workgroup limit, binding-size checks and
//! scratch buffers.
//!
//! Every kernel binds its parameters at binding 0 and its buffers at the binding numbers its WGSL declares; the
//! dispatches of a recording share one compute pass (wgpu puts the barriers between them), which a copy or a clear
//! ends; while profiling, each is a timed pass of its own.
//!
//! Recording: every op records into a [`Recorder`], the command encoder of one submit together with the [`Arena`]
//! (if any) that its bind groups, uniform blocks and outputs come from. An arena belongs to one shape of work (a
//! `GpuModel` layer for an input shape; the LLM engine's decode step, or a prefill chunk of one length): its
//! owner keeps it between forwards and hands it to the next recording of that shape. There, [`dispatch`] takes
//! the arena's n-th bind group and [`GpuTensor::scratch`](super::GpuTensor::scratch) its n-th output, creating
//! them only the first time, or when what the n-th dispatch binds has changed. Dispatches whose words are the same
//! share one uniform block (a decode step's attention dispatches, one per layer, all carry its position), so that
//! a step whose position moved rewrites one block with `queue.write_buffer` instead of one per layer (each write cost
//! wgpu several µs of host time). The queue orders a write before the next submit; an arena serves one recording
//! at a time, each block holding one value for the whole recording (which may be submitted in parts), so no
//! rewrite overtakes a pending use. A second forward of the same shape thus creates no buffers and no bind groups. A
//! recorder without an arena (one-shot runs, tests) creates everything per call.

use super::GpuTensor;
use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::{Count, Gpu};

/// Words every parameter block is padded to: at least the largest `Params` struct of the kernels (attention's 17
/// words, 80 bytes as a uniform), so that trailing fields a kernel does not read may be left out.
const MIN_PARAM_WORDS: usize = 20;

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
    rec: &mut Recorder,
    pipeline: &wgpu::ComputePipeline,
    words: &[u32],
    buffers: &[(u32, &wgpu::Buffer)],
    groups: (u32, u32),
) {
    dispatch_3d(rec, pipeline, words, buffers, (groups.0, groups.1, 1));
}

/// [`dispatch`] over a 3-D grid of workgroups.
pub(crate) fn dispatch_3d(
    rec: &mut Recorder,
    pipeline: &wgpu::ComputePipeline,
    words: &[u32],
    buffers: &[(u32, &wgpu::Buffer)],
    groups: (u32, u32, u32),
) {
    let group = rec.bind_group(pipeline, &params(words), buffers);
    if rec.gpu.is_broken(pipeline) {
        return;
    }
    rec.gpu.count(Count::Dispatches);
    if rec.gpu.profile_full() {
        rec.flush();
    }
    let Some((query_set, i)) = rec.gpu.pass_timestamps(pipeline) else {
        let pass = rec.pass();
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        return;
    };
    // Profiling: a pass of its own, timed at its start and end.
    let mut pass = rec.encoder().begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: None,
        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
            query_set: &query_set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        }),
    });
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(groups.0, groups.1, groups.2);
}

/// What the recordings of one shape of work created and keep: bind groups with their uniform blocks, and outputs,
/// in the order the ops asked for them (see the module docs).
#[derive(Default)]
pub struct Arena {
    binds: Vec<Bound>,
    /// The uniform blocks the bind groups bind, several groups sharing one whose words are the same.
    uniforms: Vec<Uniform>,
    outputs: Vec<GpuTensor>,
    /// The mappable buffer the recording's result is read back through.
    staging: Option<wgpu::Buffer>,
    next_bind: usize,
    next_output: usize,
    /// Counts recordings: a uniform block whose `claimed` is this recording holds its words for all of it.
    recording: u64,
}

/// A bind group and what it binds (the buffers are kept so that their identities stay unique while cached).
struct Bound {
    pipeline: wgpu::ComputePipeline,
    buffers: Vec<(u32, wgpu::Buffer)>,
    /// Index into the arena's uniform blocks.
    uniform: usize,
    group: wgpu::BindGroup,
}

/// A uniform parameter block, and the recording that last set (or kept) its words.
struct Uniform {
    params: Vec<u8>,
    buffer: wgpu::Buffer,
    claimed: u64,
}

impl Arena {
    /// The arena at the start of a recording: its n-th dispatch will find the n-th bind group.
    fn restart(mut self) -> Arena {
        self.next_bind = 0;
        self.next_output = 0;
        self.recording += 1;
        self
    }

    /// Keeps the first `binds` bind groups, the first `outputs` outputs and only the uniform blocks those groups
    /// bind.
    fn keep(&mut self, binds: usize, outputs: usize) {
        self.binds.truncate(binds);
        self.outputs.truncate(outputs);
        // Each kept block moves to its new index (once per recording: no copies of the words).
        let mut old: Vec<Option<Uniform>> = std::mem::take(&mut self.uniforms).into_iter().map(Some).collect();
        let mut at = vec![usize::MAX; old.len()];
        for b in &mut self.binds {
            if at[b.uniform] == usize::MAX {
                at[b.uniform] = self.uniforms.len();
                self.uniforms
                    .push(old[b.uniform].take().expect("each block moves once"));
            }
            b.uniform = at[b.uniform];
        }
    }
}

/// The command encoder of one submit, and the arena its ops draw on (see the module docs).
pub struct Recorder<'a> {
    gpu: &'a Gpu,
    /// Created on first use, so that a flush at the end leaves no empty encoder behind.
    encoder: Option<wgpu::CommandEncoder>,
    /// The compute pass the dispatches go into, one for all of them until a copy or the submit ends it: a pass per
    /// dispatch cost wgpu about 20 µs of host time each on an H200.
    pass: Option<wgpu::ComputePass<'static>>,
    arena: Option<Arena>,
}

impl<'a> Recorder<'a> {
    /// A recording that creates its bind groups and outputs as it goes.
    pub fn new(gpu: &'a Gpu) -> Recorder<'a> {
        Recorder {
            gpu,
            encoder: None,
            pass: None,
            arena: None,
        }
    }

    /// A recording that reuses what `arena` holds from the last recording of the same shape of work.
    pub fn with_arena(gpu: &'a Gpu, arena: Arena) -> Recorder<'a> {
        let mut rec = Recorder::new(gpu);
        rec.swap_arena(Some(arena));
        rec
    }

    /// Draws on `arena` from here on (a model switching between its layers' arenas), and hands back the one drawn
    /// on so far, without what the recording did not ask of it this time.
    pub fn swap_arena(&mut self, arena: Option<Arena>) -> Option<Arena> {
        let mut old = std::mem::replace(&mut self.arena, arena.map(Arena::restart));
        if let Some(old) = old.as_mut() {
            old.keep(old.next_bind, old.next_output);
        }
        old
    }

    pub fn gpu(&self) -> &'a Gpu {
        self.gpu
    }

    /// The command encoder, for what is not a dispatch (copies, clears). Ends the open compute pass (the encoder is
    /// locked while one is open); later dispatches open another.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        let device = &self.gpu.device;
        self.encoder
            .get_or_insert_with(|| device.create_command_encoder(&Default::default()))
    }

    /// The open compute pass, begun if there is none.
    fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        if self.pass.is_none() {
            let pass = self.encoder().begin_compute_pass(&Default::default()).forget_lifetime();
            self.pass = Some(pass);
        }
        self.pass.as_mut().expect("begun above")
    }

    /// Submits what is recorded so far; recording may go on (in a new encoder, made when first needed).
    pub fn flush(&mut self) {
        self.pass = None;
        if let Some(recorded) = self.encoder.take() {
            self.gpu.submit_encoder(recorded);
        }
    }

    /// Ends the recording and submits it.
    pub fn submit(mut self) {
        self.flush();
    }

    /// A mappable buffer of at least `size` bytes to read a result back through: the arena's, kept from the last
    /// recording (made or grown here when needed), or a new one without an arena.
    pub(crate) fn staging(&mut self, size: u64) -> wgpu::Buffer {
        let gpu = self.gpu;
        let create = || {
            gpu.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let Some(arena) = self.arena.as_mut() else {
            return create();
        };
        match &arena.staging {
            Some(b) if b.size() >= size => b.clone(),
            _ => arena.staging.insert(create()).clone(),
        }
    }

    /// The bind group for one dispatch: the arena's next one when it binds the same pipeline and buffers and its
    /// uniform block can hold `params` for this recording (rewritten if the words changed and no other dispatch of
    /// this recording has used it), else a new one, on a block of this recording with the same words if there is
    /// one.
    fn bind_group(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        params: &[u8],
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let gpu = self.gpu;
        let Some(arena) = self.arena.as_mut() else {
            let uniform = gpu.uniform("params", params);
            return new_bind_group(gpu, pipeline, &uniform, buffers);
        };
        let now = arena.recording;
        let i = arena.next_bind;
        arena.next_bind += 1;
        if let Some(b) = arena.binds.get(i) {
            let same = b.pipeline == *pipeline
                && b.buffers.len() == buffers.len()
                && b.buffers.iter().zip(buffers).all(|((i, a), (j, b))| i == j && a == *b);
            let u = &mut arena.uniforms[b.uniform];
            // A rewrite keeps the block's size: only words of the same length.
            let fits = u.params.len() == params.len();
            if same && fits && (u.params == params || u.claimed != now) {
                if u.params != params {
                    gpu.write_buffer(&u.buffer, 0, params);
                    u.params = params.to_vec();
                }
                u.claimed = now;
                return b.group.clone();
            }
        }
        let shared = arena
            .uniforms
            .iter()
            .position(|u| u.claimed == now && u.params == params);
        let uniform = shared.unwrap_or_else(|| {
            arena.uniforms.push(Uniform {
                params: params.to_vec(),
                buffer: gpu.uniform("params", params),
                claimed: now,
            });
            arena.uniforms.len() - 1
        });
        let group = new_bind_group(gpu, pipeline, &arena.uniforms[uniform].buffer, buffers);
        let bound = Bound {
            pipeline: pipeline.clone(),
            buffers: buffers.iter().map(|(i, b)| (*i, (*b).clone())).collect(),
            uniform,
            group: group.clone(),
        };
        if i < arena.binds.len() {
            arena.binds[i] = bound;
        } else {
            arena.binds.push(bound);
        }
        group
    }

    /// A storage buffer of `bytes` for a kernel output of `shape`: the arena's next output when it has that shape,
    /// else a new one. A reused buffer holds the last forward's values.
    pub(crate) fn output_tensor(&mut self, shape: Vec<usize>, bytes: u64) -> GpuTensor {
        let gpu = self.gpu;
        let Some(arena) = self.arena.as_mut() else {
            return new_output(gpu, shape, bytes);
        };
        let i = arena.next_output;
        arena.next_output += 1;
        if let Some(t) = arena.outputs.get(i).filter(|t| t.shape == shape) {
            return t.clone();
        }
        let t = new_output(gpu, shape, bytes);
        if i < arena.outputs.len() {
            arena.outputs[i] = t.clone();
        } else {
            arena.outputs.push(t.clone());
        }
        t
    }
}

fn new_bind_group(
    gpu: &Gpu,
    pipeline: &wgpu::ComputePipeline,
    uniform: &wgpu::Buffer,
    buffers: &[(u32, &wgpu::Buffer)],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    entries.extend(buffers.iter().map(|(binding, b)| wgpu::BindGroupEntry {
        binding: *binding,
        resource: b.as_entire_binding(),
    }));
    gpu.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    })
}

fn new_output(gpu: &Gpu, shape: Vec<usize>, bytes: u64) -> GpuTensor {
    let buffer = gpu.create_buffer(&wgpu::BufferDescriptor {
        label: Some("activation"),
        size: bytes.max(4).next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    GpuTensor { buffer, shape }
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
    encode: impl FnOnce(&mut Recorder, &GpuTensor) -> Result<GpuTensor>,
) -> Result<Tensor> {
    let xg = GpuTensor::upload(gpu, x).await?;
    let mut rec = Recorder::new(gpu);
    let y = encode(&mut rec, &xg)?;
    rec.submit();
    y.read(gpu).await
}

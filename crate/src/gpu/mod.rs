//! GPU compute through wgpu: WebGPU in the browser, Vulkan natively (Mesa lavapipe without a GPU). The same WGSL
//! (`shaders/`, one file per op family) runs on both. This module holds the context ([`Gpu`]); `ops` the op
//! hosts, each tested against its CPU twin, which know nothing of Loom's `Network`; `loom` the Loom networks
//! built on them. Both are re-exported here.

pub(crate) mod loom;
pub(crate) mod ops;
#[cfg(not(target_arch = "wasm32"))]
mod profile;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use loom::{
    dense_weights, Conv, F32Weights, ForwardStats, GpuModel, GpuStream, KMeans, Mha, NormWeights, Recurrent,
    MHA_MAX_SEQ,
};
pub use ops::{
    binding_parts, first_argmax, is_allowed, mask_logits, packed_values, rope_table, Argmax, AttendArgs, Attention,
    Elementwise, Embedding, EmbeddingTable, GpuTensor, KvCache, KvWrite, LogitMask, MatVec, MatVecOptions, NewKv, Norm,
    PackedWeights, Packing, Pointwise, Rope, RopeIn, RowLayout, Rows, Sample, SampleArgs, Softmax, XRead, ARGMAX_SLICE,
    ATTENTION_MAX_SPLITS, ATTENTION_RUN_POSITIONS, GPU_GGML_TYPES, GPU_SAMPLE_MAX, LAYER_NORM_EPS, MAX_WEIGHT_BINDINGS,
    RMS_NORM_EPS, TILED_FULL_GROUPS,
};

pub use ops::kernel::{Arena, Recorder};
#[cfg(not(target_arch = "wasm32"))]
pub use profile::KernelTime;

/// GPU outputs must satisfy `|gpu − loom| ≤ abs + rel·|loom|`: the GPU sums in another order, in f32. Measured on
/// both corpora on lavapipe: at most 3.5e-7 where |loom| ≤ 1 and 1.1e-6·|loom| beyond (`conformance::Report::max_error`);
/// the bounds are those, about ten times over.
pub const GPU_TOLERANCE: (f32, f32) = (3e-6, 1e-5);

use crate::error::{LoomError, Result};

/// What identifies a compiled pipeline in [`Gpu`]'s cache: a kernel from fixed WGSL by its name, or a matvec
/// module generated for one encoding. Shown as a path (`matvec/q4_1/f32/1/4/matvec`) in labels and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipelineKey {
    Named(&'static str),
    MatVec {
        packing: Packing,
        shader_f16: bool,
        /// Weight bindings (a tensor over the binding limit is split).
        parts: usize,
        /// Batch rows each workgroup serves.
        batch_rows: u32,
        /// How x is read (as it is, normalized, a gated unit's product).
        x: XRead,
        entry: &'static str,
    },
}

impl std::fmt::Display for PipelineKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipelineKey::Named(name) => f.write_str(name),
            PipelineKey::MatVec {
                packing,
                shader_f16,
                parts,
                batch_rows,
                x,
                entry,
            } => {
                let halves = if *shader_f16 { "f16" } else { "f32" };
                let x = x.name();
                write!(f, "matvec/{}/{halves}/{parts}/{batch_rows}/{x}/{entry}", packing.key())
            }
        }
    }
}

/// A GPU device with the adapter's own limits, its detected features, and cached pipelines.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// `shader-f16` is available (lavapipe, most GPUs; not Chromium's SwiftShader): kernels have an f32 path too.
    pub has_f16: bool,
    pub has_subgroups: bool,
    lost: Arc<AtomicBool>,
    /// What the device was asked to do, counted at the wgpu calls ([`Gpu::counts`]).
    counters: [AtomicU64; 6],
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
    /// A kernel made wrong on purpose ([`Gpu::break_kernel`], tests only): pipelines whose name starts with it.
    broken: Mutex<Option<String>>,
    /// Whether `broken` names one: dispatches skip the lock otherwise.
    any_broken: AtomicBool,
    /// Timestamp queries per pass ([`Gpu::profiled`] only).
    #[cfg(not(target_arch = "wasm32"))]
    profiler: Option<Mutex<profile::Profiler>>,
    /// Pipelines whose validation result is not known yet (in the browser the error scope resolves later).
    #[cfg(target_arch = "wasm32")]
    unchecked: Mutex<Vec<(PipelineKey, Verdict)>>,
}

/// A pending validation result of a pipeline (browser only).
#[cfg(target_arch = "wasm32")]
type Verdict = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>>>>;

/// What a [`Gpu`] was asked to do (see [`Gpu::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    pub submits: u64,
    pub dispatches: u64,
    pub bind_groups: u64,
    pub buffers: u64,
    pub readbacks: u64,
    /// `queue.write_buffer` calls of recordings (token ids, RoPE tables, rewritten uniform blocks, draws' ids).
    pub writes: u64,
}

impl GpuCounts {
    /// What was done between `before` and this reading.
    pub fn since(self, before: GpuCounts) -> GpuCounts {
        GpuCounts {
            submits: self.submits - before.submits,
            dispatches: self.dispatches - before.dispatches,
            bind_groups: self.bind_groups - before.bind_groups,
            buffers: self.buffers - before.buffers,
            readbacks: self.readbacks - before.readbacks,
            writes: self.writes - before.writes,
        }
    }
}

/// The counters of [`Gpu::counts`].
#[derive(Clone, Copy)]
pub(crate) enum Count {
    Submits,
    Dispatches,
    BindGroups,
    Buffers,
    Readbacks,
    Writes,
}

/// Locks `m`, ignoring poisoning: the guarded caches stay consistent across a panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gpu {
    /// Requests an adapter (natively honouring `WGPU_BACKEND` / `WGPU_ADAPTER_NAME`) and a device with the
    /// adapter's own limits. No adapter is [`LoomError::NoGpu`], with the reason.
    pub async fn new() -> Result<Gpu> {
        Gpu::request(None, false).await
    }

    /// [`Gpu::new`] with timestamp queries, for benchmarks: while [`Gpu::set_profiling`] is on, every dispatch is
    /// timed on the GPU and [`Gpu::take_kernel_times`] sums the times by kernel. An adapter without timestamp
    /// queries is [`LoomError::Unsupported`].
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn profiled() -> Result<Gpu> {
        Gpu::request(None, true).await
    }

    /// [`Gpu::new`] with the storage-binding limit (and the largest buffer) capped at `max_binding` bytes, to run
    /// under a smaller device's limits than the adapter's (e.g. a browser's 128 MiB default, or far less in tests).
    pub async fn with_max_binding(max_binding: u64) -> Result<Gpu> {
        Gpu::request(Some(max_binding), false).await
    }

    async fn request(max_binding: Option<u64>, profile: bool) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| LoomError::NoGpu(format!("no WebGPU/Vulkan adapter: {e}")))?;
        let info = adapter.get_info();
        let mut limits = adapter.limits();
        if let Some(max) = max_binding {
            limits.max_storage_buffer_binding_size = limits.max_storage_buffer_binding_size.min(max);
            limits.max_buffer_size = limits.max_buffer_size.min(max);
        }
        // Subgroups natively only: a browser wants `enable subgroups;` in the WGSL, which naga rejects, and its
        // `subgroup_id` builtin is newer still.
        let wanted = if cfg!(target_arch = "wasm32") {
            wgpu::Features::SHADER_F16
        } else {
            wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP
        };
        let mut features = adapter.features() & wanted;
        if profile {
            if !adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
                return Err(LoomError::Unsupported(format!(
                    "{}: the adapter has no timestamp queries",
                    info.name
                )));
            }
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("loom"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| LoomError::NoGpu(format!("the adapter refused a device: {e}")))?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |_, _| flag.store(true, Ordering::SeqCst));
        #[cfg(not(target_arch = "wasm32"))]
        let profiler = profile.then(|| Mutex::new(profile::Profiler::new(&device, &queue)));
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            has_f16: features.contains(wgpu::Features::SHADER_F16),
            has_subgroups: features.contains(wgpu::Features::SUBGROUP),
            lost,
            counters: Default::default(),
            pipelines: Mutex::new(HashMap::new()),
            broken: Mutex::new(None),
            any_broken: AtomicBool::new(false),
            #[cfg(not(target_arch = "wasm32"))]
            profiler,
            #[cfg(target_arch = "wasm32")]
            unchecked: Mutex::new(Vec::new()),
        })
    }

    /// Times every dispatch from here on (`true`) or stops (`false`); nothing without [`Gpu::profiled`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_profiling(&self, on: bool) {
        if let Some(p) = &self.profiler {
            lock(p).enabled = on;
        }
    }

    /// The GPU time of each kernel dispatched while profiling was on, since the last call.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn take_kernel_times(&self) -> Vec<KernelTime> {
        self.profiler.as_ref().map_or_else(Vec::new, |p| lock(p).take())
    }

    /// The weight bytes the next dispatch reads, for the profile's bandwidth figures (a no-op unless profiling).
    pub(crate) fn note_weight_bytes(&self, _bytes: u64) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(p) = &self.profiler {
            lock(p).note_weight_bytes(_bytes);
        }
    }

    /// Whether the profile has no room for another pass in this submit (the recorder flushes first).
    pub(crate) fn profile_full(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(p) = &self.profiler {
            return lock(p).is_full();
        }
        false
    }

    /// The timestamp writes of the next pass, which dispatches `pipeline`, while profiling.
    pub(crate) fn pass_timestamps(&self, _pipeline: &wgpu::ComputePipeline) -> Option<(wgpu::QuerySet, u32)> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(p) = &self.profiler {
            let mut p = lock(p);
            if !p.enabled {
                return None;
            }
            let name = lock(&self.pipelines)
                .iter()
                .find(|(_, cached)| ***cached == *_pipeline)
                .map_or_else(|| "unnamed".to_string(), |(key, _)| key.to_string());
            return p.begin_pass(name);
        }
        None
    }

    /// Test hook: from here on, every dispatch of a pipeline whose name ([`PipelineKey`]'s display, e.g.
    /// `matvec/ggml_q4_k` or `norm_rms`) starts with `prefix` is skipped, so the kernel leaves its output as it was:
    /// a kernel made wrong on purpose, for testing the self-test at open and its CPU fallback. `None` mends it.
    pub fn break_kernel(&self, prefix: Option<&str>) {
        *lock(&self.broken) = prefix.map(str::to_string);
        self.any_broken.store(prefix.is_some(), Ordering::Relaxed);
    }

    /// Whether `pipeline` is the kernel [`Gpu::break_kernel`] broke (one load per dispatch when none is).
    pub(crate) fn is_broken(&self, pipeline: &wgpu::ComputePipeline) -> bool {
        if !self.any_broken.load(Ordering::Relaxed) {
            return false;
        }
        let broken = lock(&self.broken);
        let Some(prefix) = broken.as_deref() else {
            return false;
        };
        lock(&self.pipelines)
            .iter()
            .any(|(key, cached)| **cached == *pipeline && key.to_string().starts_with(prefix))
    }

    /// Everything counted so far: submits at `queue.submit`, dispatches at `dispatch_workgroups`, bind groups at
    /// `create_bind_group`, buffers at `create_buffer`, readbacks at `map_async`, writes at a recording's
    /// `queue.write_buffer` (every call goes through this
    /// type). A call's figures are the difference of two readings ([`GpuCounts::since`]).
    pub fn counts(&self) -> GpuCounts {
        let c = |k: Count| self.counters[k as usize].load(Ordering::SeqCst);
        GpuCounts {
            submits: c(Count::Submits),
            dispatches: c(Count::Dispatches),
            bind_groups: c(Count::BindGroups),
            buffers: c(Count::Buffers),
            readbacks: c(Count::Readbacks),
            writes: c(Count::Writes),
        }
    }

    pub(crate) fn count(&self, k: Count) {
        self.counters[k as usize].fetch_add(1, Ordering::SeqCst);
    }

    /// `queue.write_buffer` of a recording, counted.
    pub(crate) fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        self.count(Count::Writes);
        self.queue.write_buffer(buffer, offset, data);
    }

    /// `device.create_buffer`, counted.
    pub(crate) fn create_buffer(&self, desc: &wgpu::BufferDescriptor) -> wgpu::Buffer {
        self.count(Count::Buffers);
        self.device.create_buffer(desc)
    }

    /// `device.create_bind_group`, counted.
    pub(crate) fn create_bind_group(&self, desc: &wgpu::BindGroupDescriptor) -> wgpu::BindGroup {
        self.count(Count::BindGroups);
        self.device.create_bind_group(desc)
    }

    /// Submits handed to the queue so far, counted where they happen: what "one submit per token" is measured by.
    pub fn submit_count(&self) -> u64 {
        self.counts().submits
    }

    /// Submits `encoder`, with the profile's timestamps resolved at its end and collected after it when profiling.
    pub(crate) fn submit_encoder(&self, encoder: wgpu::CommandEncoder) {
        self.count(Count::Submits);
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(p) = &self.profiler {
            let (mut encoder, mut p) = (encoder, lock(p));
            if p.resolve(&mut encoder) {
                self.queue.submit([encoder.finish()]);
                // A failed readback (a lost device) loses the profile only; the next call reports the loss.
                let _ = p.collect(&self.device);
            } else {
                self.queue.submit([encoder.finish()]);
            }
            return;
        }
        self.queue.submit([encoder.finish()]);
    }

    /// A compute pipeline for `entry` in `source`, compiled once and reused. Compilation runs under a validation
    /// error scope, so a shader the driver (naga, or Tint in the browser) rejects is a [`LoomError::Gpu`] ("… shader
    /// rejected: …"), never a panic. Natively the scope resolves at once and this call returns the error; in the
    /// browser it resolves later, so the error comes from [`Gpu::check_pipelines`], which every readback awaits
    /// before it submits.
    pub fn pipeline(&self, name: &'static str, source: &str, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        self.pipeline_with(PipelineKey::Named(name), || source.to_string(), entry)
    }

    /// [`Gpu::pipeline`] for a generated module: `source` runs only on a cache miss (a hit compares and hashes
    /// `key` as it is, building no string).
    pub fn pipeline_with(
        &self,
        key: PipelineKey,
        source: impl FnOnce() -> String,
        entry: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.check_alive()?;
        let mut cache = lock(&self.pipelines);
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let label = key.to_string();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(source().into()),
        });
        let pipeline = Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        }));
        let verdict = scope.pop();
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(e) = pollster::block_on(verdict) {
            return Err(rejected(&key, &e));
        }
        #[cfg(target_arch = "wasm32")]
        lock(&self.unchecked).push((key, Box::pin(verdict)));
        cache.insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Waits for the validation of pipelines created since the last call (browser only; natively
    /// [`Gpu::pipeline`] already refused a bad shader). A rejected one leaves the cache and is the error.
    pub async fn check_pipelines(&self) -> Result<()> {
        #[cfg(target_arch = "wasm32")]
        loop {
            let Some((key, verdict)) = lock(&self.unchecked).pop() else {
                break;
            };
            if let Some(e) = verdict.await {
                lock(&self.pipelines).remove(&key);
                return Err(rejected(&key, &e));
            }
        }
        Ok(())
    }

    /// [`Gpu::check_alive`] after letting the device report a loss it has not reported yet (natively the loss
    /// callback runs on poll; in the browser the event loop runs it): for telling a lost device from a bad call.
    pub fn check_alive_now(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.check_alive()
    }

    /// Destroys the device now (`GPUDevice.destroy()`), as a driver reset would lose it, and marks it lost at once
    /// (the loss callback comes later in a browser): a test hook.
    pub fn destroy(&self) {
        self.device.destroy();
        self.lost.store(true, Ordering::SeqCst);
    }

    /// `e`, or [`LoomError::GpuDeviceLost`] when what failed was the device itself (a readback on a destroyed
    /// device fails before the loss is reported).
    fn lost_or(&self, e: LoomError) -> LoomError {
        self.check_alive_now().err().unwrap_or(e)
    }

    /// [`LoomError::GpuDeviceLost`] once the device is gone (lost, or destroyed).
    pub fn check_alive(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(LoomError::GpuDeviceLost(
                "the GPU device was lost; create a new context".into(),
            ));
        }
        Ok(())
    }

    /// A storage buffer holding `bytes` (padded to 4 bytes). Allocation failure is [`LoomError::GpuOutOfMemory`].
    pub async fn upload(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        self.check_alive()?;
        let size = (bytes.len().max(4).next_multiple_of(4)) as u64;
        if size > self.limits.max_buffer_size {
            return Err(LoomError::GpuOutOfMemory(format!(
                "{label}: {size} bytes exceed the device's largest buffer ({} bytes)",
                self.limits.max_buffer_size
            )));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        if let Some(e) = scope.pop().await {
            return Err(LoomError::GpuOutOfMemory(format!("{label}: {e}")));
        }
        self.queue.write_buffer(&buffer, 0, &bytes[..bytes.len() / 4 * 4]);
        if !bytes.len().is_multiple_of(4) {
            let mut tail = [0u8; 4];
            tail[..bytes.len() % 4].copy_from_slice(&bytes[bytes.len() / 4 * 4..]);
            self.queue.write_buffer(&buffer, (bytes.len() / 4 * 4) as u64, &tail);
        }
        Ok(buffer)
    }

    /// A zeroed storage buffer of `size` bytes for kernel outputs.
    pub async fn output(&self, label: &str, size: u64) -> Result<wgpu::Buffer> {
        self.upload(label, &vec![0u8; size as usize]).await
    }

    /// A small uniform buffer (rewritable: an arena updates its words in place).
    pub fn uniform(&self, label: &str, bytes: &[u8]) -> wgpu::Buffer {
        // Not `create_buffer_init`: it maps the new buffer and panics when the device is gone; a queued write
        // reports that as an error instead.
        let buffer = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (bytes.len().max(4).next_multiple_of(4)) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.queue.write_buffer(&buffer, 0, bytes);
        buffer
    }

    /// Copies `buffer` back to the host (waits for queued work).
    pub async fn read(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        self.submit_and_read(&mut Recorder::new(self), buffer).await
    }

    /// Records copying `buffer` to a mappable staging buffer at the end of `rec`, submits it (one submit for the
    /// work and the copy) and waits for the bytes. A rejected shader is the error, before anything is submitted.
    pub async fn submit_and_read(&self, rec: &mut Recorder<'_>, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        self.check_alive()?;
        self.check_pipelines().await?;
        let size = buffer.size();
        let staging = rec.staging(size);
        rec.encoder().copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        rec.flush();
        let slice = staging.slice(..size);
        self.count(Count::Readbacks);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        // Natively the callback fires on poll; in the browser the JS event loop drives it.
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| self.lost_or(LoomError::Gpu(format!("poll: {e}"))))?;
        rx.await
            .map_err(|_| self.lost_or(LoomError::Gpu("readback cancelled".into())))?
            .map_err(|e| self.lost_or(LoomError::Gpu(format!("readback: {e}"))))?;
        self.check_alive()?;
        let out = slice
            .get_mapped_range()
            .map_err(|e| LoomError::Gpu(format!("readback: {e:?}")))?
            .to_vec();
        staging.unmap();
        Ok(out)
    }

    /// Reads `buffer` as float32 values.
    pub async fn read_f32(&self, buffer: &wgpu::Buffer) -> Result<Vec<f32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.read(buffer).await?))
    }
}

/// The error for a shader the driver refused.
fn rejected(key: &PipelineKey, e: &wgpu::Error) -> LoomError {
    LoomError::Gpu(format!("{key}: shader rejected: {e}"))
}

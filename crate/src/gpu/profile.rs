//! Per-kernel GPU time from timestamp queries, for native benchmarks ([`Gpu::profiled`](super::Gpu::profiled)):
//! while profiling is on, every compute pass (one dispatch each) writes a timestamp at its start and its end, each
//! submit resolves them, and the times add up by pipeline. One recording at a time: a submit's passes are the ones
//! recorded since the last submit.

use std::collections::BTreeMap;

use crate::error::{LoomError, Result};

/// Passes one submit can time; a recording with more is submitted in parts (`Recorder` flushes when full).
const PASSES: u32 = wgpu::QUERY_SET_MAX_QUERIES / 2;

/// What one kernel (pipeline) took over the profiled submits.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The pipeline's name (`matvec/ggml_q4_1/f16/1/1/norm/matvec`, `attention`, ...).
    pub kernel: String,
    pub passes: u64,
    /// GPU time between each pass's start and end timestamps, summed.
    pub seconds: f64,
    /// Weight bytes the passes read (matvecs; 0 for other kernels).
    pub weight_bytes: u64,
}

pub(crate) struct Profiler {
    pub(crate) enabled: bool,
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// The pipeline name and weight bytes of each pass recorded since the last submit.
    pending: Vec<(String, u64)>,
    /// Weight bytes the next pass reads (set by the matvec host just before it dispatches).
    next_bytes: u64,
    totals: BTreeMap<String, KernelTime>,
    tick_ns: f64,
}

impl Profiler {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Profiler {
        let bytes = 2 * u64::from(PASSES) * 8;
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Profiler {
            enabled: false,
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernel timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * PASSES,
            }),
            resolved: buffer(
                "resolved timestamps",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: buffer(
                "timestamp readback",
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            pending: Vec::new(),
            next_bytes: 0,
            totals: BTreeMap::new(),
            tick_ns: f64::from(queue.get_timestamp_period()),
        }
    }

    pub(crate) fn note_weight_bytes(&mut self, bytes: u64) {
        self.next_bytes = bytes;
    }

    pub(crate) fn is_full(&self) -> bool {
        self.enabled && self.pending.len() >= PASSES as usize
    }

    /// The query set and the index of the start timestamp for the next pass, or `None` when profiling is off.
    pub(crate) fn begin_pass(&mut self, kernel: String) -> Option<(wgpu::QuerySet, u32)> {
        if !self.enabled || self.pending.len() >= PASSES as usize {
            return None;
        }
        let index = 2 * self.pending.len() as u32;
        self.pending.push((kernel, std::mem::take(&mut self.next_bytes)));
        Some((self.queries.clone(), index))
    }

    /// Records resolving this submit's timestamps into the readback buffer; whether there were any.
    pub(crate) fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let n = 2 * self.pending.len() as u32;
        encoder.resolve_query_set(&self.queries, 0..n, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, u64::from(n) * 8);
        true
    }

    /// Waits for the submit that [`Profiler::resolve`] ended and adds its passes' times to the totals.
    pub(crate) fn collect(&mut self, device: &wgpu::Device) -> Result<()> {
        let n = 2 * self.pending.len() as u64;
        let slice = self.readback.slice(..n * 8);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| LoomError::Gpu(format!("poll: {e}")))?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(
            &slice
                .get_mapped_range()
                .map_err(|e| LoomError::Gpu(format!("timestamps: {e:?}")))?,
        );
        self.readback.unmap();
        for ((kernel, bytes), t) in self.pending.drain(..).zip(ticks.chunks_exact(2)) {
            let entry = self.totals.entry(kernel.clone()).or_insert(KernelTime {
                kernel,
                passes: 0,
                seconds: 0.0,
                weight_bytes: 0,
            });
            entry.passes += 1;
            // A pass whose end reads before its start (a counter reset) adds nothing.
            entry.seconds += t[1].saturating_sub(t[0]) as f64 * self.tick_ns * 1e-9;
            entry.weight_bytes += bytes;
        }
        Ok(())
    }

    pub(crate) fn take(&mut self) -> Vec<KernelTime> {
        std::mem::take(&mut self.totals).into_values().collect()
    }
}

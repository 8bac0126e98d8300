//! Host for `shaders/sample.wgsl`: the next token drawn on the GPU from one row of logits (repetition penalty,
//! temperature, top-k, top-p, min-p and a random draw made by the caller), so that a sampled token costs one id
//! read back. Its CPU twin is `llm::sampler::Sampler::sample_with`, which takes the same arguments in the same order.
//! And `shaders/mask.wgsl`: a grammar's mask on the logits before the argmax or the draw (CPU twin: [`mask_logits`]),
//! so that a constrained token still costs one submit and one id read back.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, grid_for, storage_f32, u32_dim};
use super::tensor::check_values;
use super::Rows;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const SAMPLE_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/sample.wgsl"));
const MASK_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/mask.wgsl"));

/// The largest k (and the most penalised ids) the kernel takes: one workgroup sorts its 256 lanes' candidates.
pub const GPU_SAMPLE_MAX: usize = 256;

/// One draw's arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleArgs {
    /// 0: the argmax (after the penalty), lowest id on ties.
    pub temperature: f32,
    /// 1 to [`GPU_SAMPLE_MAX`]; 1 when `temperature` is 0.
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// 24 random bits: the draw is `u / 2^24` of the kept probability mass.
    pub u: u32,
    pub repetition_penalty: f32,
    /// Distinct ids the penalty applies to (at most [`GPU_SAMPLE_MAX`]).
    pub penalized: Vec<u32>,
}

/// The sampling kernel.
pub struct Sample {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl Sample {
    pub fn new(gpu: &Gpu) -> Result<Sample> {
        Ok(Sample {
            pipeline: gpu.pipeline("sample", SAMPLE_WGSL, "sample")?,
        })
    }

    /// Records the draw from `logits` (one packed row, changed in place by the penalty) into `out` (one value).
    /// `ids` holds `args.penalized` (the caller writes it; at least [`GPU_SAMPLE_MAX`] words).
    pub fn encode(
        &self,
        rec: &mut Recorder,
        logits: Rows,
        ids: &wgpu::Buffer,
        out: Rows,
        args: &SampleArgs,
    ) -> Result<()> {
        let n = logits.flat("sampled logits")?;
        if logits.rows != 1 || out.flat("sampled id")? != 1 {
            return Err(LoomError::InvalidInput(format!(
                "a draw takes one row of logits and one id, not {logits} into {out}"
            )));
        }
        check_values("penalised ids", ids, GPU_SAMPLE_MAX as u64)?;
        let k = if args.temperature == 0.0 { 1 } else { args.top_k };
        if k == 0 || k > GPU_SAMPLE_MAX || args.penalized.len() > GPU_SAMPLE_MAX {
            return Err(LoomError::InvalidInput(format!(
                "GPU sampling takes top-k 1..={GPU_SAMPLE_MAX} and at most {GPU_SAMPLE_MAX} penalised ids, got {k} and {}",
                args.penalized.len()
            )));
        }
        let words = [
            n,
            args.temperature.to_bits(),
            k as u32,
            args.top_p.to_bits(),
            args.min_p.to_bits(),
            args.u,
            args.repetition_penalty.to_bits(),
            args.penalized.len() as u32,
        ];
        dispatch(
            rec,
            &self.pipeline,
            &words,
            &[(1, logits.buffer), (2, ids), (3, out.buffer)],
            (1, 1),
        );
        Ok(())
    }

    /// A buffer for the penalised ids, written per draw with [`Sample::write_ids`].
    pub async fn ids_buffer(gpu: &Gpu) -> Result<wgpu::Buffer> {
        gpu.output("sample ids", 4 * GPU_SAMPLE_MAX as u64).await
    }

    pub fn write_ids(gpu: &Gpu, ids: &wgpu::Buffer, args: &SampleArgs) {
        if !args.penalized.is_empty() {
            gpu.write_buffer(ids, 0, bytemuck::cast_slice(&args.penalized));
        }
    }

    /// One-shot draw from `logits`.
    pub async fn run(&self, gpu: &Gpu, logits: &[f32], args: &SampleArgs) -> Result<u32> {
        check_binding(gpu, "sample logits", 4 * logits.len() as u64)?;
        let n = u32_dim(logits.len(), "sample logits")?;
        let lb = storage_f32(gpu, "sample logits", logits, logits.len()).await?;
        let ids = Sample::ids_buffer(gpu).await?;
        Sample::write_ids(gpu, &ids, args);
        let ob = gpu.output("sample out", 4).await?;
        let mut rec = Recorder::new(gpu);
        self.encode(&mut rec, Rows::new(&lb, 1, n), &ids, Rows::new(&ob, 1, 1), args)?;
        rec.submit();
        let out = gpu.read(&ob).await?;
        Ok(u32::from_le_bytes(out[..4].try_into().expect("4 bytes read back")))
    }
}

/// Whether `allowed` (bit `id % 32` of word `id / 32`) lets `id` through.
pub fn is_allowed(allowed: &[u32], id: usize) -> bool {
    allowed.get(id / 32).is_some_and(|w| (w >> (id % 32)) & 1 == 1)
}

/// The CPU twin of [`LogitMask`]: every id `allowed` leaves out gets −∞, which the argmax and every draw pass by.
pub fn mask_logits(logits: &mut [f32], allowed: &[u32]) {
    for (id, l) in logits.iter_mut().enumerate() {
        if !is_allowed(allowed, id) {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// The mask kernel: a grammar's allowed ids applied to one row of logits in place.
pub struct LogitMask {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl LogitMask {
    pub fn new(gpu: &Gpu) -> Result<LogitMask> {
        Ok(LogitMask {
            pipeline: gpu.pipeline("logit_mask", MASK_WGSL, "mask")?,
        })
    }

    /// A buffer for the masks of a vocabulary of `n` ids, written per step with [`LogitMask::write`].
    pub async fn buffer(gpu: &Gpu, n: usize) -> Result<wgpu::Buffer> {
        gpu.output("logit mask", 4 * n.div_ceil(32).max(1) as u64).await
    }

    pub fn write(gpu: &Gpu, buffer: &wgpu::Buffer, allowed: &[u32]) -> Result<()> {
        let words = allowed.len() as u64;
        if 4 * words != buffer.size() {
            return Err(LoomError::InvalidInput(format!(
                "a mask of {words} words for a buffer of {} bytes",
                buffer.size()
            )));
        }
        gpu.write_buffer(buffer, 0, bytemuck::cast_slice(allowed));
        Ok(())
    }

    /// Records the mask in `allowed` (at least one bit per logit) on `logits` (one packed row).
    pub fn encode(&self, rec: &mut Recorder, logits: Rows, allowed: &wgpu::Buffer) -> Result<()> {
        let n = logits.flat("masked logits")?;
        if logits.rows != 1 {
            return Err(LoomError::InvalidInput(format!(
                "a mask takes one row of logits, not {logits}"
            )));
        }
        check_values("logit mask", allowed, u64::from(n).div_ceil(32))?;
        let g = grid_for(rec.gpu(), u64::from(n), 256, "logit mask")?;
        let nan = f32::NAN.to_bits();
        dispatch(rec, &self.pipeline, &[n, nan], &[(1, logits.buffer), (2, allowed)], g);
        Ok(())
    }

    /// One-shot: `logits` masked on the GPU, read back (NaN where the CPU twin writes −∞).
    pub async fn run(&self, gpu: &Gpu, logits: &[f32], allowed: &[u32]) -> Result<Vec<f32>> {
        check_binding(gpu, "masked logits", 4 * logits.len() as u64)?;
        let n = u32_dim(logits.len(), "masked logits")?;
        let lb = storage_f32(gpu, "masked logits", logits, logits.len()).await?;
        let mb = LogitMask::buffer(gpu, logits.len()).await?;
        LogitMask::write(gpu, &mb, allowed)?;
        let mut rec = Recorder::new(gpu);
        self.encode(&mut rec, Rows::new(&lb, 1, n), &mb)?;
        rec.submit();
        Ok(bytemuck::pod_collect_to_vec(&gpu.read(&lb).await?))
    }
}

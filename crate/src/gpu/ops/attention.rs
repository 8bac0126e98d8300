//! Host for `shaders/attention.wgsl`: the KV cache, its update kernel, and causal GQA attention against it (prefill:
//! many tokens at once; decode: one token against the cache). CPU twin: the attention step of `crate::cpu`
//! attention.rs, f64 there and f32 here. [`crate::gpu::Mha`] composes these into a MultiHeadAttention layer.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, dispatch_3d, grid_for, storage_f32, u32_dim};
use super::{Rows, REDUCE_WGSL};
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ATTENTION_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/attention.wgsl"));

/// Head dimensions one attention workgroup stages and outputs (its shared query chunk, 4 values per lane); wider heads
/// take several workgroups along z, each producing one chunk of the output.
const HEAD_CHUNK: u32 = 256;

/// K and V caches on the GPU, `[kv_head][max_seq][head_dim]` f32 each; timeline position `p` is row `p % max_seq`.
pub struct KvCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub max_seq: u32,
}

impl KvCache {
    /// A zeroed cache.
    pub async fn new(gpu: &Gpu, kv_heads: usize, head_dim: usize, max_seq: usize) -> Result<KvCache> {
        let len = kv_heads
            .checked_mul(head_dim)
            .and_then(|n| n.checked_mul(max_seq))
            .ok_or_else(|| LoomError::Unsupported("KV cache size overflows".into()))?;
        if max_seq == 0 {
            return Err(LoomError::InvalidInput("a KV cache of 0 rows".into()));
        }
        check_binding(gpu, "KV cache", 4 * len as u64)?;
        Ok(KvCache {
            k: gpu.output("k cache", 4 * len as u64).await?,
            v: gpu.output("v cache", 4 * len as u64).await?,
            kv_heads: u32_dim(kv_heads, "kv heads")?,
            head_dim: u32_dim(head_dim, "head_dim")?,
            max_seq: u32_dim(max_seq, "max_seq")?,
        })
    }

    /// Records zeroing both caches.
    pub fn clear(&self, rec: &mut Recorder) {
        rec.encoder().clear_buffer(&self.k, 0, None);
        rec.encoder().clear_buffer(&self.v, 0, None);
    }

    /// The caches' contents, `[kv_head][max_seq][head_dim]` each.
    pub async fn read(&self, gpu: &Gpu) -> Result<(Vec<f32>, Vec<f32>)> {
        let len = (self.kv_heads * self.head_dim * self.max_seq) as usize;
        let mut k = gpu.read_f32(&self.k).await?;
        let mut v = gpu.read_f32(&self.v).await?;
        k.truncate(len);
        v.truncate(len);
        Ok((k, v))
    }
}

/// What the queries of one attention dispatch attend to.
#[derive(Clone, Copy, Debug)]
pub struct AttendArgs {
    /// Timeline position of the first query; query `t` attends to positions `0..=pos0 + t`.
    pub pos0: u32,
    /// Score scale, `1/√head_dim` for Loom.
    pub scale: f32,
    /// A sliding window: each query attends to its latest `window` positions (its own included); 0 for all.
    pub window: u32,
    /// Soft-capped scores (Gemma 2): each scaled score becomes `cap · tanh(score / cap)`; 0 for none.
    pub softcap: f32,
}

/// The KV-update and attention kernels.
pub struct Attention {
    kv_update: Arc<wgpu::ComputePipeline>,
    attend: Arc<wgpu::ComputePipeline>,
}

impl Attention {
    pub fn new(gpu: &Gpu) -> Result<Attention> {
        let source = format!("{REDUCE_WGSL}\n{ATTENTION_WGSL}");
        Ok(Attention {
            kv_update: gpu.pipeline("attention_kv_update", &source, "kv_update")?,
            attend: gpu.pipeline("attention_attend", &source, "attend")?,
        })
    }

    /// Records writing the rows of `k` and `v` (`kv_heads·head_dim` values each) into the cache at positions
    /// `pos0..`. The two may be columns of one buffer's rows (a fused q|k|v row): they share rows and stride.
    pub fn encode_kv_update(&self, rec: &mut Recorder, cache: &KvCache, k: Rows, v: Rows, pos0: u32) -> Result<()> {
        k.check("KV update K")?;
        v.check("KV update V")?;
        let kv_w = u64::from(cache.kv_heads) * u64::from(cache.head_dim);
        if u64::from(k.cols) != kv_w || (k.rows, k.cols, k.stride, k.row0) != (v.rows, v.cols, v.stride, v.row0) {
            return Err(LoomError::InvalidInput(format!(
                "KV update of rows of {kv_w} values: K {k}, V {v}"
            )));
        }
        let n = k.len();
        if n == 0 {
            return Ok(());
        }
        u32_dim(n as usize, "KV update size")?;
        let g = grid_for(rec.gpu(), n, 64, "KV update")?;
        let words = [
            k.rows,
            k.row0,
            pos0,
            cache.max_seq,
            0,
            cache.kv_heads,
            cache.head_dim,
            0,
            0,
            0,
            0,
            0,
            k.stride,
            k.col0,
            v.col0,
        ];
        let buffers = [(1, k.buffer), (2, v.buffer), (3, &cache.k), (4, &cache.v)];
        dispatch(rec, &self.kv_update, &words, &buffers, g);
        Ok(())
    }

    /// Records causal attention of each row of `q` (whole heads of `head_dim`) against the cache into the same
    /// rows of `out`. Both start at column 0 of their buffer's rows and may be strided; they share their first row.
    pub fn encode_attend(
        &self,
        rec: &mut Recorder,
        cache: &KvCache,
        q: Rows,
        out: Rows,
        args: AttendArgs,
    ) -> Result<()> {
        let gpu = rec.gpu();
        q.check("attention queries")?;
        out.check("attention output")?;
        let hd = cache.head_dim;
        if hd == 0
            || !q.cols.is_multiple_of(hd)
            || (q.rows, q.cols, q.row0, q.col0) != (out.rows, out.cols, out.row0, 0)
            || out.col0 != 0
        {
            return Err(LoomError::InvalidInput(format!(
                "attention over heads of {hd}: queries {q}, output {out}"
            )));
        }
        let heads = q.cols / hd;
        if q.rows == 0 || heads == 0 {
            return Ok(());
        }
        if cache.kv_heads == 0 || heads / cache.kv_heads == 0 {
            return Err(LoomError::InvalidInput(format!(
                "{heads} heads cannot share {} kv heads",
                cache.kv_heads
            )));
        }
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        let chunks = hd.div_ceil(HEAD_CHUNK);
        if heads > max || q.rows > max || chunks > max {
            return Err(LoomError::Unsupported(format!(
                "attention of {heads} heads × {} tokens exceeds {max} workgroups per dimension",
                q.rows
            )));
        }
        let words = [
            q.rows,
            q.row0,
            args.pos0,
            cache.max_seq,
            heads,
            cache.kv_heads,
            hd,
            q.stride,
            out.stride,
            args.scale.to_bits(),
            args.window,
            args.softcap.to_bits(),
        ];
        dispatch_3d(
            rec,
            &self.attend,
            &words,
            &[(5, q.buffer), (6, &cache.k), (7, &cache.v), (8, out.buffer)],
            (heads, q.rows, chunks),
        );
        Ok(())
    }

    /// One-shot: writes the `k`, `v` rows of `tokens = q.len() / (heads·head_dim)` tokens into `cache` at positions
    /// `pos0..`, then attends each query to the positions up to its own (the latest `window` of them, 0 for all;
    /// scores soft-capped at `softcap`, 0 for none).
    /// `pos0 = 0` is a prefill; a later call with one token is a decode step. Returns `[tokens][heads·head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        gpu: &Gpu,
        cache: &KvCache,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        heads: usize,
        pos0: usize,
        window: u32,
        softcap: f32,
    ) -> Result<Vec<f32>> {
        let hd = cache.head_dim as usize;
        let (qw, kvw) = (heads * hd, cache.kv_heads as usize * hd);
        let tokens = q.len().checked_div(qw).unwrap_or(0);
        if qw == 0 || q.len() != tokens * qw || k.len() != tokens * kvw || v.len() != tokens * kvw {
            return Err(LoomError::InvalidInput(format!(
                "attention: {} q, {} k, {} v values for {heads} heads and {} kv heads of {hd}",
                q.len(),
                k.len(),
                v.len(),
                cache.kv_heads
            )));
        }
        let qb = storage_f32(gpu, "q", q, q.len()).await?;
        let kb = storage_f32(gpu, "k", k, k.len()).await?;
        let vb = storage_f32(gpu, "v", v, v.len()).await?;
        let ob = gpu.output("attention out", 4 * q.len() as u64).await?;
        let (tokens, pos0) = (u32_dim(tokens, "tokens")?, u32_dim(pos0, "position")?);
        let mut rec = Recorder::new(gpu);
        let kv_w = cache.kv_heads * cache.head_dim;
        self.encode_kv_update(
            &mut rec,
            cache,
            Rows::new(&kb, tokens, kv_w),
            Rows::new(&vb, tokens, kv_w),
            pos0,
        )?;
        let args = AttendArgs {
            pos0,
            scale: (1.0 / (hd as f64).sqrt()) as f32,
            window,
            softcap,
        };
        let q_w = u32_dim(qw, "q row")?;
        self.encode_attend(
            &mut rec,
            cache,
            Rows::new(&qb, tokens, q_w),
            Rows::new(&ob, tokens, q_w),
            args,
        )?;
        rec.submit();
        let mut out = gpu.read_f32(&ob).await?;
        out.truncate(q.len());
        Ok(out)
    }
}

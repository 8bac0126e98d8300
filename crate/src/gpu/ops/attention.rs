//! Host for `shaders/attention.wgsl`: the KV cache, its update kernel, and causal GQA attention against it (prefill:
//! many tokens at once; decode: one token against the cache). CPU twin: the attention step of `crate::cpu`
//! attention.rs, f64 there and f32 here. [`crate::gpu::Mha`] composes these into a MultiHeadAttention layer.

use std::sync::Arc;

use super::kernel::{check_binding, dispatch, dispatch_3d, grid_for, storage_f32, u32_dim};
use super::REDUCE_WGSL;
use crate::error::{LoomError, Result};
use crate::gpu::Gpu;
use crate::gpu::Recorder;

const ATTENTION_WGSL: &str = include_str!("../../../../shaders/attention.wgsl");

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

/// Where the queries of one attention dispatch are and what they attend to.
#[derive(Clone, Copy, Debug)]
pub struct AttendArgs {
    /// Query tokens in this dispatch.
    pub tokens: u32,
    /// Index of the first of them in the `q` and `out` buffers.
    pub first: u32,
    /// Timeline position of the first; token `t` attends to positions `0..=pos0 + t`.
    pub pos0: u32,
    pub heads: u32,
    /// Floats per token in `q` and in `out` (at least `heads · head_dim`).
    pub q_stride: u32,
    pub out_stride: u32,
    /// Score scale, `1/√head_dim` for Loom.
    pub scale: f32,
}

/// Where a KV update's new rows are: `tokens` tokens from token `first`, token `t`'s K at
/// `(first + t)·stride + k_offset` of its buffer and its V likewise at `v_offset` (a fused q/k/v row holds both;
/// separate K and V rows have `stride = kv_heads·head_dim` and offsets 0: [`KvRows::packed`]).
#[derive(Clone, Copy, Debug)]
pub struct KvRows {
    pub tokens: u32,
    pub first: u32,
    pub stride: u32,
    pub k_offset: u32,
    pub v_offset: u32,
}

impl KvRows {
    /// `tokens` rows from token `first` of K and V buffers of their own, `kv_heads·head_dim` values a token.
    pub fn packed(cache: &KvCache, tokens: u32, first: u32) -> KvRows {
        KvRows {
            tokens,
            first,
            stride: cache.kv_heads * cache.head_dim,
            k_offset: 0,
            v_offset: 0,
        }
    }
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

    /// Records writing `tokens` K and V rows (`[token][kv_heads·head_dim]`, from token `first` of `k` and `v`) into
    /// the cache at positions `pos0..`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_kv_update(
        &self,
        rec: &mut Recorder,
        cache: &KvCache,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        rows: KvRows,
        pos0: u32,
    ) -> Result<()> {
        let gpu = rec.gpu();
        let kv_w = u64::from(cache.kv_heads) * u64::from(cache.head_dim);
        let n = u64::from(rows.tokens) * kv_w;
        if n == 0 {
            return Ok(());
        }
        if u64::from(rows.stride) < kv_w {
            return Err(LoomError::InvalidInput(format!(
                "KV update: rows of {} values hold no K or V of {kv_w}",
                rows.stride
            )));
        }
        u32_dim(n as usize, "KV update size")?;
        let g = grid_for(gpu, n, 64, "KV update")?;
        let words = [
            rows.tokens,
            rows.first,
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
            rows.stride,
            rows.k_offset,
            rows.v_offset,
        ];
        dispatch(
            rec,
            &self.kv_update,
            &words,
            &[(1, k), (2, v), (3, &cache.k), (4, &cache.v)],
            g,
        );
        Ok(())
    }

    /// Records causal attention of `args.tokens` queries against the cache into `out` (`heads · head_dim` values
    /// per token at `out_stride`).
    pub fn encode_attend(
        &self,
        rec: &mut Recorder,
        cache: &KvCache,
        q: &wgpu::Buffer,
        out: &wgpu::Buffer,
        args: AttendArgs,
    ) -> Result<()> {
        let gpu = rec.gpu();
        if args.tokens == 0 || args.heads == 0 || cache.head_dim == 0 {
            return Ok(());
        }
        let hd = cache.head_dim;
        if cache.kv_heads == 0 || args.heads / cache.kv_heads == 0 {
            return Err(LoomError::InvalidInput(format!(
                "{} heads cannot share {} kv heads",
                args.heads, cache.kv_heads
            )));
        }
        let width = u64::from(args.heads) * u64::from(hd);
        if width > u64::from(args.q_stride) || width > u64::from(args.out_stride) {
            return Err(LoomError::InvalidInput(format!(
                "attention: {} heads of {hd} do not fit rows of {} (q) / {} (out)",
                args.heads, args.q_stride, args.out_stride
            )));
        }
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        let chunks = hd.div_ceil(HEAD_CHUNK);
        if args.heads > max || args.tokens > max || chunks > max {
            return Err(LoomError::Unsupported(format!(
                "attention of {} heads × {} tokens exceeds {max} workgroups per dimension",
                args.heads, args.tokens
            )));
        }
        let words = [
            args.tokens,
            args.first,
            args.pos0,
            cache.max_seq,
            args.heads,
            cache.kv_heads,
            hd,
            args.q_stride,
            args.out_stride,
            args.scale.to_bits(),
        ];
        dispatch_3d(
            rec,
            &self.attend,
            &words,
            &[(5, q), (6, &cache.k), (7, &cache.v), (8, out)],
            (args.heads, args.tokens, chunks),
        );
        Ok(())
    }

    /// One-shot: writes the `k`, `v` rows of `tokens = q.len() / (heads·head_dim)` tokens into `cache` at positions
    /// `pos0..`, then attends each query to the positions up to its own. `pos0 = 0` is a prefill; a later call with
    /// one token is a decode step. Returns `[tokens][heads·head_dim]`.
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
        self.encode_kv_update(&mut rec, cache, &kb, &vb, KvRows::packed(cache, tokens, 0), pos0)?;
        let args = AttendArgs {
            tokens,
            first: 0,
            pos0,
            heads: u32_dim(heads, "heads")?,
            q_stride: u32_dim(qw, "q row")?,
            out_stride: u32_dim(qw, "q row")?,
            scale: (1.0 / (hd as f64).sqrt()) as f32,
        };
        self.encode_attend(&mut rec, cache, &qb, &ob, args)?;
        rec.submit();
        let mut out = gpu.read_f32(&ob).await?;
        out.truncate(q.len());
        Ok(out)
    }
}

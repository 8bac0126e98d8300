//! A Loom MultiHeadAttention layer on the GPU: matvec projections with their biases (read packed from the layer's
//! store as stored, dequantized in the kernel), optional per-head Q/K RMSNorm, RoPE, the KV cache update and causal
//! GQA attention, and the output projection, all recorded into one command encoder.
//! CPU twin: `crate::cpu` attention.rs (`CpuModel` forward of the same layer), whose maths is f64 with Loom's
//! roundings; here everything is f32, so outputs agree within a tolerance (see `crate/tests/gpu_attention.rs`).
//!
//! Loom's semantics kept: weights as `GetActive` gives them (dequantize-then-float, spec §3), the store layout
//! `Wq[q×d], Wk[kv×d], Wv[kv×d], Wo[d×q], bq, bk, bv, bo` (§6.2), `q = query_dim or heads·head_dim`, a 512-row cache
//! wrapping at `pos % 512`, batch rows sharing one timeline, and a call of one row of one token continuing a warm
//! cache while any other call starts a new one. Loom's input layouts (`[batch, seq, d]`, `[seq, d]`, others read as
//! `seq_length` rows) are parsed as the CPU parses them.

use crate::cpu::Tensor;
use crate::error::{LoomError, Result};
use crate::gpu::ops::kernel::{storage_f32, u32_dim};
use crate::gpu::Recorder;
use crate::gpu::Rope;
use crate::gpu::{dense_weights, Gpu, GpuTensor, MatVec, PackedWeights, Pointwise};
use crate::gpu::{AttendArgs, Attention, KvCache};
use crate::gpu::{Norm, Rows, RMS_NORM_EPS};
use crate::network::{Layer, LayerType};

/// KV cache rows, as Loom's when `MaxSeqLen` is 0 (always, for a loaded network).
pub const MHA_MAX_SEQ: usize = 512;

/// The layer's sizes, derived and checked as the CPU forward does.
#[derive(Clone, Copy, Debug)]
struct Dims {
    d: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    /// Query width of the store and of the attention row (`query_dim`, else `heads·hd`).
    q: usize,
    kv: usize,
    theta: f64,
    seq_length: usize,
}

impl Dims {
    fn new(layer: &Layer) -> Result<Dims> {
        let dim = |v: i64, what: &str| {
            usize::try_from(v).map_err(|_| LoomError::InvalidNetwork(format!("MultiHeadAttention {what} is {v}")))
        };
        let d = dim(layer.d_model, "d_model")?;
        let heads = dim(layer.num_heads, "num_heads")?;
        let kv_heads = match dim(layer.num_kv_heads, "num_kv_heads")? {
            0 => heads,
            n => n,
        };
        let hd = dim(layer.head_dim, "head_dim")?;
        let overflow = || LoomError::InvalidNetwork("MultiHeadAttention sizes overflow".into());
        let hw = heads.checked_mul(hd).ok_or_else(overflow)?;
        let q = match dim(layer.query_dim, "query_dim")? {
            0 => hw,
            n => n,
        };
        let kv = kv_heads.checked_mul(hd).ok_or_else(overflow)?;
        if d == 0 || hw > q || d > q {
            return Err(LoomError::InvalidNetwork(format!(
                "MultiHeadAttention needs d_model ({d}) > 0 and num_heads·head_dim ({heads}·{hd}) and d_model at \
                 most query_dim ({q}) (Loom would panic)"
            )));
        }
        if heads > 0 && (kv_heads == 0 || heads / kv_heads == 0) {
            return Err(LoomError::InvalidNetwork(format!(
                "{heads} heads cannot share {kv_heads} kv heads (Loom would divide by zero)"
            )));
        }
        let theta = if layer.rope_freq_base > 0.0 {
            layer.rope_freq_base
        } else {
            10000.0
        };
        Ok(Dims {
            d,
            heads,
            kv_heads,
            hd,
            q,
            kv,
            theta,
            seq_length: usize::try_from(layer.seq_length.max(0)).unwrap_or(0),
        })
    }

    /// Loom's `mhaParseLayout`: `(batch, seq)`, as the CPU path parses it.
    fn layout(&self, shape: &[usize], len: usize) -> Result<(usize, usize)> {
        let d = self.d;
        crate::cpu::mha_layout(shape, len, d, self.seq_length).ok_or_else(|| {
            LoomError::InvalidInput(format!(
                "MultiHeadAttention needs a [seq, {d}] or [batch, seq, {d}] input, got a scalar"
            ))
        })
    }
}

/// A per-head RMSNorm's γ on the GPU and how many γ rows it cycles through.
struct HeadNorm {
    gamma: wgpu::Buffer,
    rows: u32,
}

/// A MultiHeadAttention layer resident on the GPU, with its KV cache and timeline.
pub struct Mha {
    dims: Dims,
    max_seq: usize,
    /// Views of the layer's one packed store `Wq, Wk, Wv, Wo, bq, bk, bv, bo`, each projection with its bias.
    wq: PackedWeights,
    wk: PackedWeights,
    wv: PackedWeights,
    wo: PackedWeights,
    q_norm: Option<HeadNorm>,
    k_norm: Option<HeadNorm>,
    cache: KvCache,
    /// The next timeline position; 0 means a cold cache.
    offset: usize,
    matvec: MatVec,
    norm: Norm,
    rope: Rope,
    attention: Attention,
}

impl Mha {
    /// Uploads a Loom MultiHeadAttention layer (its store packed as `GetActive` reads it, and its `q_norm` /
    /// `k_norm` blobs) with a cold 512-row cache.
    pub async fn new(gpu: &Gpu, layer: &Layer) -> Result<Mha> {
        if layer.layer_type != LayerType::MultiHeadAttention {
            return Err(LoomError::InvalidInput(format!(
                "{} is not a MultiHeadAttention layer",
                layer.layer_type
            )));
        }
        let c = Dims::new(layer)?;
        let len = layer.weights.as_ref().map_or(0, |w| w.len());
        let (packing, bytes, scale) = dense_weights(layer).map_err(|_| {
            LoomError::InvalidNetwork("the MultiHeadAttention layer has no weights (Loom would panic here)".into())
        })?;
        let sizes = [c.q * c.d, c.kv * c.d, c.kv * c.d, c.d * c.q, c.q, c.kv, c.kv, c.d];
        let needed: usize = sizes.iter().sum();
        if needed > len {
            return Err(LoomError::InvalidNetwork(format!(
                "MultiHeadAttention with d_model {}, query {} and kv {} needs {needed} weights, it has {len}",
                c.d, c.q, c.kv
            )));
        }
        // Where each segment starts in the store.
        let at: Vec<usize> = sizes
            .iter()
            .scan(0, |start, n| {
                let here = *start;
                *start += n;
                Some(here)
            })
            .collect();
        let store = PackedWeights::upload_tensor(gpu, packing, &bytes, scale, len).await?;
        // Projections `[n_out][n_in]`; only the first heads·head_dim rows of Wq (and of bq) are used.
        let hw = c.heads * c.hd;
        let wq = store.matrix(at[0], c.d, hw, Some(at[4]))?;
        let wk = store.matrix(at[1], c.d, c.kv, Some(at[5]))?;
        let wv = store.matrix(at[2], c.d, c.kv, Some(at[6]))?;
        let wo = store.matrix(at[3], c.q, c.d, Some(at[7]))?;
        let q_norm = head_norm(gpu, layer, "q_norm", c.heads, c.hd).await?;
        let k_norm = head_norm(gpu, layer, "k_norm", c.kv_heads, c.hd).await?;
        Ok(Mha {
            dims: c,
            max_seq: MHA_MAX_SEQ,
            wq,
            wk,
            wv,
            wo,
            q_norm,
            k_norm,
            cache: KvCache::new(gpu, c.kv_heads, c.hd, MHA_MAX_SEQ).await?,
            offset: 0,
            matvec: MatVec::auto(gpu, packing)?,
            norm: Norm::new(gpu)?,
            rope: Rope::new(gpu)?,
            attention: Attention::new(gpu)?,
        })
    }

    /// `d_model`: the width of every input and output token.
    pub fn d_model(&self) -> usize {
        self.dims.d
    }

    /// The next timeline position (0: the next call starts a new cache).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The KV cache (`[kv_head][512][head_dim]`).
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Records the layer on `x` as `CpuModel` runs it (Loom's layouts: `[batch, seq, d]`, `[seq, d]`, others read
    /// as `seq_length` rows) and returns its output: the input's shape with the last dimension replaced by
    /// `d_model`. Advances the timeline, so submit the encoder before this layer is recorded again (every call binds
    /// its own RoPE table and positions, but the cache is shared).
    pub fn encode(&mut self, rec: &mut Recorder, x: &GpuTensor) -> Result<GpuTensor> {
        let c = self.dims;
        let (batch, seq) = c.layout(&x.shape, x.len())?;
        let mut out_shape = x.shape.clone();
        *out_shape.last_mut().expect("layout refuses scalars") = c.d;
        let out_len = out_shape
            .iter()
            .try_fold(1usize, |a, v| a.checked_mul(*v))
            .ok_or_else(|| LoomError::InvalidInput(format!("output shape {out_shape:?} overflows")))?;
        let tokens = batch
            .checked_mul(seq)
            .ok_or_else(|| LoomError::InvalidInput("batch × seq overflows".into()))?;
        let used = tokens
            .checked_mul(c.d)
            .ok_or_else(|| LoomError::InvalidInput("input size overflows".into()))?;
        if used > x.len() || used > out_len {
            return Err(LoomError::InvalidInput(format!(
                "MultiHeadAttention reads {batch}×{seq}×{} values from an input of shape {:?} (Loom would panic)",
                c.d, x.shape
            )));
        }
        let warm = batch == 1 && seq == 1 && self.offset > 0;
        let start = if warm { self.offset } else { 0 };
        // A head past the last kv head (heads not a multiple of kv_heads) reads the next cache row, as Loom does;
        // Loom panics when that runs off the cache's end.
        if c.heads > 0 && tokens > 0 {
            let last_row = (start + tokens - 1).min(self.max_seq - 1);
            let end = (c.heads - 1) / (c.heads / c.kv_heads) * c.hd + c.hd;
            if last_row * c.kv + end > self.max_seq * c.kv {
                return Err(LoomError::InvalidNetwork(format!(
                    "{} heads over {} kv heads read past the KV cache (Loom would panic)",
                    c.heads, c.kv_heads
                )));
            }
        }
        let hw = c.heads * c.hd;
        let t32 = u32_dim(tokens, "tokens")?;
        let q = u32_dim(c.q, "query_dim")?;
        let (hw32, hd) = (u32_dim(hw, "heads·head_dim")?, u32_dim(c.hd, "head_dim")?);
        let (heads, kv_heads) = (u32_dim(c.heads, "heads")?, u32_dim(c.kv_heads, "kv heads")?);
        let kv = u32_dim(c.kv, "kv width")?;
        // Past the tokens read (or every value, for no tokens) the output stays zero, as the CPU's: a new buffer is
        // zeroed and the tail of a reused one is never written.
        let y = GpuTensor::scratch(rec, out_shape)?;
        if !warm {
            self.cache.clear(rec);
        }
        if tokens == 0 {
            self.offset = start;
            return Ok(y);
        }
        let lin = Pointwise::Identity;

        // Projections with their biases.
        let qp = GpuTensor::scratch(rec, vec![tokens, hw])?;
        let kp = GpuTensor::scratch(rec, vec![tokens, c.kv])?;
        let vp = GpuTensor::scratch(rec, vec![tokens, c.kv])?;
        let xr = Rows::new(&x.buffer, t32, u32_dim(self.wq.n_in, "d_model")?);
        self.matvec.encode(rec, xr, &self.wq, qp.rows(), lin)?;
        self.matvec.encode(rec, xr, &self.wk, kp.rows(), lin)?;
        self.matvec.encode(rec, xr, &self.wv, vp.rows(), lin)?;

        // Per-head RMSNorm of Q and K (HF imports), then RoPE on both.
        let qs = match &self.q_norm {
            Some(g) => {
                let qn = GpuTensor::scratch(rec, vec![tokens, hw])?;
                let rows = t32 * heads;
                let (x, y) = (Rows::new(&qp.buffer, rows, hd), Rows::new(&qn.buffer, rows, hd));
                self.norm.encode_rms(rec, x, &g.gamma, y, g.rows, RMS_NORM_EPS)?;
                qn
            }
            None => qp,
        };
        let ks = match &self.k_norm {
            Some(g) => {
                let kn = GpuTensor::scratch(rec, vec![tokens, c.kv])?;
                let rows = t32 * kv_heads;
                let (x, y) = (Rows::new(&kp.buffer, rows, hd), Rows::new(&kn.buffer, rows, hd));
                self.norm.encode_rms(rec, x, &g.gamma, y, g.rows, RMS_NORM_EPS)?;
                kn
            }
            None => kp,
        };
        let table = self.rope.table(rec, c.theta, c.hd, start, tokens)?;
        // q's heads fill its rows; k's rows of `kv` values hold kv_heads·hd.
        let q_rows = Rows::new(&qs.buffer, t32, hw32);
        let k_rows = Rows::new(&ks.buffer, t32, kv).columns(0, kv_heads * hd);
        self.rope.encode(rec, q_rows, &table.buffer, hd)?;
        self.rope.encode(rec, k_rows, &table.buffer, hd)?;

        // K/V into the cache and attention. Batch rows share one timeline: when nothing wraps and every head has
        // its own kv head, all rows go at once (no query reads a row written after it on the CPU); otherwise row by
        // row, as the CPU does. `att` is `[token][q]`: the columns past heads·hd stay zero, as the CPU's.
        let att = GpuTensor::scratch(rec, vec![tokens, c.q])?;
        let (v_rows, att_rows) = (
            Rows::new(&vp.buffer, t32, kv),
            Rows::new(&att.buffer, t32, q).columns(0, hw32),
        );
        let scale = (1.0 / (c.hd as f64).sqrt()) as f32;
        let together = start + tokens <= self.max_seq && c.heads.is_multiple_of(c.kv_heads);
        let (groups, per) = if together { (1, tokens) } else { (batch, seq) };
        for b in 0..groups {
            let first = u32_dim(b * per, "token")?;
            let pos0 = u32_dim(start + b * per, "position")?;
            let per32 = u32_dim(per, "tokens")?;
            let (k, v) = (k_rows.slice_rows(first, per32), v_rows.slice_rows(first, per32));
            let (queries, out) = (q_rows.slice_rows(first, per32), att_rows.slice_rows(first, per32));
            self.attention.encode_kv_update(rec, &self.cache, k, v, pos0)?;
            let args = AttendArgs {
                pos0,
                scale,
                window: 0,
                softcap: 0.0,
                split: false,
            };
            self.attention
                .encode_attend(rec, &self.cache, queries, None, out, args)?;
        }

        // Output projection with its bias.
        // The first `tokens` rows of y (the rest stay zero).
        let y_rows = Rows::new(&y.buffer, t32, u32_dim(self.wo.n_out, "d_model")?);
        self.matvec.encode(rec, att.rows(), &self.wo, y_rows, lin)?;
        self.offset = start + tokens;
        Ok(y)
    }

    /// One-shot forward of `x` shaped `shape` (uploads, encodes, submits and reads back); the KV cache carries over
    /// to the next call.
    pub async fn forward(&mut self, gpu: &Gpu, x: &[f32], shape: &[usize]) -> Result<Tensor> {
        let input = Tensor::new(x.to_vec(), shape.to_vec())
            .map_err(|_| LoomError::InvalidInput(format!("{} values for the input shape {shape:?}", x.len())))?;
        let xb = GpuTensor::upload(gpu, &input).await?;
        let mut rec = Recorder::new(gpu);
        let y = self.encode(&mut rec, &xb)?;
        let mut data: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.submit_and_read(&mut rec, &y.buffer).await?);
        data.truncate(y.len());
        Tensor::new(data, y.shape)
    }
}

/// A `q_norm` / `k_norm` blob as the CPU applies it: γ per head dim (`hd` values), per element (`heads·hd`), or 1.
async fn head_norm(gpu: &Gpu, layer: &Layer, suffix: &str, heads: usize, hd: usize) -> Result<Option<HeadNorm>> {
    let Some(blob) = layer.extra_blobs.iter().find(|b| b.suffix == suffix) else {
        return Ok(None);
    };
    if blob.bytes.len() % 4 != 0 {
        return Err(LoomError::InvalidNetwork(format!(
            "{suffix}: {} bytes is not a whole number of float32 values",
            blob.bytes.len()
        )));
    }
    let gamma: Vec<f32> = bytemuck::pod_collect_to_vec(&blob.bytes);
    let (gamma, rows) = if gamma.len() == hd {
        (gamma, 1)
    } else if gamma.len() == heads * hd {
        (gamma, heads)
    } else {
        (vec![1.0; hd], 1)
    };
    Ok(Some(HeadNorm {
        gamma: storage_f32(gpu, suffix, &gamma, gamma.len()).await?,
        rows: u32_dim(rows.max(1), "norm rows")?,
    }))
}

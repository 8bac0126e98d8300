//! A Loom MultiHeadAttention layer on the GPU: matvec projections with biases, optional per-head Q/K RMSNorm, RoPE,
//! the KV cache update and causal GQA attention, and the output projection, all recorded into one command encoder.
//! CPU twin: `crate::cpu` attention.rs (`CpuModel` forward of the same layer), whose maths is f64 with Loom's
//! roundings; here everything is f32, so outputs agree within a tolerance (see `crate/tests/gpu_attention.rs`).
//!
//! Loom's semantics kept: weights as `GetActive` gives them (dequantize-then-float, spec §3), the store layout
//! `Wq[q×d], Wk[kv×d], Wv[kv×d], Wo[d×q], bq, bk, bv, bo` (§6.2), `q = query_dim or heads·head_dim`, a 512-row cache
//! wrapping at `pos % 512`, batch rows sharing one timeline, and a call of one row of one token continuing a warm
//! cache while any other call starts a new one. Loom's input layouts (`[batch, seq, d]`, `[seq, d]`, others read as
//! `seq_length` rows) are parsed as the CPU parses them.

use super::attention::{AttendArgs, Attention, KvCache, MAX_HEAD_DIM};
use super::elementwise::Elementwise;
use super::kernel::{check_binding, storage_f32, u32_dim};
use super::norm::{Norm, RMS_NORM_EPS};
use super::rope::Rope;
use super::{Gpu, MatVec, PackedWeights, Packing};
use crate::cpu::Tensor;
use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::network::{Activation, Layer, LayerType};

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
        if hd > MAX_HEAD_DIM {
            return Err(LoomError::Unsupported(format!(
                "head_dim {hd}: the GPU attention kernel handles up to {MAX_HEAD_DIM}"
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

/// Per-call intermediates, grown to the largest call seen.
struct Scratch {
    tokens: usize,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    /// Q and K after their RMSNorm (only with `q_norm` / `k_norm`).
    qn: Option<wgpu::Buffer>,
    kn: Option<wgpu::Buffer>,
    /// `[token][q]`: attention rows; the columns past `heads·hd` stay zero, as the CPU's.
    att: wgpu::Buffer,
}

/// [`Mha::forward`]'s own input and output buffers, `[tokens][d_model]` each.
struct Io {
    tokens: usize,
    x: wgpu::Buffer,
    y: wgpu::Buffer,
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
    wq: PackedWeights,
    wk: PackedWeights,
    wv: PackedWeights,
    wo: PackedWeights,
    bq: wgpu::Buffer,
    bk: wgpu::Buffer,
    bv: wgpu::Buffer,
    bo: wgpu::Buffer,
    q_norm: Option<HeadNorm>,
    k_norm: Option<HeadNorm>,
    cache: KvCache,
    /// The next timeline position; 0 means a cold cache.
    offset: usize,
    scratch: Option<Scratch>,
    io: Option<Io>,
    matvec: MatVec,
    elementwise: Elementwise,
    norm: Norm,
    rope: Rope,
    attention: Attention,
}

impl Mha {
    /// Uploads a Loom MultiHeadAttention layer (its weights as `GetActive` gives them, and its `q_norm` / `k_norm`
    /// blobs) with a cold 512-row cache.
    pub async fn new(gpu: &Gpu, layer: &Layer) -> Result<Mha> {
        if layer.layer_type != LayerType::MultiHeadAttention {
            return Err(LoomError::InvalidInput(format!(
                "{} is not a MultiHeadAttention layer",
                layer.layer_type
            )));
        }
        let c = Dims::new(layer)?;
        let w = layer
            .weights
            .as_ref()
            .ok_or_else(|| {
                LoomError::InvalidNetwork("the MultiHeadAttention layer has no weights (Loom would panic here)".into())
            })?
            .active(layer.dtype);
        let sizes = [c.q * c.d, c.kv * c.d, c.kv * c.d, c.d * c.q, c.q, c.kv, c.kv, c.d];
        let needed: usize = sizes.iter().sum();
        if needed > w.len() {
            return Err(LoomError::InvalidNetwork(format!(
                "MultiHeadAttention with d_model {}, query {} and kv {} needs {needed} weights, it has {}",
                c.d,
                c.q,
                c.kv,
                w.len()
            )));
        }
        let mut segments = Vec::with_capacity(8);
        let mut rest = &w[..];
        for n in sizes {
            let (head, tail) = rest.split_at(n);
            segments.push(head);
            rest = tail;
        }
        // Projections as float32 matvec weights `[n_out][n_in]`; only the first heads·head_dim rows of Wq are used.
        let hw = c.heads * c.hd;
        let f32_weights = |values: &[f32], n_in: usize, n_out: usize| {
            let bytes = crate::network::f32_bytes(&values[..n_in * n_out]);
            async move { PackedWeights::upload(gpu, Packing::Loom(DType::Float32), &bytes, 1.0, n_in, n_out).await }
        };
        let wq = f32_weights(segments[0], c.d, hw).await?;
        let wk = f32_weights(segments[1], c.d, c.kv).await?;
        let wv = f32_weights(segments[2], c.d, c.kv).await?;
        let wo = f32_weights(segments[3], c.q, c.d).await?;
        let bias = |values: &'static str, i: usize| storage_f32(gpu, values, segments[i], segments[i].len());
        let (bq, bk, bv, bo) = (
            bias("bq", 4).await?,
            bias("bk", 5).await?,
            bias("bv", 6).await?,
            bias("bo", 7).await?,
        );
        let q_norm = head_norm(gpu, layer, "q_norm", c.heads, c.hd).await?;
        let k_norm = head_norm(gpu, layer, "k_norm", c.kv_heads, c.hd).await?;
        Ok(Mha {
            dims: c,
            max_seq: MHA_MAX_SEQ,
            wq,
            wk,
            wv,
            wo,
            bq,
            bk,
            bv,
            bo,
            q_norm,
            k_norm,
            cache: KvCache::new(gpu, c.kv_heads, c.hd, MHA_MAX_SEQ).await?,
            offset: 0,
            scratch: None,
            io: None,
            matvec: MatVec::f32(gpu)?,
            elementwise: Elementwise::new(gpu)?,
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

    /// Makes room for calls of up to `tokens` tokens (`batch · seq`); [`Mha::encode`] needs it first.
    pub async fn reserve(&mut self, gpu: &Gpu, tokens: usize) -> Result<()> {
        if self.scratch.as_ref().is_some_and(|s| s.tokens >= tokens) {
            return Ok(());
        }
        let c = self.dims;
        let hw = c.heads * c.hd;
        let buf = |width: usize, label: &'static str| {
            let bytes = 4 * (tokens.max(1) as u64) * (width.max(1) as u64);
            async move {
                check_binding(gpu, label, bytes)?;
                gpu.output(label, bytes).await
            }
        };
        self.scratch = Some(Scratch {
            tokens,
            q: buf(hw, "mha q").await?,
            k: buf(c.kv, "mha k").await?,
            v: buf(c.kv, "mha v").await?,
            qn: match self.q_norm {
                Some(_) => Some(buf(hw, "mha q normed").await?),
                None => None,
            },
            kn: match self.k_norm {
                Some(_) => Some(buf(c.kv, "mha k normed").await?),
                None => None,
            },
            att: buf(c.q, "mha attention").await?,
        });
        Ok(())
    }

    /// Records the layer on `batch × seq` tokens: `x` holds `[tokens][d_model]` inputs and receives nothing, `y`
    /// receives `[tokens][d_model]` outputs (a caller's buffers, e.g. the previous and next layer's activations).
    /// Advances the timeline. [`Mha::reserve`] room for `tokens` first, and submit the encoder before the next call
    /// of this layer is recorded (each call binds its own RoPE table and parameters, but the cache is shared).
    pub fn encode(
        &mut self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        batch: usize,
        seq: usize,
    ) -> Result<()> {
        let c = self.dims;
        let tokens = batch
            .checked_mul(seq)
            .ok_or_else(|| LoomError::InvalidInput("batch × seq overflows".into()))?;
        let io_bytes = 4 * (tokens as u64).saturating_mul(c.d as u64);
        if x.size() < io_bytes || y.size() < io_bytes {
            return Err(LoomError::InvalidInput(format!(
                "MultiHeadAttention on {tokens} tokens of {} needs {io_bytes}-byte input and output buffers, got {} \
                 and {}",
                c.d,
                x.size(),
                y.size()
            )));
        }
        let warm = batch == 1 && seq == 1 && self.offset > 0;
        let start = if warm { self.offset } else { 0 };
        if !warm {
            self.cache.clear(encoder);
        }
        if tokens == 0 {
            self.offset = start;
            return Ok(());
        }
        // A head past the last kv head (heads not a multiple of kv_heads) reads the next cache row, as Loom does;
        // Loom panics when that runs off the cache's end.
        if c.heads > 0 {
            let last_row = (start + tokens - 1).min(self.max_seq - 1);
            let end = (c.heads - 1) / (c.heads / c.kv_heads) * c.hd + c.hd;
            if last_row * c.kv + end > self.max_seq * c.kv {
                return Err(LoomError::InvalidNetwork(format!(
                    "{} heads over {} kv heads read past the KV cache (Loom would panic)",
                    c.heads, c.kv_heads
                )));
            }
        }
        let s = match &self.scratch {
            Some(s) if s.tokens >= tokens => s,
            _ => {
                return Err(LoomError::InvalidInput(format!(
                    "MultiHeadAttention: reserve room for {tokens} tokens before encoding"
                )))
            }
        };
        let hw = c.heads * c.hd;
        let t32 = u32_dim(tokens, "tokens")?;
        let (d, q, kv) = (
            u32_dim(c.d, "d_model")?,
            u32_dim(c.q, "query_dim")?,
            u32_dim(c.kv, "kv width")?,
        );
        let (hw32, hd) = (u32_dim(hw, "heads·head_dim")?, u32_dim(c.hd, "head_dim")?);
        let (heads, kv_heads) = (u32_dim(c.heads, "heads")?, u32_dim(c.kv_heads, "kv heads")?);
        let lin = Activation::Linear;
        let n = |width: u32| u32_dim(tokens * width as usize, "activation size");

        // Projections, bias added after the matvec.
        let ew = &self.elementwise;
        self.matvec.encode(gpu, encoder, x, &self.wq, &s.q, t32, lin)?;
        ew.encode_add_inplace(gpu, encoder, &s.q, &self.bq, n(hw32)?, hw32.max(1))?;
        self.matvec.encode(gpu, encoder, x, &self.wk, &s.k, t32, lin)?;
        ew.encode_add_inplace(gpu, encoder, &s.k, &self.bk, n(kv)?, kv.max(1))?;
        self.matvec.encode(gpu, encoder, x, &self.wv, &s.v, t32, lin)?;
        ew.encode_add_inplace(gpu, encoder, &s.v, &self.bv, n(kv)?, kv.max(1))?;

        // Per-head RMSNorm of Q and K (HF imports), then RoPE on both.
        let qs = match (&self.q_norm, &s.qn) {
            (Some(g), Some(qn)) => {
                self.norm
                    .encode_rms(gpu, encoder, &s.q, &g.gamma, qn, t32 * heads, hd, g.rows, RMS_NORM_EPS)?;
                qn
            }
            _ => &s.q,
        };
        let ks = match (&self.k_norm, &s.kn) {
            (Some(g), Some(kn)) => {
                self.norm.encode_rms(
                    gpu,
                    encoder,
                    &s.k,
                    &g.gamma,
                    kn,
                    t32 * kv_heads,
                    hd,
                    g.rows,
                    RMS_NORM_EPS,
                )?;
                kn
            }
            _ => &s.k,
        };
        let table = self.rope.table(gpu, c.theta, c.hd, start, tokens)?;
        self.rope.encode(gpu, encoder, qs, &table, t32, heads, hd, hw32, 0)?;
        self.rope.encode(gpu, encoder, ks, &table, t32, kv_heads, hd, kv, 0)?;

        // K/V into the cache and attention. Batch rows share one timeline: when nothing wraps and every head has
        // its own kv head, all rows go at once (no query reads a row written after it on the CPU); otherwise row by
        // row, as the CPU does.
        let scale = (1.0 / (c.hd as f64).sqrt()) as f32;
        let together = start + tokens <= self.max_seq && c.heads.is_multiple_of(c.kv_heads);
        let (groups, per) = if together { (1, tokens) } else { (batch, seq) };
        for b in 0..groups {
            let first = u32_dim(b * per, "token")?;
            let pos0 = u32_dim(start + b * per, "position")?;
            let per32 = u32_dim(per, "tokens")?;
            self.attention
                .encode_kv_update(gpu, encoder, &self.cache, ks, &s.v, per32, first, pos0)?;
            let args = AttendArgs {
                tokens: per32,
                first,
                pos0,
                heads,
                q_stride: hw32,
                out_stride: q,
                scale,
            };
            self.attention
                .encode_attend(gpu, encoder, &self.cache, qs, &s.att, args)?;
        }

        // Output projection and bias.
        self.matvec.encode(gpu, encoder, &s.att, &self.wo, y, t32, lin)?;
        ew.encode_add_inplace(gpu, encoder, y, &self.bo, n(d)?, d)?;
        self.offset = start + tokens;
        Ok(())
    }

    /// Forward of `x` with shape `shape`, as `CpuModel` runs this layer: the output has the input's shape with the
    /// last dimension replaced by `d_model`; the KV cache carries over to the next call.
    pub async fn forward(&mut self, gpu: &Gpu, x: &[f32], shape: &[usize]) -> Result<Tensor> {
        let c = self.dims;
        let (batch, seq) = c.layout(shape, x.len())?;
        let mut out_shape = shape.to_vec();
        *out_shape.last_mut().expect("layout refuses scalars") = c.d;
        let out_len = out_shape
            .iter()
            .try_fold(1usize, |a, v| a.checked_mul(*v))
            .ok_or_else(|| LoomError::InvalidInput(format!("output shape {out_shape:?} overflows")))?;
        let used = batch
            .checked_mul(seq)
            .and_then(|t| t.checked_mul(c.d))
            .ok_or_else(|| LoomError::InvalidInput("input size overflows".into()))?;
        if used > x.len() || used > out_len {
            return Err(LoomError::InvalidInput(format!(
                "MultiHeadAttention reads {batch}×{seq}×{} values from an input of shape {shape:?} (Loom would panic)",
                c.d
            )));
        }
        let tokens = batch * seq;
        self.reserve(gpu, tokens).await?;
        let io = match self.io.take() {
            Some(io) if io.tokens >= tokens => io,
            _ => {
                let bytes = 4 * (tokens.max(1) as u64) * (c.d as u64);
                check_binding(gpu, "mha x", bytes)?;
                Io {
                    tokens,
                    x: gpu.output("mha x", bytes).await?,
                    y: gpu.output("mha y", bytes).await?,
                }
            }
        };
        gpu.queue.write_buffer(&io.x, 0, bytemuck::cast_slice(&x[..used]));
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        let recorded = self.encode(gpu, &mut encoder, &io.x, &io.y, batch, seq);
        let io = self.io.insert(io);
        recorded?;
        gpu.queue.submit([encoder.finish()]);
        let mut out = vec![0f32; out_len];
        if used > 0 {
            let y = gpu.read_f32(&io.y).await?;
            out[..used].copy_from_slice(&y[..used]);
        }
        Tensor::new(out, out_shape)
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

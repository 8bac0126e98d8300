//! A decoder's weights as stored: every matrix is a slice of the file's bytes in its block type (no f32 copy of
//! a quantized model); only the small vectors (norms, biases) are widened to f32.
//!
//! The loaders look tensors up by role through a [`TensorSource`], so GGUF names (`blk.N.attn_q.weight`), HF
//! names (`model.layers.N.self_attn.q_proj.weight`) and a Loom transformer `.entity` all feed the same checks.

use std::sync::Arc;

use bytes::Bytes;

use super::config::{Arch, ModelConfig};
use crate::error::{LoomError, Result};
use crate::quant::{self, GgmlType, QMatrix};

/// A tensor as a source holds it: block type, row-major shape, bytes.
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub ty: GgmlType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

/// A matrix `[rows][cols]` of blocks, kept as stored.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: Bytes,
}

impl Matrix {
    pub fn view(&self) -> QMatrix<'_> {
        QMatrix {
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            data: &self.data,
        }
    }

    /// The matrix as the CPU kernels read it fastest: Q4_0, Q5_0, Q4_K, Q5_K or Q6_K with its rows interleaved by eight
    /// where that pays ([`quant::interleave_pays`]; a copy of the bytes, in another order), else `None`.
    fn for_cpu(&self) -> Option<Matrix> {
        if !quant::interleave_pays(self.ty, self.rows) {
            return None;
        }
        let (ty, data) = quant::interleave(&self.view()).ok()?;
        Some(Matrix {
            ty,
            data: Bytes::from(data),
            ..*self
        })
    }
}

/// One decoder block.
#[derive(Clone, Debug)]
pub struct BlockWeights {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    /// Qwen2's q/k/v biases.
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Output-projection and feed-forward biases: none in the HF families we run, but Loom's MHA and SwiGLU
    /// layers have them and its forward adds them (spec §6.2, §7).
    pub bo: Option<Vec<f32>>,
    pub b_gate: Option<Vec<f32>>,
    pub b_up: Option<Vec<f32>>,
    pub b_down: Option<Vec<f32>>,
    /// Qwen3's per-head RMSNorm weights (head_dim each).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    /// Gemma's RMSNorms of the attention output and of the feed-forward output (`BlockSpec::post_norms`).
    pub post_attn_norm: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

impl BlockWeights {
    /// The block's seven weight matrices.
    pub fn matrices(&self) -> [&Matrix; 7] {
        [&self.wq, &self.wk, &self.wv, &self.wo, &self.gate, &self.up, &self.down]
    }
}

#[derive(Clone, Debug)]
pub struct ModelWeights {
    /// `[vocab][hidden]`; also the LM head when `head` is `None`.
    pub embed: Matrix,
    pub blocks: Vec<BlockWeights>,
    pub final_norm: Vec<f32>,
    pub head: Option<Matrix>,
}

impl ModelWeights {
    /// The weights as the CPU engine reads them: the matrices it multiplies in the layout its kernels read fastest
    /// ([`Matrix::for_cpu`]); the same weights where none changes. The embedding stays as stored, its rows looked up;
    /// a tied head then becomes a head of its own, the embedding's copy in that layout (read whole every token, where
    /// the embedding gives a row).
    pub fn for_cpu(self: &Arc<Self>) -> Arc<ModelWeights> {
        if !self.cpu_layout_pays() {
            return self.clone();
        }
        let keep = |m: &Matrix| m.for_cpu().unwrap_or_else(|| m.clone());
        Arc::new(ModelWeights {
            embed: self.embed.clone(),
            blocks: self
                .blocks
                .iter()
                .map(|b| BlockWeights {
                    wq: keep(&b.wq),
                    wk: keep(&b.wk),
                    wv: keep(&b.wv),
                    wo: keep(&b.wo),
                    gate: keep(&b.gate),
                    up: keep(&b.up),
                    down: keep(&b.down),
                    ..b.clone()
                })
                .collect(),
            final_norm: self.final_norm.clone(),
            head: self.lm_head().for_cpu().or_else(|| self.head.clone()),
        })
    }

    /// Whether [`ModelWeights::for_cpu`] changes a matrix (on this CPU, now).
    pub fn cpu_layout_pays(&self) -> bool {
        let mut multiplied = std::iter::once(self.lm_head()).chain(self.blocks.iter().flat_map(BlockWeights::matrices));
        multiplied.any(|m| quant::interleave_pays(m.ty, m.rows))
    }

    /// The LM head: its own matrix, or the tied embedding.
    pub fn lm_head(&self) -> &Matrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }

    /// Every weight matrix: the embedding, the head when it has its own, then each block's.
    pub fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        let blocks = self.blocks.iter().flat_map(BlockWeights::matrices);
        std::iter::once(&self.embed).chain(self.head.as_ref()).chain(blocks)
    }

    /// Bytes of every tensor (what the model costs in memory, without the KV cache).
    pub fn bytes(&self) -> usize {
        let m = |m: &Matrix| m.data.len();
        let v = |v: &[f32]| v.len() * 4;
        let ov = |o: &Option<Vec<f32>>| o.as_deref().map_or(0, v);
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                b.matrices().into_iter().map(m).sum::<usize>()
                    + v(&b.attn_norm)
                    + v(&b.ffn_norm)
                    + ov(&b.bq)
                    + ov(&b.bk)
                    + ov(&b.bv)
                    + ov(&b.bo)
                    + ov(&b.b_gate)
                    + ov(&b.b_up)
                    + ov(&b.b_down)
                    + ov(&b.q_norm)
                    + ov(&b.k_norm)
            })
            .sum();
        m(&self.embed) + self.head.as_ref().map_or(0, m) + v(&self.final_norm) + blocks
    }

    /// Block types of the matrices and how many of each, for `inspect`.
    pub fn type_mix(&self) -> Vec<(GgmlType, usize)> {
        let mut mix: Vec<(GgmlType, usize)> = Vec::new();
        let mut add = |t: GgmlType| match mix.iter_mut().find(|(x, _)| *x == t) {
            Some((_, n)) => *n += 1,
            None => mix.push((t, 1)),
        };
        for m in self.matrices() {
            add(m.ty);
        }
        mix
    }
}

/// What a block tensor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    AttnNorm,
    Q,
    K,
    V,
    O,
    QBias,
    KBias,
    VBias,
    OBias,
    QNorm,
    KNorm,
    FfnNorm,
    PostAttnNorm,
    PostFfnNorm,
    Gate,
    Up,
    Down,
    GateBias,
    UpBias,
    DownBias,
    /// q, k and v stored as one matrix, their rows stacked (Phi-3): read where the file has no `Q`.
    Qkv,
    /// Gate and up stored as one matrix, gate rows first (Phi-3): read where the file has no `Gate`.
    GateUp,
}

impl Role {
    pub const ALL: [Role; 22] = [
        Role::AttnNorm,
        Role::Q,
        Role::K,
        Role::V,
        Role::O,
        Role::QBias,
        Role::KBias,
        Role::VBias,
        Role::OBias,
        Role::QNorm,
        Role::KNorm,
        Role::FfnNorm,
        Role::PostAttnNorm,
        Role::PostFfnNorm,
        Role::Gate,
        Role::Up,
        Role::Down,
        Role::GateBias,
        Role::UpBias,
        Role::DownBias,
        Role::Qkv,
        Role::GateUp,
    ];
}

/// Global (non-block) tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    Embed,
    FinalNorm,
    Head,
}

/// Where the loaders find tensors.
pub trait TensorSource {
    /// The tensor for `role` of block `block`, or `None` when the file has none.
    fn block(&self, block: usize, role: Role) -> Result<Option<RawTensor>>;
    fn global(&self, g: Global) -> Result<Option<RawTensor>>;
    /// A name for messages ("blk.3.attn_q.weight").
    fn block_name(&self, block: usize, role: Role) -> String;
    fn global_name(&self, g: Global) -> String;
}

fn matrix(t: RawTensor, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
    if t.shape != [rows, cols] {
        return Err(LoomError::InvalidNetwork(format!(
            "{name}: shape {:?}, the config needs [{rows}, {cols}]",
            t.shape
        )));
    }
    if !t.ty.can_compute() {
        return Err(LoomError::UnsupportedDType(format!(
            "{name}: block type {}",
            t.ty.name()
        )));
    }
    QMatrix::new(t.ty, rows, cols, &t.data).map_err(|e| LoomError::InvalidNetwork(format!("{name}: {e}")))?;
    Ok(Matrix {
        ty: t.ty,
        rows,
        cols,
        data: t.data,
    })
}

/// Splits a matrix whose rows stack several (a fused q|k|v or gate|up) into views of the same bytes, one per
/// count of `rows`, each checked as [`matrix`] checks it.
fn split_rows(t: RawTensor, name: &str, rows: &[usize], cols: usize) -> Result<Vec<Matrix>> {
    let total: usize = rows.iter().sum();
    let whole = matrix(t, name, total, cols)?;
    let row_bytes = whole.data.len() / total;
    let mut at = 0;
    rows.iter()
        .map(|&r| {
            let data = whole.data.slice(at * row_bytes..(at + r) * row_bytes);
            at += r;
            Ok(Matrix {
                ty: whole.ty,
                rows: r,
                cols,
                data,
            })
        })
        .collect()
}

fn vector(t: RawTensor, name: &str, len: usize) -> Result<Vec<f32>> {
    if t.shape != [len] {
        return Err(LoomError::InvalidNetwork(format!(
            "{name}: shape {:?}, the config needs [{len}]",
            t.shape
        )));
    }
    if t.ty.row_bytes(len).ok() != Some(t.data.len()) {
        return Err(LoomError::InvalidNetwork(format!(
            "{name}: {} bytes for {len} {} values",
            t.data.len(),
            t.ty.name()
        )));
    }
    let mut out = vec![0f32; len];
    quant::dequantize(t.ty, &t.data, &mut out).map_err(|e| LoomError::InvalidNetwork(format!("{name}: {e}")))?;
    Ok(out)
}

/// A norm's weights with `off` added (HF Gemma's `1 + w`; `BlockSpec::norm_offset`).
fn offset(mut v: Vec<f32>, off: f32) -> Vec<f32> {
    if off != 0.0 {
        v.iter_mut().for_each(|w| *w += off);
    }
    v
}

/// The tensors outside the blocks.
pub struct Globals {
    pub embed: Matrix,
    pub final_norm: Vec<f32>,
    /// `None` when the embeddings are tied.
    pub head: Option<Matrix>,
}

/// Reads and checks the embedding, the final norm and the output head.
pub fn load_globals(cfg: &ModelConfig, src: &dyn TensorSource) -> Result<Globals> {
    let h = cfg.hidden;
    let need_g = |g: Global| -> Result<RawTensor> {
        src.global(g)?
            .ok_or_else(|| LoomError::InvalidNetwork(format!("missing tensor {}", src.global_name(g))))
    };
    let embed = matrix(need_g(Global::Embed)?, &src.global_name(Global::Embed), cfg.vocab, h)?;
    let final_norm = offset(
        vector(need_g(Global::FinalNorm)?, &src.global_name(Global::FinalNorm), h)?,
        cfg.block.norm_offset,
    );
    let head = match (cfg.tied_embeddings, src.global(Global::Head)?) {
        (false, Some(t)) => Some(matrix(t, &src.global_name(Global::Head), cfg.vocab, h)?),
        (false, None) => {
            return Err(LoomError::InvalidNetwork(format!(
                "missing tensor {} (the embeddings are not tied)",
                src.global_name(Global::Head)
            )))
        }
        (true, _) => None,
    };
    Ok(Globals {
        embed,
        final_norm,
        head,
    })
}

/// Reads and checks the tensors of block `i`.
pub fn load_block(cfg: &ModelConfig, src: &dyn TensorSource, i: usize) -> Result<BlockWeights> {
    let (h, q, kv, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
    let name = |r: Role| src.block_name(i, r);
    let missing = |r: Role| LoomError::InvalidNetwork(format!("missing tensor {}", name(r)));
    let need = |r: Role| -> Result<RawTensor> { src.block(i, r)?.ok_or_else(|| missing(r)) };
    let mat = |r: Role, rows: usize, cols: usize| matrix(need(r)?, &name(r), rows, cols);
    let vec = |r: Role, len: usize| vector(need(r)?, &name(r), len);
    let opt = |r: Role, len: usize| -> Result<Option<Vec<f32>>> {
        src.block(i, r)?.map(|t| vector(t, &name(r), len)).transpose()
    };
    let (bq, bk, bv) = (opt(Role::QBias, q)?, opt(Role::KBias, kv)?, opt(Role::VBias, kv)?);
    let (bo, b_gate, b_up, b_down) = (
        opt(Role::OBias, h)?,
        opt(Role::GateBias, f)?,
        opt(Role::UpBias, f)?,
        opt(Role::DownBias, h)?,
    );
    let off = cfg.block.norm_offset;
    let (q_norm, k_norm) = (opt(Role::QNorm, cfg.head_dim)?, opt(Role::KNorm, cfg.head_dim)?);
    let (q_norm, k_norm) = (q_norm.map(|v| offset(v, off)), k_norm.map(|v| offset(v, off)));
    if matches!(cfg.arch, Arch::Qwen3 | Arch::Gemma3) && (q_norm.is_none() || k_norm.is_none()) {
        return Err(LoomError::InvalidNetwork(format!(
            "{} block {i} lacks its q/k norms",
            cfg.arch.name()
        )));
    }
    let (post_attn_norm, post_ffn_norm) = if cfg.block.post_norms {
        (
            Some(offset(vec(Role::PostAttnNorm, h)?, off)),
            Some(offset(vec(Role::PostFfnNorm, h)?, off)),
        )
    } else {
        (None, None)
    };
    // A fused matrix where the file has no separate one (Phi-3; llama.cpp's `attn_qkv` and its 2·ffn `ffn_up`),
    // looked up only then: each tensor is read once.
    let (wq, wk, wv) = match src.block(i, Role::Q)? {
        Some(t) => (
            matrix(t, &name(Role::Q), q, h)?,
            mat(Role::K, kv, h)?,
            mat(Role::V, kv, h)?,
        ),
        None => match src.block(i, Role::Qkv)? {
            Some(t) => {
                let [wq, wk, wv]: [Matrix; 3] = split_rows(t, &name(Role::Qkv), &[q, kv, kv], h)?
                    .try_into()
                    .expect("three parts");
                (wq, wk, wv)
            }
            None => return Err(missing(Role::Q)),
        },
    };
    let (gate, up) = match src.block(i, Role::Gate)? {
        Some(t) => (matrix(t, &name(Role::Gate), f, h)?, mat(Role::Up, f, h)?),
        None => match src.block(i, Role::GateUp)? {
            Some(t) if t.shape.first() == Some(&(2 * f)) => {
                let [gate, up]: [Matrix; 2] = split_rows(t, &name(Role::GateUp), &[f, f], h)?
                    .try_into()
                    .expect("two parts");
                (gate, up)
            }
            _ => return Err(missing(Role::Gate)),
        },
    };
    Ok(BlockWeights {
        attn_norm: offset(vec(Role::AttnNorm, h)?, off),
        wq,
        wk,
        wv,
        wo: mat(Role::O, h, q)?,
        bq,
        bk,
        bv,
        bo,
        b_gate,
        b_up,
        b_down,
        q_norm,
        k_norm,
        ffn_norm: offset(vec(Role::FfnNorm, h)?, off),
        post_attn_norm,
        post_ffn_norm,
        gate,
        up,
        down: mat(Role::Down, h, f)?,
    })
}

/// Reads and checks every tensor the config needs.
pub fn load(cfg: &ModelConfig, src: &dyn TensorSource) -> Result<ModelWeights> {
    let g = load_globals(cfg, src)?;
    let blocks = (0..cfg.n_layers)
        .map(|i| load_block(cfg, src, i))
        .collect::<Result<Vec<_>>>()?;
    Ok(ModelWeights {
        embed: g.embed,
        blocks,
        final_norm: g.final_norm,
        head: g.head,
    })
}

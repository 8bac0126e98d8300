//! MultiHeadAttention with RoPE, GQA, causal masking and Loom's shared KV timeline (spec §7).
//!
//! Loom's `MHAForwardPolymorphic`, step by step:
//! - Input `[batch, seq, d]`, `[seq, d]` or anything else (then one sequence of `seq_length` rows); the output has
//!   the input's shape with the last dimension replaced by `d_model`.
//! - Projections: bias first, then `Σ_j x_j·W[i][j]` in f64 with j ascending. Q stays f64; K and V are rounded to f32
//!   into the KV cache (512 rows, row `pos % 512`).
//! - Optional per-head RMSNorm of Q (f64) and K (f32, re-rounded), from `.entity` `q_norm`/`k_norm` blobs.
//! - RoPE, rotate-half pairs `(j, j + hd/2)` in every head at angle `pos / θ^(2j/hd)`; K is rounded to f32 again.
//! - Causal attention over cache positions `0..=pos` with GQA head `h / (heads / kv_heads)`: scores `q·k · 1/√hd`,
//!   softmax from an initial max of −1e9 with Go's `exp`, `Σ att·v` then one division by the sum.
//! - Output `f32(bo + Σ_j att_j·Wo[i][j])`. No activation.
//! - Batch rows share one timeline: row b's positions continue after row b−1's. A call with one row of one token
//!   continues the previous call's cache; any other call starts a new one.
//!
//! Loom panics unless `num_heads·head_dim ≤ query_dim ≥ d_model` (query_dim 0 means num_heads·head_dim here), and
//! when `kv_heads > heads`; such layers are refused with a typed error.
//!
//! Every sum keeps Loom's order (bit-exactness forces it). The projections are computed as `acc += x_j · Wᵀ[j]` over
//! a transposed copy of the weights: each output's terms still come in order, and the outputs vectorize.

use super::{dim, gomath, product, weights, zeros, State, Tensor};
use crate::error::{LoomError, Result};
use crate::network::Layer;

/// KV cache rows when `MaxSeqLen` is 0, which it always is for a loaded network.
const MAX_SEQ_LEN: usize = 512;

/// What Loom keeps on an MHA layer between forward calls, plus its weights in the layout this file uses.
pub(crate) struct MhaState {
    weights: Weights,
    cache: Option<KvCache>,
}

/// The KV timeline: `MAX_SEQ_LEN × kv_dim` f32 rows each for K and V, and the next position.
struct KvCache {
    k: Vec<f32>,
    v: Vec<f32>,
    offset: usize,
}

/// Transposed projections (`wq[j·q + i] = Wq[i][j]`) and the rest of the store.
struct Weights {
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    bq: Vec<f32>,
    bk: Vec<f32>,
    bv: Vec<f32>,
    bo: Vec<f32>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
}

/// The layer's sizes as Loom derives them.
struct Config {
    d: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    q: usize,
    kv: usize,
    theta: f64,
}

impl Config {
    fn new(layer: &Layer, path: &str) -> Result<Config> {
        let d = dim(layer.d_model, "d_model", path)?;
        if d == 0 {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: MultiHeadAttention with d_model 0"
            )));
        }
        let heads = dim(layer.num_heads, "num_heads", path)?;
        let kv_heads = match dim(layer.num_kv_heads, "num_kv_heads", path)? {
            0 => heads,
            n => n,
        };
        let hd = dim(layer.head_dim, "head_dim", path)?;
        let overflow = || LoomError::InvalidNetwork(format!("{path}: MultiHeadAttention sizes overflow"));
        let q = match dim(layer.query_dim, "query_dim", path)? {
            0 => heads.checked_mul(hd).ok_or_else(overflow)?,
            n => n,
        };
        let kv = kv_heads.checked_mul(hd).ok_or_else(overflow)?;
        // Loom indexes Q rows per head and copies d_model values of each attention row: heads·hd beyond
        // query_dim, or d_model beyond it, runs off the last row and panics.
        if heads.checked_mul(hd).is_none_or(|n| n > q) || d > q {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: MultiHeadAttention needs num_heads·head_dim ({heads}·{hd}) and d_model ({d}) at most \
                 query_dim ({q}) (Loom would panic)"
            )));
        }
        let theta = if layer.rope_freq_base > 0.0 {
            layer.rope_freq_base
        } else {
            10000.0
        };
        Ok(Config {
            d,
            heads,
            kv_heads,
            hd,
            q,
            kv,
            theta,
        })
    }
}

impl Weights {
    /// Splits Loom's store `Wq, Wk, Wv, Wo, bq, bk, bv, bo` (forward offsets use `q`, which may differ from the
    /// `query_dim or d_model` the store was sized with) and transposes the matrices.
    fn new(layer: &Layer, path: &str, w: &[f32], c: &Config) -> Result<Weights> {
        let (qd, kvd) = (c.q.checked_mul(c.d), c.kv.checked_mul(c.d));
        let sizes = [qd, kvd, kvd, qd, Some(c.q), Some(c.kv), Some(c.kv), Some(c.d)];
        let needed = sizes.iter().try_fold(0usize, |a, n| a.checked_add((*n)?));
        if needed.is_none_or(|n| n > w.len()) {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: MultiHeadAttention with d_model {}, query {} and kv {} needs more than the {} weights it has",
                c.d,
                c.q,
                c.kv,
                w.len()
            )));
        }
        let mut parts = Vec::with_capacity(8);
        let mut rest = w;
        for n in sizes.into_iter().flatten() {
            let (head, tail) = rest.split_at(n);
            parts.push(head);
            rest = tail;
        }
        let transpose = |m: &[f32], rows: usize, cols: usize| {
            let mut t = vec![0f32; m.len()];
            for (r, row) in m.chunks_exact(cols.max(1)).take(rows).enumerate() {
                for (j, v) in row.iter().enumerate() {
                    t[j * rows + r] = *v;
                }
            }
            t
        };
        Ok(Weights {
            wq: transpose(parts[0], c.q, c.d),
            wk: transpose(parts[1], c.kv, c.d),
            wv: transpose(parts[2], c.kv, c.d),
            wo: transpose(parts[3], c.d, c.q),
            bq: parts[4].to_vec(),
            bk: parts[5].to_vec(),
            bv: parts[6].to_vec(),
            bo: parts[7].to_vec(),
            q_norm: norm_blob(layer, path, "q_norm")?,
            k_norm: norm_blob(layer, path, "k_norm")?,
        })
    }
}

/// A `q_norm`/`k_norm` blob of the `.entity` file: raw little-endian f32.
fn norm_blob(layer: &Layer, path: &str, suffix: &str) -> Result<Option<Vec<f32>>> {
    let Some(blob) = layer.extra_blobs.iter().find(|b| b.suffix == suffix) else {
        return Ok(None);
    };
    if blob.bytes.len() % 4 != 0 {
        return Err(LoomError::InvalidNetwork(format!(
            "{path}.{suffix}: {} bytes is not a whole number of float32 values",
            blob.bytes.len()
        )));
    }
    Ok(Some(
        blob.bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    ))
}

/// Loom's `mhaParseLayout`: `(batch, seq)`. `d` is not 0.
fn layout(layer: &Layer, path: &str, x: &Tensor, d: usize) -> Result<(usize, usize)> {
    let seq_len = if layer.seq_length > 0 {
        dim(layer.seq_length, "seq_length", path)?
    } else {
        0
    };
    mha_layout(&x.shape, x.data.len(), d, seq_len).ok_or_else(|| {
        LoomError::InvalidInput(format!(
            "{path}: MultiHeadAttention needs a [seq, {d}] or [batch, seq, {d}] input, got a scalar"
        ))
    })
}

/// Loom's `mhaParseLayout`: `(batch, seq)` of an input of `shape` holding `len` values, for width `d` and the
/// layer's `seq_length` (0 when unset); `None` for a scalar. Shared by the CPU and GPU paths.
pub(crate) fn mha_layout(shape: &[usize], len: usize, d: usize, seq_len: usize) -> Option<(usize, usize)> {
    let per_row = |rows: usize| len / rows.saturating_mul(d);
    let (batch, seq) = match *shape {
        [] => return None,
        [b, s, last] => {
            if last == d {
                (b, s)
            } else if seq_len > 0 {
                (b, seq_len)
            } else if b > 0 {
                (b, per_row(b))
            } else {
                (b, s)
            }
        }
        [s, last] => {
            if last == d {
                (1, s)
            } else if seq_len > 0 {
                (1, seq_len)
            } else {
                (1, per_row(1))
            }
        }
        _ => {
            if seq_len > 0 {
                (1, seq_len)
            } else {
                (1, per_row(1))
            }
        }
    };
    Some((batch, seq.max(1)))
}

pub(crate) fn mha(layer: &Layer, path: &str, x: &Tensor, state: &mut State) -> Result<Tensor> {
    let c = Config::new(layer, path)?;
    let (batch, seq) = layout(layer, path, x, c.d)?;
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("layout refuses scalars") = c.d;
    let mut out = zeros(product(&shape, "output shape", path)?, path)?;
    let used = product(&[batch, seq, c.d], "input size", path)?;
    if used > x.data.len() || used > out.len() {
        return Err(LoomError::InvalidInput(format!(
            "{path}: MultiHeadAttention reads {batch}×{seq}×{} values from an input of shape {:?} (Loom would panic)",
            c.d, x.shape
        )));
    }
    if batch > 0 && (c.kv_heads == 0 || c.heads / c.kv_heads == 0) {
        return Err(LoomError::InvalidNetwork(format!(
            "{path}: {} heads cannot share {} kv heads (Loom would divide by zero)",
            c.heads, c.kv_heads
        )));
    }

    if !state.mha.contains_key(path) {
        let w = weights(layer, path, state)?;
        let t = Weights::new(layer, path, &w, &c)?;
        // Only the transposed copy is used from now on.
        state.weights.remove(path);
        state.mha.insert(
            path.to_string(),
            MhaState {
                weights: t,
                cache: None,
            },
        );
    }
    let MhaState { weights: w, cache } = state.mha.get_mut(path).expect("inserted above");
    // Loom keeps the cache only for autoregressive decoding: one row of one token after a warm cache.
    let warm = match cache {
        Some(k) if batch == 1 && seq == 1 && k.offset > 0 => Some(k.offset),
        _ => None,
    };
    let start = warm.unwrap_or(0);
    // kv_head = h / (heads / kv_heads) may pass the last kv head when heads is not a multiple of kv_heads: Loom then
    // reads into the next cache row, which flat indexing reproduces, and panics past the cache's end.
    if batch > 0 && c.heads > 0 {
        let last_row = (start + batch * seq - 1).min(MAX_SEQ_LEN - 1);
        let end = (c.heads - 1) / (c.heads / c.kv_heads) * c.hd + c.hd;
        if last_row * c.kv + end > MAX_SEQ_LEN * c.kv {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: {} heads over {} kv heads read past the KV cache (Loom would panic)",
                c.heads, c.kv_heads
            )));
        }
    }
    if warm.is_none() {
        let rows = product(&[MAX_SEQ_LEN, c.kv], "KV cache", path)?;
        *cache = Some(KvCache {
            k: zeros(rows, path)?,
            v: zeros(rows, path)?,
            offset: 0,
        });
    }
    let cache = cache.as_mut().expect("set above");
    let n = seq * c.d;
    for b in 0..batch {
        attend(
            &c,
            w,
            cache,
            &x.data[b * n..(b + 1) * n],
            start + b * seq,
            seq,
            &mut out[b * n..(b + 1) * n],
        )?;
    }
    cache.offset = start + batch * seq;
    Tensor::new(out, shape)
}

/// One batch row: `x` holds `seq` tokens at positions `base..`, `y` receives their outputs.
fn attend(
    c: &Config,
    w: &Weights,
    cache: &mut KvCache,
    x: &[f32],
    base: usize,
    seq: usize,
    y: &mut [f32],
) -> Result<()> {
    let half = c.hd / 2;
    let mut q = vec![0f64; seq * c.q];
    let mut k64 = vec![0f64; c.kv];
    let mut v64 = vec![0f64; c.kv];
    // θ^(2j/hd) per rotated pair, then cos and sin of each position's angles.
    let denom: Vec<f64> = (0..half)
        .map(|j| gomath::pow_frac(c.theta, (2 * j) as f64 / c.hd as f64))
        .collect();
    let mut rot = vec![(0f64, 0f64); half];
    for s in 0..seq {
        let pos = base + s;
        let xs = &x[s * c.d..(s + 1) * c.d];
        let qs = &mut q[s * c.q..(s + 1) * c.q];
        qs.iter_mut().zip(&w.bq).for_each(|(a, b)| *a = f64::from(*b));
        k64.iter_mut().zip(&w.bk).for_each(|(a, b)| *a = f64::from(*b));
        v64.iter_mut().zip(&w.bv).for_each(|(a, b)| *a = f64::from(*b));
        for (j, xj) in xs.iter().enumerate() {
            let xj = f64::from(*xj);
            axpy(qs, xj, &w.wq[j * c.q..(j + 1) * c.q]);
            axpy(&mut k64, xj, &w.wk[j * c.kv..(j + 1) * c.kv]);
            axpy(&mut v64, xj, &w.wv[j * c.kv..(j + 1) * c.kv]);
        }
        let row = (pos % MAX_SEQ_LEN) * c.kv;
        let k_row = &mut cache.k[row..row + c.kv];
        k_row.iter_mut().zip(&k64).for_each(|(a, b)| *a = *b as f32);
        cache.v[row..row + c.kv]
            .iter_mut()
            .zip(&v64)
            .for_each(|(a, b)| *a = *b as f32);

        if let Some(g) = &w.q_norm {
            head_rms_norm(qs, g, c.heads, c.hd, |v| v);
        }
        if let Some(g) = &w.k_norm {
            head_rms_norm(k_row, g, c.kv_heads, c.hd, |v| v as f32);
        }

        for (j, r) in rot.iter_mut().enumerate() {
            let angle = pos as f64 / denom[j];
            *r = (gomath::cos(angle), gomath::sin(angle));
        }
        for head in qs[..c.heads * c.hd].chunks_exact_mut(c.hd.max(1)) {
            let (lo, hi) = head.split_at_mut(half);
            for ((a, b), (cs, sn)) in lo.iter_mut().zip(hi.iter_mut()).zip(&rot) {
                let (v0, v1) = (*a, *b);
                *a = v0 * cs - v1 * sn;
                *b = v0 * sn + v1 * cs;
            }
        }
        for head in k_row.chunks_exact_mut(c.hd.max(1)) {
            let (lo, hi) = head.split_at_mut(half);
            for ((a, b), (cs, sn)) in lo.iter_mut().zip(hi.iter_mut()).zip(&rot) {
                let (v0, v1) = (f64::from(*a), f64::from(*b));
                *a = (v0 * cs - v1 * sn) as f32;
                *b = (v0 * sn + v1 * cs) as f32;
            }
        }
    }

    let heads_per_kv = c.heads / c.kv_heads;
    let scale = 1.0 / (c.hd as f64).sqrt();
    let mut scores = Vec::new();
    scores
        .try_reserve_exact(base + seq)
        .map_err(|_| LoomError::InvalidInput(format!("cannot allocate scores for {} positions", base + seq)))?;
    let mut att = vec![0f64; c.q];
    let mut acc = vec![0f64; c.hd];
    for s in 0..seq {
        let last = base + s;
        let qs = &q[s * c.q..(s + 1) * c.q];
        att.fill(0.0);
        for h in 0..c.heads {
            let off = h / heads_per_kv * c.hd;
            let qh = &qs[h * c.hd..(h + 1) * c.hd];
            let at = |p: usize| {
                let i = (p % MAX_SEQ_LEN) * c.kv + off;
                i..i + c.hd
            };
            scores.clear();
            let mut max = -1e9f64;
            for p in 0..=last {
                let kp = &cache.k[at(p)];
                let mut dot = 0f64;
                for (a, b) in qh.iter().zip(kp) {
                    dot += a * f64::from(*b);
                }
                let score = dot * scale;
                scores.push(score);
                if score > max {
                    max = score;
                }
            }
            let mut sum = 0f64;
            for e in scores.iter_mut() {
                *e = gomath::exp(*e - max);
                sum += *e;
            }
            acc.fill(0.0);
            for (p, e) in scores.iter().enumerate() {
                let vp = &cache.v[at(p)];
                acc.iter_mut().zip(vp).for_each(|(a, v)| *a += e * f64::from(*v));
            }
            att[h * c.hd..(h + 1) * c.hd]
                .iter_mut()
                .zip(&acc)
                .for_each(|(o, a)| *o = a / sum);
        }
        let ys = &mut y[s * c.d..(s + 1) * c.d];
        let mut o: Vec<f64> = w.bo.iter().map(|b| f64::from(*b)).collect();
        for (j, a) in att.iter().enumerate() {
            axpy(&mut o, *a, &w.wo[j * c.d..(j + 1) * c.d]);
        }
        ys.iter_mut().zip(&o).for_each(|(y, v)| *y = *v as f32);
    }
    Ok(())
}

/// `acc[i] += a · w[i]` in f64: one more term of every output's sum, each output in its own lane.
fn axpy(acc: &mut [f64], a: f64, w: &[f32]) {
    acc.iter_mut().zip(w).for_each(|(s, w)| *s += a * f64::from(*w));
}

/// Loom's per-head RMSNorm: `v · (1/√(Σv²/hd + 1e-6)) · γ`, γ per head dim or per element (else 1); `round` stores
/// the f64 result (identity for Q, f32 for K). The epsilon is Loom's default: loaded MHA layers never get another.
fn head_rms_norm<T: Copy + Into<f64>>(
    data: &mut [T],
    gamma: &[f32],
    heads: usize,
    hd: usize,
    round: impl Fn(f64) -> T,
) {
    if heads == 0 || hd == 0 || data.len() < heads * hd {
        return;
    }
    for (h, head) in data.chunks_exact_mut(hd).take(heads).enumerate() {
        let sum_sq = head.iter().fold(0f64, |s, v| {
            let v: f64 = (*v).into();
            s + v * v
        });
        let rms = (sum_sq / hd as f64 + 1e-6).sqrt();
        if rms == 0.0 {
            continue;
        }
        let inv = 1.0 / rms;
        for (i, v) in head.iter_mut().enumerate() {
            let g = if gamma.len() == hd {
                f64::from(gamma[i])
            } else if gamma.len() == heads * hd {
                f64::from(gamma[h * hd + i])
            } else {
                1.0
            };
            *v = round((*v).into() * inv * g);
        }
    }
}

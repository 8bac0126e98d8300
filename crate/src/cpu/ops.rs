//! Plain f32 ops for decoders (RMSNorm, RoPE, attention over a KV cache, SwiGLU, residual add, argmax). They
//! know nothing of Loom's `Network`: the LLM engines are built from them (and the quantized matrix products in
//! [`crate::quant`]); each GPU kernel for these ops is tested against its twin here.
//!
//! Unlike the Loom layers beside them these are not bit-exact with Go: sums run in f32 in whatever order is
//! fastest, as llama.cpp's do.

/// Rows of `x` (each `w.len()` long) normalised in place: `x · 1/sqrt(mean(x²) + eps) · w`.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        let scale = rms_scale(row, eps);
        for (v, g) in row.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    }
}

/// Like [`rms_norm`], writing to `out` (rows of `x` unchanged).
pub fn rms_norm_into(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    for (row, o) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        let scale = rms_scale(row, eps);
        for ((o, v), g) in o.iter_mut().zip(row).zip(w) {
            *o = v * scale * g;
        }
    }
}

fn rms_scale(row: &[f32], eps: f32) -> f32 {
    let ss: f32 = sum(row.iter().map(|v| v * v));
    1.0 / (ss / row.len() as f32 + eps).sqrt()
}

/// An f32 sum in 8 lanes, so the compiler vectorises it (a plain fold is sequential by IEEE rules).
fn sum(values: impl Iterator<Item = f32>) -> f32 {
    let mut lanes = [0f32; 8];
    for (i, v) in values.enumerate() {
        lanes[i % 8] += v;
    }
    lanes.iter().sum()
}

/// Dot product in 8 lanes.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// How RoPE pairs a head's dimensions (see [`crate::llm::config::RopeStyle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopePairs {
    /// i with i + dims/2.
    Half,
    /// 2i with 2i + 1.
    Adjacent,
}

/// RoPE's inverse frequencies `theta^(-2i/dims)` for i < dims/2, in f64 as the reference computes them.
pub fn rope_inv_freq(theta: f32, dims: usize) -> Vec<f64> {
    (0..dims / 2)
        .map(|i| 1.0 / f64::from(theta).powf((2 * i) as f64 / dims as f64))
        .collect()
}

/// `(cos, sin)` of each pair's angle at position `pos`, computed in f64 and rounded once (the GPU's RoPE table
/// holds the same values).
pub fn rope_cos_sin(pos: usize, inv_freq: &[f64]) -> impl Iterator<Item = (f32, f32)> + '_ {
    inv_freq.iter().map(move |f| {
        let a = pos as f64 * f;
        (a.cos() as f32, a.sin() as f32)
    })
}

/// Rotates every head of one token's `x` (heads × head_dim) at position `pos`: the first `2·inv_freq.len()`
/// dimensions of each head, paired as `pairs` says.
pub fn rope(x: &mut [f32], head_dim: usize, pos: usize, inv_freq: &[f64], pairs: RopePairs) {
    let half = inv_freq.len();
    let cs: Vec<(f32, f32)> = rope_cos_sin(pos, inv_freq).collect();
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cs.iter().enumerate() {
            let (a, b) = match pairs {
                RopePairs::Half => (i, i + half),
                RopePairs::Adjacent => (2 * i, 2 * i + 1),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x1 * c + x0 * s;
        }
    }
}

/// Causal attention of one query head over `len` cached positions: `q` is the head's `head_dim` values; `k`, `v`
/// are `[pos][kv_dim]` with at least `len` rows, the head's kv head at `kv_offset` in each; `out` is the head's
/// `head_dim` values; `scores` is scratch of at least `len`. (GQA: query head h reads kv head
/// h / (heads / kv_heads).)
#[allow(clippy::too_many_arguments)]
pub fn attention_head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    kv_dim: usize,
    kv_offset: usize,
    out: &mut [f32],
    scores: &mut [f32],
) {
    let head_dim = q.len();
    let scale = 1.0 / (head_dim as f32).sqrt();
    let scores = &mut scores[..len];
    for (t, s) in scores.iter_mut().enumerate() {
        *s = dot(q, &k[t * kv_dim + kv_offset..][..head_dim]) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    for (t, &p) in scores.iter().enumerate() {
        let vt = &v[t * kv_dim + kv_offset..][..head_dim];
        for (o, x) in out.iter_mut().zip(vt) {
            *o += p * x;
        }
    }
}

/// Softmax in place (max-subtracted).
pub fn softmax(x: &mut [f32]) {
    // A compare, not `f32::max` (a libm call in wasm); NaNs are passed over as `f32::max` does.
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for v in x.iter_mut() {
        *v -= max;
    }
    exp_in_place(x);
    let inv = 1.0 / sum(x.iter().copied());
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// SwiGLU's product in place: `gate = silu(gate) · up`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let mut e = [0f32; 64];
    for (gate, up) in gate.chunks_mut(64).zip(up.chunks(64)) {
        let e = &mut e[..gate.len().min(up.len())];
        for (e, g) in e.iter_mut().zip(gate.iter()) {
            *e = -g;
        }
        exp_in_place(e);
        for ((g, u), e) in gate.iter_mut().zip(up).zip(e.iter()) {
            *g = *g / (1.0 + e) * u;
        }
    }
}

/// `x = eˣ` for each value. In wasm, four at a time by [`exp4`] (libm's `expf` is a scalar call per value there).
fn exp_in_place(x: &mut [f32]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        use core::arch::wasm32::*;
        let mut chunks = x.chunks_exact_mut(4);
        for c in &mut chunks {
            let e = exp4(f32x4(c[0], c[1], c[2], c[3]));
            c.copy_from_slice(&[
                f32x4_extract_lane::<0>(e),
                f32x4_extract_lane::<1>(e),
                f32x4_extract_lane::<2>(e),
                f32x4_extract_lane::<3>(e),
            ]);
        }
        for v in chunks.into_remainder() {
            *v = f32x4_extract_lane::<0>(exp4(f32x4_splat(*v)));
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for v in x.iter_mut() {
        *v = v.exp();
    }
}

/// `eˣ` in four lanes: Cephes' `expf` (`x = n·ln 2 + r`, a degree-7 polynomial in `r`, times `2ⁿ`), within 2 ulp of
/// the true value. `x` is clamped to [−87.3, 88]: `eˣ` stays a normal float32 (below, it would be subnormal or 0;
/// above 88, the `2ⁿ` built from bits would overflow), which moves nothing the decoder computes; NaN stays NaN.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn exp4(x: core::arch::wasm32::v128) -> core::arch::wasm32::v128 {
    use core::arch::wasm32::*;
    let x = f32x4_min(f32x4_max(x, f32x4_splat(-87.336_55)), f32x4_splat(88.0));
    let n = f32x4_nearest(f32x4_mul(x, f32x4_splat(std::f32::consts::LOG2_E)));
    // ln 2 in two parts, so that `n·ln2_high` is exact.
    let r = f32x4_sub(x, f32x4_mul(n, f32x4_splat(0.693_359_4)));
    let r = f32x4_sub(r, f32x4_mul(n, f32x4_splat(-2.121_944_4e-4)));
    let mut p = f32x4_splat(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
    }
    let p = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(p, r), r), r), f32x4_splat(1.0));
    let pow2n = i32x4_shl(i32x4_add(i32x4_trunc_sat_f32x4(n), i32x4_splat(127)), 23);
    f32x4_mul(p, pow2n)
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x += b` on every row of `x`.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add(row, b);
    }
}

/// Index of the largest value (the lowest index on ties; NaN never wins).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] || x[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_pairs_agree_under_the_llama_cpp_permutation() {
        // Adjacent-pair RoPE on permuted rows equals half-split RoPE on the original rows.
        let hd = 8;
        let x: Vec<f32> = (0..hd).map(|i| i as f32 * 0.37 - 1.0).collect();
        let perm: Vec<f32> = (0..hd / 2).flat_map(|j| [x[j], x[j + hd / 2]]).collect();
        let inv = rope_inv_freq(10000.0, hd);
        let (mut a, mut b) = (x.clone(), perm.clone());
        rope(&mut a, hd, 5, &inv, RopePairs::Half);
        rope(&mut b, hd, 5, &inv, RopePairs::Adjacent);
        let back: Vec<f32> = (0..hd)
            .map(|i| if i < hd / 2 { b[2 * i] } else { b[2 * (i - hd / 2) + 1] })
            .collect();
        assert_eq!(a, back);
    }

    #[test]
    fn argmax_takes_the_lowest_index_on_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 2.0, 1.0]), 1);
    }
}

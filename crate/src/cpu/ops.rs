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

/// What RoPE rotates by: an inverse frequency per rotated pair, and a factor on cos and sin (the attention factor
/// of YaRN and LongRoPE; 1 for plain RoPE).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFreqs {
    pub inv_freq: Vec<f64>,
    pub mscale: f64,
}

impl RopeFreqs {
    /// Plain RoPE of base `theta` over `dims` dimensions.
    pub fn plain(theta: f32, dims: usize) -> RopeFreqs {
        RopeFreqs {
            inv_freq: rope_inv_freq(theta, dims),
            mscale: 1.0,
        }
    }

    /// Rotated pairs.
    pub fn pairs(&self) -> usize {
        self.inv_freq.len()
    }

    /// `(cos, sin)` of each pair's angle at position `pos`, times the factor, computed in f64 and rounded once (the
    /// GPU's RoPE table holds the same values).
    pub fn cos_sin(&self, pos: usize) -> impl Iterator<Item = (f32, f32)> + '_ {
        self.inv_freq.iter().map(move |f| {
            let a = pos as f64 * f;
            ((a.cos() * self.mscale) as f32, (a.sin() * self.mscale) as f32)
        })
    }
}

/// Rotates every head of one token's `x` (heads × head_dim) at position `pos`: the first `2·freqs.pairs()`
/// dimensions of each head, paired as `pairs` says; the rest pass through (partial rotary).
pub fn rope(x: &mut [f32], head_dim: usize, pos: usize, freqs: &RopeFreqs, pairs: RopePairs) {
    let half = freqs.pairs();
    let cs: Vec<(f32, f32)> = freqs.cos_sin(pos).collect();
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

/// How a head's scores come from its dot products: `q·k · scale` (1/√head_dim, or a family's own), then
/// `cap · tanh(score / cap)` when there is a soft cap (Gemma 2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scores {
    pub scale: f32,
    pub cap: Option<f32>,
}

impl Scores {
    /// `q·k / √head_dim`, uncapped.
    pub fn standard(head_dim: usize) -> Scores {
        Scores {
            scale: 1.0 / (head_dim as f32).sqrt(),
            cap: None,
        }
    }

    fn soft_cap(self, scores: &mut [f32]) {
        if let Some(cap) = self.cap {
            scores.iter_mut().for_each(|s| *s = cap * (*s / cap).tanh());
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
    rule: Scores,
    out: &mut [f32],
    scores: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if q.len().is_multiple_of(8)
        && out.len() == q.len()
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
    {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { attention_head_avx2(q, k, v, len, kv_dim, kv_offset, rule, out, scores) };
    }
    let head_dim = q.len();
    let scores = &mut scores[..len];
    for (t, s) in scores.iter_mut().enumerate() {
        *s = dot(q, &k[t * kv_dim + kv_offset..][..head_dim]) * rule.scale;
    }
    rule.soft_cap(scores);
    softmax(scores);
    out.fill(0.0);
    for (t, &p) in scores.iter().enumerate() {
        let vt = &v[t * kv_dim + kv_offset..][..head_dim];
        for (o, x) in out.iter_mut().zip(vt) {
            *o += p * x;
        }
    }
}

/// [`attention_head`] for the query heads that share one kv head (a GQA group): `q` and `out` hold the
/// `q.len() / head_dim` heads one after another; `scores` is scratch of at least `heads · len`. With AVX-512 (and
/// heads of whole 64-value chunks) each key and value row is read once for up to four heads.
#[allow(clippy::too_many_arguments)]
pub fn attention_group(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    kv_dim: usize,
    kv_offset: usize,
    head_dim: usize,
    rule: Scores,
    out: &mut [f32],
    scores: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    let heads = q.len() / head_dim.max(1);
    #[cfg(target_arch = "x86_64")]
    if head_dim.is_multiple_of(64)
        && heads * head_dim == q.len()
        && out.len() == q.len()
        && kv_offset + head_dim <= kv_dim
        && len * kv_dim <= k.len().min(v.len())
        && scores.len() >= heads * len
        && crate::quant::simd_in_use().starts_with("avx512")
    {
        let mut first = 0;
        while first < heads {
            let take = (heads - first).min(4);
            let (q, out) = (&q[first * head_dim..], &mut out[first * head_dim..]);
            let (k, v) = (k[kv_offset..].as_ptr(), v[kv_offset..].as_ptr());
            let group = GroupRows {
                k,
                v,
                len,
                stride: kv_dim,
                head_dim,
                rule,
            };
            // SAFETY: `simd_in_use` reports AVX-512 (F, BW) with AVX2 and FMA; the checks above bound every read.
            unsafe {
                match take {
                    4 => attention_group_avx512::<4>(q, group, out, scores),
                    3 => attention_group_avx512::<3>(q, group, out, scores),
                    2 => attention_group_avx512::<2>(q, group, out, scores),
                    _ => attention_group_avx512::<1>(q, group, out, scores),
                }
            }
            first += take;
        }
        return;
    }
    for (q, out) in q.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim)) {
        attention_head(q, k, v, len, kv_dim, kv_offset, rule, out, scores);
    }
}

/// One GQA group's queries for consecutive tokens (a prompt's), with the keys and values they attend over, for
/// [`attention_tokens`].
#[derive(Clone, Copy)]
pub struct TokenQueries<'a> {
    /// Token `b`'s query heads, one after another: `q[b·stride..][..heads·head_dim]` (its output at the same place
    /// in `out`).
    pub q: &'a [f32],
    pub stride: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Token `b` attends positions `ranges[b].0..ranges[b].1` (at least one).
    pub ranges: &'a [(usize, usize)],
    /// The kv head's keys transposed ([`transpose_keys`]): value `i` of position `s` at `kt[i·len + s]`.
    pub kt: &'a [f32],
    pub len: usize,
    /// Position `s`'s value at `v[s·kv_dim + kv_offset..][..head_dim]`.
    pub v: &'a [f32],
    pub kv_dim: usize,
    pub kv_offset: usize,
    pub rule: Scores,
}

/// `kt[i·len + s] = k[s·kv_dim + kv_offset + i]`: one kv head's `len` keys, value by value, for
/// [`attention_tokens`].
pub fn transpose_keys(k: &[f32], len: usize, kv_dim: usize, kv_offset: usize, head_dim: usize, kt: &mut [f32]) {
    // Sixteen positions at a time, so that each value's sixteen writes fill one cache line (a position at a time,
    // each write was a line of its own: 2% of a prompt).
    for (block, keys) in k[..len * kv_dim].chunks(16 * kv_dim).enumerate() {
        for i in 0..head_dim {
            let out = &mut kt[i * len + 16 * block..];
            for (o, key) in out.iter_mut().zip(keys.chunks_exact(kv_dim)) {
                *o = key[kv_offset + i];
            }
        }
    }
}

/// Whether [`attention_tokens`] has a kernel for heads of `head_dim` on this CPU (AVX-512 or AVX2 with FMA, heads of
/// whole 64-value chunks); elsewhere it runs plain loops, and [`attention_group`] per token is faster.
pub fn attention_tokens_fast(head_dim: usize) -> bool {
    cfg!(target_arch = "x86_64")
        && head_dim.is_multiple_of(64)
        && head_dim > 0
        && matches!(crate::quant::simd_in_use(), s if s.starts_with("avx512") || s == "avx2")
}

/// Scratch [`attention_tokens`] needs for `tokens` tokens of `heads` heads over `len` positions.
pub fn attention_tokens_scratch(tokens: usize, heads: usize, len: usize) -> usize {
    tokens * heads * len.next_multiple_of(16)
}

/// [`attention_group`] for several tokens at once (a prompt's): each token's heads attend over its own range of
/// positions. With AVX-512 or AVX2 ([`attention_tokens_fast`]) the scores come sixteen (eight) positions to a vector
/// from the transposed keys (no sums across lanes) and each value row is read once for four heads (two).
///
/// # Panics
/// Where the shapes disagree (a range past `len`, `q` or `out` too short, `scores` shorter than
/// [`attention_tokens_scratch`]).
pub fn attention_tokens(a: &TokenQueries, out: &mut [f32], scores: &mut [f32]) {
    let (tokens, hd) = (a.ranges.len(), a.head_dim);
    let lo = a.ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = a.ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let need = tokens.saturating_sub(1) * a.stride + a.heads * hd;
    assert!(
        a.ranges.iter().all(|&(first, end)| first < end && end <= a.len)
            && a.q.len() >= need
            && out.len() >= need
            && a.kt.len() >= hd * a.len
            && a.len.saturating_sub(1) * a.kv_dim + a.kv_offset + hd <= a.v.len()
            && a.kv_offset + hd <= a.kv_dim
            && scores.len() >= attention_tokens_scratch(tokens, a.heads, hi - lo)
    );
    #[cfg(target_arch = "x86_64")]
    if attention_tokens_fast(hd) {
        // SAFETY: `attention_tokens_fast` checked the CPU and the head size; the assertion above bounds every read
        // and write.
        return unsafe {
            match crate::quant::simd_in_use().starts_with("avx512") {
                true => attention_tokens_simd::<Avx512Tokens>(a, (lo, hi), out, scores),
                false => attention_tokens_simd::<Avx2Tokens>(a, (lo, hi), out, scores),
            }
        };
    }
    for (b, &(first, end)) in a.ranges.iter().enumerate() {
        for h in 0..a.heads {
            let q = &a.q[b * a.stride + h * hd..][..hd];
            let s = &mut scores[..end - first];
            for (t, s) in s.iter_mut().enumerate() {
                *s = (0..hd).map(|i| q[i] * a.kt[i * a.len + first + t]).sum::<f32>() * a.rule.scale;
            }
            a.rule.soft_cap(s);
            softmax(s);
            let o = &mut out[b * a.stride + h * hd..][..hd];
            o.fill(0.0);
            for (t, &p) in s.iter().enumerate() {
                let row = &a.v[(first + t) * a.kv_dim + a.kv_offset..][..hd];
                o.iter_mut().zip(row).for_each(|(o, v)| *o += p * v);
            }
        }
    }
}

/// One instruction set's kernels for [`attention_tokens_simd`].
#[cfg(target_arch = "x86_64")]
trait TokenKernels {
    /// `out[k·width + j] = scale · q[k]·key(s + j)` for the 64 positions from `s` (those at and past `hi` read
    /// nothing and give 0; those past the row's `width` are not stored).
    ///
    /// # Safety
    /// As [`attention_tokens_simd`]; `out` points at position `s` of the first of `R` rows `width` apart.
    unsafe fn scores<const R: usize>(
        a: &TokenQueries,
        q: [*const f32; R],
        s: usize,
        hi: usize,
        out: *mut f32,
        width: usize,
    );

    /// `out[k][0..64] += Σ_s p[k][s − lo] · value(s)[0..64]` over `positions` (`v` pointing at position 0's first
    /// value of the chunk).
    ///
    /// # Safety
    /// As [`attention_tokens_simd`].
    unsafe fn values<const R: usize>(
        p: [*const f32; R],
        v: *const f32,
        kv_dim: usize,
        positions: (std::ops::Range<usize>, usize),
        out: [*mut f32; R],
    );
}

/// AVX-512 F with AVX2 and FMA: sixteen positions or values to a vector.
#[cfg(target_arch = "x86_64")]
struct Avx512Tokens;

#[cfg(target_arch = "x86_64")]
impl TokenKernels for Avx512Tokens {
    /// Sixteen positions to a vector, the keys past `hi` masked off.
    #[target_feature(enable = "avx512f,avx2,fma")]
    // `k` and `j` pick accumulators in two-dimensional arrays of registers.
    #[allow(clippy::needless_range_loop)]
    unsafe fn scores<const R: usize>(
        a: &TokenQueries,
        q: [*const f32; R],
        s: usize,
        hi: usize,
        out: *mut f32,
        width: usize,
    ) {
        use std::arch::x86_64::*;
        let masks: [__mmask16; 4] = std::array::from_fn(|j| {
            let valid = hi.saturating_sub(s + 16 * j).min(16);
            ((1u32 << valid) - 1) as u16
        });
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        for i in 0..a.head_dim {
            let at = a.kt.as_ptr().add(i * a.len + s);
            let keys: [__m512; 4] = std::array::from_fn(|j| _mm512_maskz_loadu_ps(masks[j], at.add(16 * j)));
            for k in 0..R {
                let qv = _mm512_set1_ps(*q[k].add(i));
                for j in 0..4 {
                    acc[k][j] = _mm512_fmadd_ps(qv, keys[j], acc[k][j]);
                }
            }
        }
        let scale = _mm512_set1_ps(a.rule.scale);
        for j in 0..4 {
            // Every vector with a position before `hi` is in the row (`width` is `hi − lo` rounded up to 16).
            if masks[j] != 0 {
                for k in 0..R {
                    _mm512_storeu_ps(out.add(k * width + 16 * j), _mm512_mul_ps(acc[k][j], scale));
                }
            }
        }
    }

    unsafe fn values<const R: usize>(
        p: [*const f32; R],
        v: *const f32,
        kv_dim: usize,
        positions: (std::ops::Range<usize>, usize),
        out: [*mut f32; R],
    ) {
        token_values::<R>(p, v, kv_dim, positions, out)
    }
}

/// AVX2 and FMA: eight positions or values to a vector, in parts that fit its sixteen registers.
#[cfg(target_arch = "x86_64")]
struct Avx2Tokens;

#[cfg(target_arch = "x86_64")]
impl TokenKernels for Avx2Tokens {
    /// Sixteen positions at a time (two vectors for each of `R` rows), the keys past `hi` masked off.
    #[target_feature(enable = "avx2,fma")]
    // `k` and `j` pick accumulators in two-dimensional arrays of registers.
    #[allow(clippy::needless_range_loop)]
    unsafe fn scores<const R: usize>(
        a: &TokenQueries,
        q: [*const f32; R],
        s: usize,
        hi: usize,
        out: *mut f32,
        width: usize,
    ) {
        use std::arch::x86_64::*;
        let scale = _mm256_set1_ps(a.rule.scale);
        for part in (s..s + 64).step_by(16).take_while(|&at| at < hi) {
            let valid = [0, 8].map(|j| hi.saturating_sub(part + j).min(8) as i32);
            let masks =
                valid.map(|v| _mm256_cmpgt_epi32(_mm256_set1_epi32(v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for i in 0..a.head_dim {
                let at = a.kt.as_ptr().add(i * a.len + part);
                let keys = [
                    _mm256_maskload_ps(at, masks[0]),
                    _mm256_maskload_ps(at.add(8), masks[1]),
                ];
                for k in 0..R {
                    let qv = _mm256_set1_ps(*q[k].add(i));
                    for j in 0..2 {
                        acc[k][j] = _mm256_fmadd_ps(qv, keys[j], acc[k][j]);
                    }
                }
            }
            for j in 0..2 {
                // A vector with a position before `hi` is in the row (`width` is `hi − lo` rounded up to 16).
                if valid[j] > 0 {
                    for k in 0..R {
                        _mm256_storeu_ps(out.add(k * width + part - s + 8 * j), _mm256_mul_ps(acc[k][j], scale));
                    }
                }
            }
        }
    }

    unsafe fn values<const R: usize>(
        p: [*const f32; R],
        v: *const f32,
        kv_dim: usize,
        (positions, lo): (std::ops::Range<usize>, usize),
        out: [*mut f32; R],
    ) {
        // Two rows by 32 values at a time (eight sums).
        for c in [0, 32] {
            let mut k = 0;
            while k < R {
                match R - k {
                    1 => token_values_avx2::<1>([p[k]], v.add(c), kv_dim, (positions.clone(), lo), [out[k].add(c)]),
                    _ => token_values_avx2::<2>(
                        [p[k], p[k + 1]],
                        v.add(c),
                        kv_dim,
                        (positions.clone(), lo),
                        [out[k].add(c), out[k + 1].add(c)],
                    ),
                }
                k += 2;
            }
        }
    }
}

/// [`attention_tokens`] with `K`'s kernels: every (token, head) row's scores over the tokens' joint range, 64
/// positions at a time for every row (four rows at a time) while those keys are in the first-level cache; each row's
/// softmax over its own range (zeros elsewhere); then the values, 64 positions and 64 values at a time for every
/// row, into `out`.
///
/// # Safety
/// The CPU has `K`'s instructions; `a` and the slices as [`attention_tokens`] asserts, `(lo, hi)` the ranges' joint
/// range, `head_dim` a multiple of 64.
#[cfg(target_arch = "x86_64")]
unsafe fn attention_tokens_simd<K: TokenKernels>(
    a: &TokenQueries,
    (lo, hi): (usize, usize),
    out: &mut [f32],
    scores: &mut [f32],
) {
    let (hd, heads) = (a.head_dim, a.heads);
    let width = (hi - lo).next_multiple_of(16);
    let rows = a.ranges.len() * heads;
    // Row `r` is token `r / heads`, head `r % heads`; four rows at a time, then one.
    let step = |r: usize| if rows - r >= 4 { 4 } else { 1 };
    let q_row = |r: usize| a.q.as_ptr().add(r / heads * a.stride + r % heads * hd);
    let range = |r: usize| a.ranges[r / heads];
    let sp = scores.as_mut_ptr();
    for s in (lo..hi).step_by(64) {
        let mut r = 0;
        while r < rows {
            let at = sp.add(r * width + s - lo);
            match step(r) {
                4 => K::scores::<4>(a, std::array::from_fn(|k| q_row(r + k)), s, hi, at, width),
                _ => K::scores::<1>(a, [q_row(r)], s, hi, at, width),
            }
            r += step(r);
        }
    }
    for r in 0..rows {
        let (first, end) = range(r);
        let row = &mut scores[r * width..(r + 1) * width];
        let own = &mut row[first - lo..end - lo];
        a.rule.soft_cap(own);
        softmax(own);
        row[..first - lo].fill(0.0);
        row[end - lo..].fill(0.0);
    }
    let op = out.as_mut_ptr();
    let out_row = |r: usize| op.add(r / heads * a.stride + r % heads * hd);
    for r in 0..rows {
        std::slice::from_raw_parts_mut(out_row(r), hd).fill(0.0);
    }
    for c in (0..hd).step_by(64) {
        let v = a.v.as_ptr().add(a.kv_offset + c);
        for s in (lo..hi).step_by(64) {
            let mut r = 0;
            while r < rows {
                // The positions of this block any of these rows attends.
                let first = (r..r + step(r)).map(|r| range(r).0).min().unwrap_or(lo).max(s);
                let end = (r..r + step(r)).map(|r| range(r).1).max().unwrap_or(lo).min(s + 64);
                let p = |k: usize| sp.add((r + k) * width).cast_const();
                if first < end {
                    match step(r) {
                        4 => K::values::<4>(
                            std::array::from_fn(p),
                            v,
                            a.kv_dim,
                            (first..end, lo),
                            std::array::from_fn(|k| out_row(r + k).add(c)),
                        ),
                        _ => K::values::<1>([p(0)], v, a.kv_dim, (first..end, lo), [out_row(r).add(c)]),
                    }
                }
                r += step(r);
            }
        }
    }
}

/// `out[k][0..4L] += Σ_s p[k][s − lo] · value(s)[0..4L]` over `positions` for `R` rows, four vectors of `L` lanes
/// each: [`TokenKernels::values`]' work, for AVX-512 (`L` = 16, 64 values) and AVX2 (`L` = 8, half of them).
macro_rules! token_values {
    ($(#[$doc:meta])* $name:ident, $features:literal, $vector:ty, $lanes:literal, $load:ident, $splat:ident,
     $fmadd:ident, $store:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        // `k` and `m` pick accumulators in two-dimensional arrays of registers.
        #[allow(clippy::needless_range_loop)]
        unsafe fn $name<const R: usize>(
            p: [*const f32; R],
            v: *const f32,
            kv_dim: usize,
            (positions, lo): (std::ops::Range<usize>, usize),
            out: [*mut f32; R],
        ) {
            use std::arch::x86_64::*;
            let mut acc: [[$vector; 4]; R] =
                std::array::from_fn(|k| std::array::from_fn(|m| $load(out[k].add($lanes * m))));
            for s in positions {
                let row = v.add(s * kv_dim);
                let vv: [$vector; 4] = std::array::from_fn(|m| $load(row.add($lanes * m)));
                for k in 0..R {
                    let pk = $splat(*p[k].add(s - lo));
                    for m in 0..4 {
                        acc[k][m] = $fmadd(pk, vv[m], acc[k][m]);
                    }
                }
            }
            for k in 0..R {
                for m in 0..4 {
                    $store(out[k].add($lanes * m), acc[k][m]);
                }
            }
        }
    };
}

token_values!(
    /// [`TokenKernels::values`] with AVX-512.
    ///
    /// # Safety
    /// AVX-512 F with AVX2 and FMA; as [`TokenKernels::values`].
    token_values, "avx512f,avx2,fma", __m512, 16, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps
);

token_values!(
    /// [`TokenKernels::values`] with AVX2 over 32 values of `R` (at most two) rows.
    ///
    /// # Safety
    /// AVX2 and FMA; as [`TokenKernels::values`], with 32 values at each `out[k]` and each value row.
    token_values_avx2, "avx2,fma", __m256, 8, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps
);

/// The rows a GQA group attends over: `len` keys and values `stride` apart from `k` and `v` (the kv head's first
/// value), `head_dim` values each.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct GroupRows {
    k: *const f32,
    v: *const f32,
    len: usize,
    stride: usize,
    head_dim: usize,
    rule: Scores,
}

/// `G` heads of [`attention_group`] with AVX-512: scores four keys at a time (each key vector loaded once for the
/// `G` heads), then each head's softmax, then the values 64 at a time summed over every position in registers.
///
/// # Safety
/// AVX-512 F with AVX2 and FMA; `q` and `out` hold at least `G` heads; `rows` points at `len` readable rows of
/// `head_dim` (a multiple of 64); `scores` holds at least `G · len`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
// `g` and `j` pick accumulators in two-dimensional arrays of registers.
#[allow(clippy::needless_range_loop)]
unsafe fn attention_group_avx512<const G: usize>(q: &[f32], rows: GroupRows, out: &mut [f32], scores: &mut [f32]) {
    use std::arch::x86_64::*;
    let GroupRows {
        k,
        v,
        len,
        stride,
        head_dim: hd,
        rule,
    } = rows;
    assert!(q.len() >= G * hd && out.len() >= G * hd && scores.len() >= G * len && hd.is_multiple_of(64));
    let (qp, sp) = (q.as_ptr(), scores.as_mut_ptr());
    let half = |x: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
    let mut t = 0;
    while t + 4 <= len {
        let keys: [*const f32; 4] = std::array::from_fn(|j| k.add((t + j) * stride));
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for i in (0..hd).step_by(16) {
            let kv: [__m512; 4] = std::array::from_fn(|j| _mm512_loadu_ps(keys[j].add(i)));
            for g in 0..G {
                let qv = _mm512_loadu_ps(qp.add(g * hd + i));
                for j in 0..4 {
                    acc[g][j] = _mm512_fmadd_ps(qv, kv[j], acc[g][j]);
                }
            }
        }
        for g in 0..G {
            // Each key's 16 lanes to 8, then lane j of each 128-bit half holds part of key j's sum.
            let h: [__m256; 4] =
                std::array::from_fn(|j| _mm256_add_ps(_mm512_castps512_ps256(acc[g][j]), half(acc[g][j])));
            let h = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
            let sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
            _mm_storeu_ps(sp.add(g * len + t), _mm_mul_ps(sums, _mm_set1_ps(rule.scale)));
        }
        t += 4;
    }
    while t < len {
        let key = k.add(t * stride);
        for g in 0..G {
            let mut acc = _mm512_setzero_ps();
            for i in (0..hd).step_by(16) {
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(g * hd + i)), _mm512_loadu_ps(key.add(i)), acc);
            }
            *sp.add(g * len + t) = _mm512_reduce_add_ps(acc) * rule.scale;
        }
        t += 1;
    }
    for g in 0..G {
        let s = &mut scores[g * len..(g + 1) * len];
        rule.soft_cap(s);
        softmax(s);
    }
    let (sp, op) = (scores.as_ptr(), out.as_mut_ptr());
    for c in (0..hd).step_by(64) {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for t in 0..len {
            let row = v.add(t * stride + c);
            let vv: [__m512; 4] = std::array::from_fn(|m| _mm512_loadu_ps(row.add(16 * m)));
            for g in 0..G {
                let p = _mm512_set1_ps(*sp.add(g * len + t));
                for m in 0..4 {
                    acc[g][m] = _mm512_fmadd_ps(p, vv[m], acc[g][m]);
                }
            }
        }
        for g in 0..G {
            for m in 0..4 {
                _mm512_storeu_ps(op.add(g * hd + c + 16 * m), acc[g][m]);
            }
        }
    }
}

/// [`attention_head`] with AVX2 and FMA, for heads of whole 8-lane vectors (`out` as long as `q`): each score a dot in four FMA chains,
/// and the output 32 values at a time, summed over every position in registers. The plain loops were a quarter of
/// a 512-token prefill (the output went through memory at every position).
///
/// # Safety
/// The CPU has AVX2 and FMA; `q.len()` is a multiple of 8 and equals `out.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn attention_head_avx2(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    len: usize,
    kv_dim: usize,
    kv_offset: usize,
    rule: Scores,
    out: &mut [f32],
    scores: &mut [f32],
) {
    let head_dim = q.len();
    // Every row read below: `len` rows of `kv_dim`, the head's `head_dim` values at `kv_offset` in each.
    assert!(kv_offset + head_dim <= kv_dim && len * kv_dim <= k.len().min(v.len()) && len <= scores.len());
    let scale = rule.scale;
    let scores = &mut scores[..len];
    let kp = k.as_ptr().add(kv_offset);
    match head_dim / 8 {
        8 => head_scores::<8>(q, kp, kv_dim, scale, scores),
        16 => head_scores::<16>(q, kp, kv_dim, scale, scores),
        32 => head_scores::<32>(q, kp, kv_dim, scale, scores),
        _ => {
            for (t, s) in scores.iter_mut().enumerate() {
                *s = dot(q, &k[t * kv_dim + kv_offset..][..head_dim]) * scale;
            }
        }
    }
    rule.soft_cap(scores);
    softmax(scores);
    let mut c = 0;
    while c < head_dim {
        let vp = v.as_ptr().add(kv_offset + c);
        let op = out.as_mut_ptr().add(c);
        match (head_dim - c) / 8 {
            1 => weighted_rows::<1>(scores, vp, kv_dim, op),
            2 => weighted_rows::<2>(scores, vp, kv_dim, op),
            3 => weighted_rows::<3>(scores, vp, kv_dim, op),
            _ => weighted_rows::<4>(scores, vp, kv_dim, op),
        }
        c += 32.min(head_dim - c);
    }
}

/// `scores[t] = scale · q·k[t·stride..][0..8D]`, four positions at a time (each of `q`'s 8-lane vectors loaded once
/// for four keys, the four sums reduced together).
///
/// # Safety
/// AVX2 and FMA; `q.len() == 8D`; `k` points at `scores.len()` rows of `stride` floats with `8D` readable at each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn head_scores<const D: usize>(q: &[f32], k: *const f32, stride: usize, scale: f32, scores: &mut [f32]) {
    use std::arch::x86_64::*;
    assert_eq!(q.len(), 8 * D);
    let qp = q.as_ptr();
    let mut quads = scores.chunks_exact_mut(4);
    let mut t = 0;
    for s4 in &mut quads {
        let rows: [*const f32; 4] = std::array::from_fn(|j| k.add((t + j) * stride));
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in 0..D {
            let qv = _mm256_loadu_ps(qp.add(8 * i));
            for j in 0..4 {
                acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows[j].add(8 * i)), acc[j]);
            }
        }
        // Lane j of each half: a partial sum of key j; the halves added give the four sums.
        let h = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        let sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        _mm_storeu_ps(s4.as_mut_ptr(), _mm_mul_ps(sums, _mm_set1_ps(scale)));
        t += 4;
    }
    for s in quads.into_remainder() {
        let row = k.add(t * stride);
        let mut acc = _mm256_setzero_ps();
        for i in 0..D {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(8 * i)), _mm256_loadu_ps(row.add(8 * i)), acc);
        }
        let sum = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
        let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
        *s = _mm_cvtss_f32(_mm_add_ss(sum, _mm_movehdup_ps(sum))) * scale;
        t += 1;
    }
}

/// `out[0..8N] = Σ_t p[t] · v[t·stride..][0..8N]`, the sums in N registers.
///
/// # Safety
/// AVX2 and FMA; `v` points at `p.len()` rows of `stride` floats with `8N` readable at each, `out` at `8N` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_rows<const N: usize>(p: &[f32], v: *const f32, stride: usize, out: *mut f32) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); N];
    for (t, &p) in p.iter().enumerate() {
        let (pv, row) = (_mm256_set1_ps(p), v.add(t * stride));
        for (i, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(pv, _mm256_loadu_ps(row.add(8 * i)), *acc);
        }
    }
    for (i, acc) in acc.into_iter().enumerate() {
        _mm256_storeu_ps(out.add(8 * i), acc);
    }
}

/// Softmax in place (max-subtracted).
pub fn softmax(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::quant::simd_in_use().starts_with("avx512") {
        // SAFETY: `simd_in_use` reports AVX-512 (F) only where the CPU has it.
        return unsafe { softmax_avx512(x) };
    }
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

/// [`softmax`] sixteen lanes at a time in three passes (the maximum; the exponentials and their sum; the scale): the
/// passes of the plain loops were a tenth of a 512-token prefill.
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_avx512(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let (n, p) = (x.len(), x.as_mut_ptr());
    let body = n - n % 16;
    let tail: __mmask16 = ((1u32 << (n % 16)) - 1) as u16;
    // `max(v, m)` returns its second operand where `v` is NaN: NaNs are passed over as the plain loop passes them.
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..body).step_by(16) {
        m = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), m);
    }
    m = _mm512_mask_max_ps(m, tail, _mm512_maskz_loadu_ps(tail, p.add(body)), m);
    let max = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    let mut total = _mm512_setzero_ps();
    for i in (0..body).step_by(16) {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), max));
        _mm512_storeu_ps(p.add(i), e);
        total = _mm512_add_ps(total, e);
    }
    let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p.add(body)), max));
    _mm512_mask_storeu_ps(p.add(body), tail, e);
    total = _mm512_mask_add_ps(total, tail, total, e);
    let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(total));
    for i in (0..body).step_by(16) {
        _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), inv));
    }
    let v = _mm512_maskz_loadu_ps(tail, p.add(body));
    _mm512_mask_storeu_ps(p.add(body), tail, _mm512_mul_ps(v, inv));
}

/// Cephes' `expf`, which [`exp4`], [`exp8`] and [`exp16`] compute at three vector widths: `x = n·ln 2 + r`, a
/// degree-7 polynomial in `r`, times `2ⁿ`, within 2 ulp of the true value. `x` is clamped to
/// [`EXP_MIN`, `EXP_MAX`]: `eˣ` stays a normal float32 (below, it would be subnormal or 0; above 88, the `2ⁿ` built
/// from bits would overflow), which moves nothing the decoder computes; NaN stays NaN.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
mod cephes_exp {
    pub const EXP_MIN: f32 = -87.336_55;
    pub const EXP_MAX: f32 = 88.0;
    /// ln 2 in two parts, `LN2_HIGH + LN2_LOW`, so that `n·LN2_HIGH` is exact.
    pub const LN2_HIGH: f32 = 0.693_359_4;
    pub const LN2_LOW: f32 = -2.121_944_4e-4;
    /// The polynomial's coefficients, highest degree first (Horner's order).
    pub const POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
}

/// `eˣ` in sixteen lanes by [`cephes_exp`].
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use cephes_exp::*;
    use std::arch::x86_64::*;
    let c = _mm512_set1_ps;
    // `max`/`min` return their second operand when either is NaN: `x` second keeps a NaN.
    let x = _mm512_min_ps(c(EXP_MAX), _mm512_max_ps(c(EXP_MIN), x));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        x,
        c(std::f32::consts::LOG2_E),
    ));
    let r = _mm512_sub_ps(x, _mm512_mul_ps(n, c(LN2_HIGH)));
    let r = _mm512_sub_ps(r, _mm512_mul_ps(n, c(LN2_LOW)));
    let mut p = c(POLY[0]);
    for &k in &POLY[1..] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), c(k));
    }
    let p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), c(1.0));
    let pow2n = _mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)));
    _mm512_mul_ps(p, _mm512_castsi512_ps(pow2n))
}

/// `gate = gelu_tanh(gate) · up` (GeGLU), with GELU's tanh approximation as PyTorch's `gelu(approximate="tanh")`:
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); tanh(z) = 1 − 2/(e^{2z} + 1), which holds at ±∞ too.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let mut e = [0f32; 64];
    for (gate, up) in gate.chunks_mut(64).zip(up.chunks(64)) {
        let e = &mut e[..gate.len().min(up.len())];
        for (e, &g) in e.iter_mut().zip(gate.iter()) {
            *e = 2.0 * SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g);
        }
        exp_in_place(e);
        for ((g, u), e) in gate.iter_mut().zip(up).zip(e.iter()) {
            let tanh = 1.0 - 2.0 / (e + 1.0);
            *g = 0.5 * *g * (1.0 + tanh) * u;
        }
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
    #[cfg(target_arch = "x86_64")]
    if crate::quant::simd_in_use().starts_with("avx512") {
        // SAFETY: `simd_in_use` reports AVX-512 (F) only where the CPU has it.
        unsafe { exp_in_place_avx512(x) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        unsafe { exp_in_place_avx2(x) };
        return;
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for v in x.iter_mut() {
        *v = v.exp();
    }
}

/// [`exp_in_place`] eight at a time by [`exp8`] (libm's `expf` was 8% of a 512-token prefill, a call per value).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn exp_in_place_avx2(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        _mm256_storeu_ps(c.as_mut_ptr(), exp8(_mm256_loadu_ps(c.as_ptr())));
    }
    for v in chunks.into_remainder() {
        *v = _mm256_cvtss_f32(exp8(_mm256_set1_ps(*v)));
    }
}

/// [`exp_in_place`] sixteen at a time by [`exp16`].
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_in_place_avx512(x: &mut [f32]) {
    use std::arch::x86_64::*;
    for c in x.chunks_mut(16) {
        let lanes: __mmask16 = ((1u32 << c.len()) - 1) as u16;
        let e = exp16(_mm512_maskz_loadu_ps(lanes, c.as_ptr()));
        _mm512_mask_storeu_ps(c.as_mut_ptr(), lanes, e);
    }
}

/// `eˣ` in eight lanes by [`cephes_exp`].
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use cephes_exp::*;
    use std::arch::x86_64::*;
    let c = _mm256_set1_ps;
    // `max`/`min` return their second operand when either is NaN: `x` second keeps a NaN.
    let x = _mm256_min_ps(c(EXP_MAX), _mm256_max_ps(c(EXP_MIN), x));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        c(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_sub_ps(x, _mm256_mul_ps(n, c(LN2_HIGH)));
    let r = _mm256_sub_ps(r, _mm256_mul_ps(n, c(LN2_LOW)));
    let mut p = c(POLY[0]);
    for &k in &POLY[1..] {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), c(k));
    }
    let p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), c(1.0));
    let pow2n = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)));
    _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n))
}

/// `eˣ` in four lanes by [`cephes_exp`].
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn exp4(x: core::arch::wasm32::v128) -> core::arch::wasm32::v128 {
    use cephes_exp::*;
    use core::arch::wasm32::*;
    let x = f32x4_min(f32x4_max(x, f32x4_splat(EXP_MIN)), f32x4_splat(EXP_MAX));
    let n = f32x4_nearest(f32x4_mul(x, f32x4_splat(std::f32::consts::LOG2_E)));
    let r = f32x4_sub(x, f32x4_mul(n, f32x4_splat(LN2_HIGH)));
    let r = f32x4_sub(r, f32x4_mul(n, f32x4_splat(LN2_LOW)));
    let mut p = f32x4_splat(POLY[0]);
    for &c in &POLY[1..] {
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
        let freqs = RopeFreqs::plain(10000.0, hd);
        let (mut a, mut b) = (x.clone(), perm.clone());
        rope(&mut a, hd, 5, &freqs, RopePairs::Half);
        rope(&mut b, hd, 5, &freqs, RopePairs::Adjacent);
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

    /// Attention of one head against its float64 definition (softmax of scaled dots, then the weighted sum of
    /// values), for head sizes with an unrolled AVX2 kernel (64, 128, 256), one without (40: the plain loops),
    /// lengths that leave each remainder of the four-key groups, and a kv head that is not the first.
    #[test]
    fn attention_head_is_its_float64_definition() {
        let mut seed = 1u32;
        let mut rand = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        for head_dim in [40, 64, 128, 256] {
            let kv_dim = 3 * head_dim;
            for len in [1, 2, 3, 4, 5, 7, 33] {
                // One head alone (`attention_head`), then GQA groups of 1 to 7 heads (`attention_group`: with
                // AVX-512, runs of 4, 3, 2 and 1 heads).
                for heads in [0, 1, 2, 3, 4, 7] {
                    let q: Vec<f32> = (0..heads.max(1) * head_dim).map(|_| 2.0 * rand()).collect();
                    let k: Vec<f32> = (0..len * kv_dim).map(|_| rand()).collect();
                    let v: Vec<f32> = (0..len * kv_dim).map(|_| rand()).collect();
                    let offset = head_dim;
                    let mut out = vec![f32::NAN; q.len()];
                    let mut scores = vec![f32::NAN; heads.max(1) * len + 3];
                    let rule = Scores::standard(head_dim);
                    match heads {
                        0 => attention_head(&q, &k, &v, len, kv_dim, offset, rule, &mut out, &mut scores),
                        _ => attention_group(&q, &k, &v, len, kv_dim, offset, head_dim, rule, &mut out, &mut scores),
                    }
                    let row = |m: &[f32], t: usize| m[t * kv_dim + offset..][..head_dim].to_vec();
                    for (h, (q, out)) in q.chunks_exact(head_dim).zip(out.chunks_exact(head_dim)).enumerate() {
                        let logits: Vec<f64> = (0..len)
                            .map(|t| {
                                let dot: f64 = q
                                    .iter()
                                    .zip(row(&k, t))
                                    .map(|(a, b)| f64::from(*a) * f64::from(b))
                                    .sum();
                                dot / (head_dim as f64).sqrt()
                            })
                            .collect();
                        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                        let total: f64 = e.iter().sum();
                        for (d, &got) in out.iter().enumerate() {
                            let want: f64 = (0..len).map(|t| e[t] / total * f64::from(row(&v, t)[d])).sum();
                            // float32 sums of up to 256 products and a softmax: a few float32 steps of values ≤ 1.
                            assert!(
                                (f64::from(got) - want).abs() <= 2e-6,
                                "head_dim {head_dim}, len {len}, heads {heads}: head {h} out[{d}] = {got}, \
                                 float64 {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Several tokens' attention at once against its float64 definition: causal ranges (each token one position
    /// further), sliding windows (ranges that start later), a soft cap, groups of 1 to 7 heads (rows that leave each
    /// remainder of four), joint ranges of one to four blocks of 64 positions (rows that skip some), head sizes with the
    /// AVX-512 or AVX2 kernel (64, 128) and without (40: the plain loops), and a kv head that is not the first.
    #[test]
    fn attention_tokens_is_its_float64_definition() {
        let mut seed = 7u32;
        let mut rand = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        for head_dim in [40, 64, 128] {
            let kv_dim = 2 * head_dim;
            for (tokens, start, window, cap) in [
                (1usize, 0usize, None::<usize>, None::<f32>),
                (5, 0, None, None),
                (8, 13, None, Some(3.0)),
                (16, 60, Some(20), None),
                (3, 100, Some(37), None),
                (6, 150, None, None),
                (4, 200, Some(70), Some(5.0)),
            ] {
                let len = start + tokens;
                let ranges: Vec<(usize, usize)> = (0..tokens)
                    .map(|b| {
                        let end = start + b + 1;
                        (window.map_or(0, |w| end.saturating_sub(w)), end)
                    })
                    .collect();
                for heads in [1, 2, 3, 4, 7] {
                    let stride = heads * head_dim + 5;
                    let q: Vec<f32> = (0..tokens * stride).map(|_| 2.0 * rand()).collect();
                    let k: Vec<f32> = (0..len * kv_dim).map(|_| rand()).collect();
                    let v: Vec<f32> = (0..len * kv_dim).map(|_| rand()).collect();
                    let offset = head_dim;
                    let mut kt = vec![f32::NAN; head_dim * len];
                    transpose_keys(&k, len, kv_dim, offset, head_dim, &mut kt);
                    let rule = Scores {
                        scale: 1.0 / (head_dim as f32).sqrt(),
                        cap,
                    };
                    let a = TokenQueries {
                        q: &q,
                        stride,
                        heads,
                        head_dim,
                        ranges: &ranges,
                        kt: &kt,
                        len,
                        v: &v,
                        kv_dim,
                        kv_offset: offset,
                        rule,
                    };
                    let mut out = vec![f32::NAN; tokens * stride];
                    let mut scores = vec![f32::NAN; attention_tokens_scratch(tokens, heads, len)];
                    attention_tokens(&a, &mut out, &mut scores);
                    let row = |m: &[f32], t: usize| m[t * kv_dim + offset..][..head_dim].to_vec();
                    for (b, &(first, end)) in ranges.iter().enumerate() {
                        for h in 0..heads {
                            let q = &q[b * stride + h * head_dim..][..head_dim];
                            let logits: Vec<f64> = (first..end)
                                .map(|t| {
                                    let dot: f64 = q
                                        .iter()
                                        .zip(row(&k, t))
                                        .map(|(a, b)| f64::from(*a) * f64::from(b))
                                        .sum();
                                    let l = dot / (head_dim as f64).sqrt();
                                    cap.map_or(l, |c| f64::from(c) * (l / f64::from(c)).tanh())
                                })
                                .collect();
                            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            let e: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                            let total: f64 = e.iter().sum();
                            for d in 0..head_dim {
                                let want: f64 = (first..end)
                                    .map(|t| e[t - first] / total * f64::from(row(&v, t)[d]))
                                    .sum();
                                let got = out[b * stride + h * head_dim + d];
                                assert!(
                                    (f64::from(got) - want).abs() <= 2e-6,
                                    "head_dim {head_dim}, token {b} of {tokens} ({first}..{end}), heads {heads}: \
                                     head {h} out[{d}] = {got}, float64 {want}"
                                );
                            }
                        }
                    }
                    // What lies between the tokens' rows is not written.
                    assert!(out
                        .chunks(stride)
                        .all(|r| r[heads * head_dim..].iter().all(|v| v.is_nan())));
                }
            }
        }
    }
}

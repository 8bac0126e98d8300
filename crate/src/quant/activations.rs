//! Decode activations as 16-bit integers, per block of 32: `x ≈ a · scale`, with each block's exact float32 sum
//! kept for the minima (Q4_1, Q5_1, Q4_K, Q5_K). Rounding to 1/65534 of a block's largest magnitude moves a dot
//! by at most `Σ|w|·scale/2`, about 256 times less than llama.cpp's 8-bit activations (SmolLM2's logits move by
//! at most 0.003; see BENCHMARKS.md). In exchange, the products are exact integer dots of 16-bit pairs
//! (`i32x4.dot_i16x8_s` in wasm, `vpmaddwd` with AVX-512 and AVX2), which make decode 1.6× faster in wasm and
//! about 1.3× natively. (With AVX2 alone, 8 lanes, the scheme measured slower than the float32 FMA kernels of
//! Q4_0/Q4_1/Q8_0, so there it serves only the 5-bit and K-quant types, which have none.)

use super::GgmlType;

/// One token's activations, rounded per block of 32.
pub(super) struct Activations16 {
    /// The rounded values, each block's in [`LANE`] order.
    pub(super) a: Vec<i16>,
    /// Per block, `[scale, Σx]`: side by side, so that a kernel loads both in one read.
    pub(super) scale_sum: Vec<[f32; 2]>,
    /// `x[2i] + x[2i + 1]` when asked for: a Q4_1 or Q5_1 minimum times these, lane by lane beside the lanes of the
    /// integer dot, adds `m·Σx` without the two large sums `d·Σq·x` and `m·Σx` that cancel (in float32 that cost
    /// SmolLM2 0.01 of a logit). Only the AVX-512 kernels take them.
    #[cfg(target_arch = "x86_64")]
    pub(super) pair_sum: Vec<f32>,
    /// Per block, `8·Σa`: the wasm kernel takes Q4/Q5 codes as stored, from 0, and subtracts this (twice for Q5)
    /// for `q − 8` (`q − 16`).
    #[cfg(target_arch = "wasm32")]
    pub(super) eight_sum: Vec<i32>,
}

/// The block types the 16-bit kernels compute.
pub(super) fn has_16bit_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::LoomQ4_0
    )
}

/// Where element `j` of a block goes in `a`. In wasm, each half block's even elements, then its odd ones: the
/// order in which 16-bit shifts take a block's bytes apart (see `simd_wasm`). Elsewhere, in order.
pub(super) const LANE: [usize; 32] = {
    let mut lane = [0; 32];
    let mut j = 0;
    while j < 32 {
        lane[j] = match cfg!(target_arch = "wasm32") {
            true => j / 16 * 16 + j % 2 * 8 + j % 16 / 2,
            false => j,
        };
        j += 1;
    }
    lane
};

/// 1.5·2²³: a float32 sum with it has no fraction bits, so adding it rounds to an integer, ties to even.
const ROUND: f32 = 12_582_912.0;

impl Activations16 {
    /// `None` when `x` is not whole blocks of 32 or holds a value that is not finite (the float32 path then keeps
    /// NaN and ±∞ as they are).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    pub(super) fn new(x: &[f32], pair_sums: bool) -> Option<Activations16> {
        if !x.len().is_multiple_of(32) || !x.iter().all(|v| v.is_finite()) {
            return None;
        }
        let mut out = Activations16 {
            a: vec![0; x.len()],
            scale_sum: Vec::with_capacity(x.len() / 32),
            #[cfg(target_arch = "x86_64")]
            pair_sum: match pair_sums {
                true => x.chunks_exact(2).map(|p| p[0] + p[1]).collect(),
                false => Vec::new(),
            },
            #[cfg(target_arch = "wasm32")]
            eight_sum: Vec::with_capacity(x.len() / 32),
        };
        for (block, a) in x.chunks_exact(32).zip(out.a.chunks_exact_mut(32)) {
            // A compare, not `f32::max` (a libm call in wasm): the values are finite.
            let max = block.iter().fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
            let inv = if max > 0.0 { 32767.0 / max } else { 0.0 };
            // Ties to even by adding and subtracting 1.5·2²³ (exact for |v| ≤ 32767 < 2²²): `round_ties_even` is one
            // instruction in wasm but a libm call on x86-64 without SSE4.1 (5% of a Q4_K_M decode).
            for (j, v) in block.iter().enumerate() {
                a[LANE[j]] = ((v * inv + ROUND) - ROUND) as i16;
            }
            #[cfg(target_arch = "wasm32")]
            out.eight_sum.push(8 * a.iter().map(|&a| i32::from(a)).sum::<i32>());
            out.scale_sum.push([max / 32767.0, block.iter().sum()]);
        }
        Some(out)
    }
}

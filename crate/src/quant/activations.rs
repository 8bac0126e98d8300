//! Decode activations as 16-bit integers, per block of 32: `x ≈ a · scale`, with each block's exact float32 sum
//! kept for the minima (Q4_1, Q5_1, Q4_K, Q5_K). Rounding to 1/65534 of a block's largest magnitude moves a dot
//! by at most `Σ|w|·scale/2`, about 256 times less than llama.cpp's 8-bit activations (SmolLM2's logits move by
//! at most 0.003; see BENCHMARKS.md). In exchange, the products are exact integer dots of 16-bit pairs
//! (`i32x4.dot_i16x8_s` in wasm, `vpmaddwd` with AVX-512 and AVX2), which make decode 1.6× faster in wasm and
//! about 1.3× natively (with AVX2 alone, 8 lanes, Q4_0 and Q4_1 1.18× and 1.27× over float32 FMA kernels on a
//! Zen 3; see `simd_x86_16`).

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
    /// Per block, `Σa`: the AVX2 Q4_K and Q5_K kernels take the codes as stored, from 0, and subtract these times
    /// the centre once per super-block (exact), not the centre from each code.
    #[cfg(target_arch = "x86_64")]
    pub(super) block_sum: Vec<i32>,
    /// Per block, `Σa` over each half of 16 (the interleaved Q6_K kernels' sub-blocks have a scale each).
    #[cfg(target_arch = "x86_64")]
    pub(super) half_sum: Vec<[i32; 2]>,
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
    pub(super) fn new(x: &[f32], pair_sums: bool) -> Option<Activations16> {
        if !x.len().is_multiple_of(32) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if super::simd_x86::available() {
            let mut out = Activations16::empty(x, pair_sums);
            // SAFETY: the CPU has AVX2, FMA and F16C.
            return unsafe { out.round_avx2(x) }.then_some(out);
        }
        if !x.iter().all(|v| v.is_finite()) {
            return None;
        }
        let mut out = Activations16::empty(x, pair_sums);
        out.round(x);
        Some(out)
    }

    /// Rounds `x`'s blocks (finite values) into `a` and `scale_sum`.
    fn round(&mut self, x: &[f32]) {
        for (block, a) in x.chunks_exact(32).zip(self.a.chunks_exact_mut(32)) {
            // A compare, not `f32::max` (a libm call in wasm): the values are finite.
            let max = block.iter().fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
            let inv = if max > 0.0 { 32767.0 / max } else { 0.0 };
            // Ties to even by adding and subtracting 1.5·2²³ (exact for |v| ≤ 32767 < 2²²): `round_ties_even` is one
            // instruction in wasm but a libm call on x86-64 without SSE4.1 (5% of a Q4_K_M decode).
            for (j, v) in block.iter().enumerate() {
                a[LANE[j]] = ((v * inv + ROUND) - ROUND) as i16;
            }
            #[cfg(target_arch = "wasm32")]
            self.eight_sum.push(8 * a.iter().map(|&a| i32::from(a)).sum::<i32>());
            #[cfg(target_arch = "x86_64")]
            {
                let half = |h: &[i16]| h.iter().map(|&a| i32::from(a)).sum::<i32>();
                self.half_sum.push([half(&a[..16]), half(&a[16..])]);
                self.block_sum.push(half(&a[..16]) + half(&a[16..]));
            }
            self.scale_sum.push([max / 32767.0, block.iter().sum()]);
        }
    }

    /// Room for `x`'s blocks, and its pair sums where asked for.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn empty(x: &[f32], pair_sums: bool) -> Activations16 {
        Activations16 {
            a: vec![0; x.len()],
            scale_sum: Vec::with_capacity(x.len() / 32),
            #[cfg(target_arch = "x86_64")]
            pair_sum: match pair_sums {
                true => x.chunks_exact(2).map(|p| p[0] + p[1]).collect(),
                false => Vec::new(),
            },
            #[cfg(target_arch = "wasm32")]
            eight_sum: Vec::with_capacity(x.len() / 32),
            #[cfg(target_arch = "x86_64")]
            block_sum: Vec::with_capacity(x.len() / 32),
            #[cfg(target_arch = "x86_64")]
            half_sum: Vec::with_capacity(x.len() / 32),
        }
    }

    /// [`Activations16::new`]'s rounding eight values to a vector (`vcvtps2dq` rounds ties to even, as the portable
    /// loop does; each block's Σx summed as a tree, not in order). False where a value is not finite. On one thread
    /// the portable loop was 7% of a Q4_0 prefill on a Zen 3.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn round_avx2(&mut self, x: &[f32]) -> bool {
        use std::arch::x86_64::*;
        let (sign, infinity) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(f32::INFINITY));
        for (block, a) in x.chunks_exact(32).zip(self.a.chunks_exact_mut(32)) {
            let v = [0, 8, 16, 24].map(|i| _mm256_loadu_ps(block.as_ptr().add(i)));
            let abs = v.map(|v| _mm256_andnot_ps(sign, v));
            // |v| < ∞ is false for ±∞ and NaN.
            let finite = abs.map(|m| _mm256_cmp_ps::<_CMP_LT_OQ>(m, infinity));
            let all = _mm256_and_ps(_mm256_and_ps(finite[0], finite[1]), _mm256_and_ps(finite[2], finite[3]));
            if _mm256_movemask_ps(all) != 0xFF {
                return false;
            }
            let max = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
            let max = _mm_max_ps(_mm256_castps256_ps128(max), _mm256_extractf128_ps::<1>(max));
            let max = _mm_max_ps(max, _mm_movehl_ps(max, max));
            let max = _mm_cvtss_f32(_mm_max_ss(max, _mm_movehdup_ps(max)));
            let inv = _mm256_set1_ps(if max > 0.0 { 32767.0 / max } else { 0.0 });
            let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)));
            // The packs interleave 128-bit halves: the permute puts the 16 values back in order.
            let pack = |lo, hi| _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
            _mm256_storeu_si256(a.as_mut_ptr().cast(), pack(q[0], q[1]));
            _mm256_storeu_si256(a.as_mut_ptr().add(16).cast(), pack(q[2], q[3]));
            let sum = _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3]));
            self.scale_sum.push([max / 32767.0, super::simd_x86::hsum(sum)]);
            // Each half's sum: the two halves side by side in 128-bit lanes, then summed within each.
            let (lo, hi) = (_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let a_sum = _mm256_add_epi32(
                _mm256_permute2x128_si256::<0x20>(lo, hi),
                _mm256_permute2x128_si256::<0x31>(lo, hi),
            );
            let a_sum = _mm256_add_epi32(a_sum, _mm256_shuffle_epi32::<0b01_00_11_10>(a_sum));
            let a_sum = _mm256_add_epi32(a_sum, _mm256_shuffle_epi32::<0b10_11_00_01>(a_sum));
            let halves = [_mm256_cvtsi256_si32(a_sum), _mm256_extract_epi32::<4>(a_sum)];
            self.half_sum.push(halves);
            self.block_sum.push(halves[0] + halves[1]);
        }
        true
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX2 rounding against the portable loop: the same 16-bit values and scales (ties to even included), sums
    /// within float32 rounding of each other, and a refusal for each kind of value that is not finite.
    #[test]
    fn avx2_rounding_is_the_portable_rounding() {
        if !super::super::simd_x86::available() {
            return;
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut x: Vec<f32> = (0..32 * 64).map(|i| next() * 10f32.powi(i / 32 % 7 - 3)).collect();
        // Ties: with a block's largest magnitude 32767, v·inv = v, and v = k + 0.5 rounds to the even of k, k + 1.
        x[32..64].copy_from_slice(&std::array::from_fn::<f32, 32, _>(|j| j as f32 - 15.5));
        x[32] = 32767.0;
        x[64..96].fill(0.0);
        let mut want = Activations16::empty(&x, false);
        want.round(&x);
        let mut got = Activations16::empty(&x, false);
        // SAFETY: checked above.
        assert!(unsafe { got.round_avx2(&x) });
        assert_eq!(got.a, want.a);
        assert_eq!(got.block_sum, want.block_sum);
        assert_eq!(got.half_sum, want.half_sum);
        assert!(got.a[33..64]
            .iter()
            .zip(1..)
            .all(|(&a, j)| i32::from(a) == (j as f32 - 15.5).round_ties_even() as i32));
        for (g, w) in got.scale_sum.iter().zip(&want.scale_sum) {
            assert_eq!(g[0].to_bits(), w[0].to_bits());
            let magnitude: f32 = 32.0 * g[0] * 32767.0;
            assert!((g[1] - w[1]).abs() <= magnitude * 4.0 * f32::EPSILON, "{g:?} {w:?}");
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = x.clone();
            x[32 * 63 + 31] = bad;
            assert!(Activations16::new(&x, false).is_none(), "{bad}");
        }
    }
}

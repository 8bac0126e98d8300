//! AVX2 decode kernels over 16-bit activations ([`Activations16`]) for the 5-bit and K-quant types, which have no
//! float32 kernel in `simd_x86`: each block's 32 codes are widened to two vectors of 16-bit lanes and multiplied
//! with the block's rounded activations by `vpmaddwd` (exact products summed into 32-bit lanes), then scaled by the
//! weight's and the activations' scales into a float32 accumulator. The layouts are `simd_avx512`'s, in 256-bit
//! halves; AVX2 has no mask registers, so a Q5 code's fifth bit comes from a compare.

use std::arch::x86_64::*;

use super::activations::Activations16;
use super::GgmlType;

/// The dot of one stored row with `x`, for [`has_dot`] types.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C, and `x` holds at least the row's blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn row_dot_16(ty: GgmlType, row: &[u8], x: &Activations16) -> f32 {
    match ty {
        GgmlType::Q5_0 => dot::<Q5_0>(row, x),
        GgmlType::Q5_1 => dot::<Q5_1>(row, x),
        GgmlType::Q4_K => dot::<Q4K>(row, x),
        GgmlType::Q5_K => dot::<Q5K>(row, x),
        GgmlType::Q6_K => dot::<Q6K>(row, x),
        _ => unreachable!("simd_x86_16::row_dot_16 on {ty}: check has_dot first"),
    }
}

/// The types these kernels compute (the others keep `simd_x86`'s float32 kernels, which measured faster).
pub(super) fn has_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K
    )
}

/// A block type as runs of sub-blocks of 32 elements: a block of 32 for Q5_0/Q5_1, a super-block of eight for the
/// K-quants.
trait Block {
    const BYTES: usize;
    /// Sub-blocks of 32 in a block.
    const SUBS: usize;
    const HAS_MIN: bool;

    /// Per sub-block, the weight scale and the minimum subtracted as `min·Σx` (only the first `SUBS` are read).
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]);

    /// Sub-block `j`'s 32 codes as signed 16-bit integers, elements 0..16 then 16..32 (Q6_K: times their group's
    /// scale, at most 32·128 in magnitude).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `b` holds `BYTES` bytes; `j < SUBS`.
    unsafe fn codes(b: &[u8], j: usize) -> [__m256i; 2];
}

fn half(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// The 32 bytes at `b[at..]`, each shifted right by `shift` and masked to `mask`, as two vectors of 16-bit lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bits(b: &[u8], at: usize, shift: usize, mask: i16) -> [__m256i; 2] {
    assert!(at + 32 <= b.len());
    let count = _mm_cvtsi32_si128(shift as i32);
    let m = _mm256_set1_epi16(mask);
    let p = b.as_ptr().add(at);
    [p, p.add(16)].map(|p| {
        let v = _mm256_cvtepu8_epi16(_mm_loadu_si128(p.cast()));
        _mm256_and_si256(_mm256_srl_epi16(v, count), m)
    })
}

/// Q5's 32 codes, 0..32: nibble `i` of the 16 bytes at `qs` (low nibbles first) plus 16 where bit `i` of `qh` is set.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_codes(qh: u32, b: &[u8], qs: usize) -> [__m256i; 2] {
    assert!(qs + 16 <= b.len());
    let bytes = _mm_loadu_si128(b.as_ptr().add(qs).cast());
    let low = _mm_set1_epi8(0xF);
    let nibbles = [_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low)];
    let lane_bits = _mm256_setr_epi16(
        1,
        1 << 1,
        1 << 2,
        1 << 3,
        1 << 4,
        1 << 5,
        1 << 6,
        1 << 7,
        1 << 8,
        1 << 9,
        1 << 10,
        1 << 11,
        1 << 12,
        1 << 13,
        1 << 14,
        i16::MIN,
    );
    let words = [qh as u16, (qh >> 16) as u16];
    std::array::from_fn(|h| {
        let set = _mm256_and_si256(_mm256_set1_epi16(words[h] as i16), lane_bits);
        let high = _mm256_and_si256(_mm256_cmpeq_epi16(set, lane_bits), _mm256_set1_epi16(16));
        _mm256_or_si256(_mm256_cvtepu8_epi16(nibbles[h]), high)
    })
}

struct Q5_0;
impl Block for Q5_0 {
    const BYTES: usize = 22;
    const SUBS: usize = 1;
    const HAS_MIN: bool = false;
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]) {
        ([half(b); 8], [0.0; 8])
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], _: usize) -> [__m256i; 2] {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        q5_codes(qh, b, 6).map(|q| _mm256_sub_epi16(q, _mm256_set1_epi16(16)))
    }
}

struct Q5_1;
impl Block for Q5_1 {
    const BYTES: usize = 24;
    const SUBS: usize = 1;
    const HAS_MIN: bool = true;
    /// The minimum is added: subtracted as its negation.
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]) {
        ([half(b); 8], [-half(&b[2..]); 8])
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], _: usize) -> [__m256i; 2] {
        q5_codes(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), b, 8)
    }
}

struct Q4K;
impl Block for Q4K {
    const BYTES: usize = 144;
    const SUBS: usize = 8;
    const HAS_MIN: bool = true;
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]) {
        super::blocks::k_scales(b)
    }
    /// Nibble `j % 2` of the 32 bytes at `16 + 32·(j / 2)`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], j: usize) -> [__m256i; 2] {
        bits(b, 16 + 32 * (j / 2), 4 * (j % 2), 0xF)
    }
}

struct Q5K;
impl Block for Q5K {
    const BYTES: usize = 176;
    const SUBS: usize = 8;
    const HAS_MIN: bool = true;
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]) {
        super::blocks::k_scales(b)
    }
    /// Q4_K's nibbles (at 48) plus bit `j` of the 32 bytes at 16, as bit 4.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], j: usize) -> [__m256i; 2] {
        let low = bits(b, 48 + 32 * (j / 2), 4 * (j % 2), 0xF);
        let high = bits(b, 16, j, 1);
        [0, 1].map(|h| _mm256_or_si256(low[h], _mm256_slli_epi16::<4>(high[h])))
    }
}

struct Q6K;
impl Block for Q6K {
    const BYTES: usize = 210;
    const SUBS: usize = 8;
    const HAS_MIN: bool = false;
    fn scales(b: &[u8]) -> ([f32; 8], [f32; 8]) {
        ([half(&b[208..]); 8], [0.0; 8])
    }
    /// Sub-block `j` = 4h + k: nibble `k / 2` of the 32 bytes at `64h + 32·(k % 2)`, bits `2k..2k + 2` of the 32
    /// bytes at `128 + 32h` as bits 4 and 5, minus 32; elements 0..16 times the int8 scale at `192 + 2j`, 16..32
    /// times the next one.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], j: usize) -> [__m256i; 2] {
        let (h, k) = (j / 4, j % 4);
        let low = bits(b, 64 * h + 32 * (k % 2), 4 * (k / 2), 0xF);
        let high = bits(b, 128 + 32 * h, 2 * k, 3);
        [0, 1].map(|i| {
            let q = _mm256_or_si256(low[i], _mm256_slli_epi16::<4>(high[i]));
            let q = _mm256_sub_epi16(q, _mm256_set1_epi16(32));
            _mm256_mullo_epi16(q, _mm256_set1_epi16((b[192 + 2 * j + i] as i8).into()))
        })
    }
}

/// `Σ_sub-blocks scale_w·scale_x·Σ q·a (− min·Σx)` over one row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<B: Block>(row: &[u8], x: &Activations16) -> f32 {
    let blocks = row.len() / B::BYTES;
    let subs = blocks * B::SUBS;
    assert!(row.len() == blocks * B::BYTES && x.a.len() >= 32 * subs && x.scale_sum.len() >= subs);
    if B::HAS_MIN {
        assert!(x.pair_sum.len() >= 16 * subs);
    }
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (k, b) in row.chunks_exact(B::BYTES).enumerate() {
        let (scales, mins) = B::scales(b);
        for j in 0..B::SUBS {
            let i = k * B::SUBS + j;
            let a = x.a.as_ptr().add(32 * i);
            let [q0, q1] = B::codes(b, j);
            // Four exact products per 32-bit lane: |q·a| ≤ 32·128·32767 (Q6_K's scaled codes), four fit.
            let q = _mm256_add_epi32(
                _mm256_madd_epi16(q0, _mm256_loadu_si256(a.cast())),
                _mm256_madd_epi16(q1, _mm256_loadu_si256(a.add(16).cast())),
            );
            let scale = _mm256_set1_ps(scales[j] * x.scale_sum.get_unchecked(i)[0]);
            a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), scale, a0);
            if B::HAS_MIN {
                let p = x.pair_sum.as_ptr().add(16 * i);
                let pairs = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
                a1 = _mm256_fnmadd_ps(pairs, _mm256_set1_ps(mins[j]), a1);
            }
        }
    }
    let s = _mm256_add_ps(a0, a1);
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

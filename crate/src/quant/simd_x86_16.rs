//! AVX2 decode kernels over 16-bit activations ([`Activations16`]) for the 4-, 5- and 8-bit blocks and the K-quants:
//! each block's 32 codes are widened to two vectors of 16-bit lanes and multiplied
//! with the block's rounded activations by `vpmaddwd` (exact products summed into 32-bit lanes), then scaled by the
//! weight's and the activations' scales into a float32 accumulator. The layouts are `simd_avx512`'s, in 256-bit
//! halves; AVX2 has no mask registers, so a Q5 code's fifth bit comes from a compare.

use std::arch::x86_64::*;

use super::activations::Activations16;
use super::matmul::{each_pair, each_row};
use super::simd_x86::{half8, hsum, load16};
use super::GgmlType;

/// The dots of the equal stored rows `rows` with `x` into `out`, for [`has_dot`] types: the 32-element blocks two
/// rows at a time (each block's activations loaded once for both), the K-quants a row at a time.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C, and `x` holds at least a row's blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 => pairs::<Q4_0>(rows, x, out),
        GgmlType::Q4_1 => pairs::<Q4_1>(rows, x, out),
        GgmlType::Q8_0 => pairs::<Q8_0>(rows, x, out),
        GgmlType::Q5_0 => pairs::<Q5_0>(rows, x, out),
        GgmlType::Q5_1 => pairs::<Q5_1>(rows, x, out),
        GgmlType::Q4_K => each_row(rows, out, |row| dot_k::<Q4K>(row, x)),
        GgmlType::Q5_K => each_row(rows, out, |row| dot_k::<Q5K>(row, x)),
        GgmlType::Q6_K => each_row(rows, out, |row| dot_q6k(row, x)),
        ty if ty.interleaved() => super::interleaved::rows_dot_16(ty, rows, x, out),
        _ => unreachable!("simd_x86_16::rows_dot_16 on {ty}: check has_dot first"),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pairs<B: Block>(rows: &[u8], x: &Activations16, out: &mut [f32]) {
    each_pair(
        rows,
        out,
        |r0, r1| dots::<B, 2>([r0, r1], x),
        |row| dots::<B, 1>([row], x)[0],
    );
}

/// [`prefill::Tile`](super::prefill::Tile)'s unpacking of whole stored rows of the 32-element types and the K-quants:
/// each block's (sub-block's) codes less their centre as [`dots`] and [`dot_k`] take them (Q6_K's before its
/// scales), its scale and its minimum plus centre times scale (formed as the portable unpacking forms them). False
/// for the other types. (The portable unpacking was 9% of a Q4_0 prefill on a Zen 3.)
///
/// # Safety
/// AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unpack_tile(
    ty: GgmlType,
    rows: &[u8],
    codes: &mut [i16],
    scale: &mut [f32],
    min: &mut [f32],
) -> bool {
    match ty {
        GgmlType::Q4_0 => unpack::<Q4_0>(rows, codes, scale, min),
        GgmlType::Q4_1 => unpack::<Q4_1>(rows, codes, scale, min),
        GgmlType::Q8_0 => unpack::<Q8_0>(rows, codes, scale, min),
        GgmlType::Q5_0 => unpack::<Q5_0>(rows, codes, scale, min),
        GgmlType::Q5_1 => unpack::<Q5_1>(rows, codes, scale, min),
        GgmlType::Q4_K => unpack_k::<Q4K>(rows, codes, scale, min),
        GgmlType::Q5_K => unpack_k::<Q5K>(rows, codes, scale, min),
        GgmlType::Q6_K => unpack_q6k(rows, codes, scale, min),
        _ => return false,
    }
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<B: Block>(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let blocks = rows.len() / B::BYTES;
    assert!(codes.len() == 32 * blocks && scale.len() == blocks && min.len() == blocks);
    for (k, b) in rows.chunks_exact(B::BYTES).enumerate() {
        store_block(&mut codes[32 * k..], B::codes(b), _mm256_setzero_si256());
        let d = super::blocks::half(b);
        scale[k] = d;
        min[k] = match B::HAS_MIN {
            true => super::blocks::half(&b[2..]) + d * f32::from(B::CENTRE),
            false => 0.0,
        };
    }
}

/// [`unpack_tile`] of super-blocks with minima (Q4_K, Q5_K).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_k<K: SuperBlock>(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let supers = rows.len() / K::BYTES;
    assert!(codes.len() == 256 * supers && scale.len() == 8 * supers && min.len() == 8 * supers);
    for (s, b) in rows.chunks_exact(K::BYTES).enumerate() {
        let centre = _mm256_set1_epi16(K::CENTRE as i16);
        for p in 0..4 {
            for (i, q) in K::codes(b, p).into_iter().enumerate() {
                store_block(&mut codes[256 * s + 32 * (2 * p + i)..], q, centre);
            }
        }
        let (scales, mins) = super::blocks::k_scales(b);
        for j in 0..8 {
            scale[8 * s + j] = scales[j];
            min[8 * s + j] = -mins[j] + scales[j] * K::CENTRE;
        }
    }
}

/// [`unpack_tile`] of Q6_K: the codes less 32 and, per 16 elements, `d·scale` (as the portable unpacking forms it);
/// no minima.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_q6k(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let supers = rows.len() / Q6K::BYTES;
    assert!(codes.len() == 256 * supers && scale.len() == 16 * supers && min.len() == 16 * supers);
    for (s, b) in rows.chunks_exact(Q6K::BYTES).enumerate() {
        for p in 0..4 {
            for (i, q) in Q6K::centred(b, p).into_iter().enumerate() {
                // Sub-block 4h + k of `centred`'s pair p = 2h + k / 2 starts at element 32·(2p + i).
                store_block(&mut codes[256 * s + 32 * (2 * p + i)..], q, _mm256_setzero_si256());
            }
        }
        let d = super::blocks::half(&b[208..]);
        for (g, &sc) in b[192..208].iter().enumerate() {
            scale[16 * s + g] = d * f32::from(sc as i8);
            min[16 * s + g] = 0.0;
        }
    }
}

/// A block's 32 codes (elements 0..16, then 16..32) less `centre` into `out[..32]`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_block(out: &mut [i16], [q0, q1]: [__m256i; 2], centre: __m256i) {
    assert!(out.len() >= 32);
    _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm256_sub_epi16(q0, centre));
    _mm256_storeu_si256(out.as_mut_ptr().add(16).cast(), _mm256_sub_epi16(q1, centre));
}

/// The types these kernels compute (the others keep `simd_x86`'s float32 kernels). Q4_0, Q4_1 and Q8_0 had only
/// those until an AMD Zen 3 decoded SmolLM2 with these 1.18×, 1.27× and 1.0–1.2× faster, before rows in pairs
/// (BENCHMARKS.md).
pub(super) fn has_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q8_0
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    ) || ty.interleaved()
}

/// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: blocks of 32 with one scale (and minimum) each, the f16 scale first (then the
/// minimum).
trait Block {
    const BYTES: usize;
    /// What [`Block::codes`] centres the codes on: the minimum `m` (Q4_1, Q5_1) is added as `(m + CENTRE·d)·Σx`
    /// beside the codes `q − CENTRE`, so that `d·Σ(q − CENTRE)·a` and the minimum's share stay small instead of two
    /// large sums that cancel. (Q4_0's and Q5_0's codes are stored that way.)
    const CENTRE: i8;
    const HAS_MIN: bool;

    /// The block's codes less `CENTRE` in 16-bit lanes, elements 0..16 then 16..32.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `b` holds `BYTES` bytes.
    unsafe fn codes(b: &[u8]) -> [__m256i; 2];
}

/// A 4-bit block's 16 nibble bytes at `at`, less `centre`, in 16-bit lanes: byte `j`'s low nibble is element `j`,
/// its high one `16 + j`. (Widened first, the high nibble is a shift alone.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(b: &[u8], at: usize, centre: i16) -> [__m256i; 2] {
    let (bytes, c) = (zero_extend16(b, at), _mm256_set1_epi16(centre));
    [
        _mm256_sub_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0xF)), c),
        _mm256_sub_epi16(_mm256_srli_epi16::<4>(bytes), c),
    ]
}

/// The 16 bytes at `at` as 16-bit lanes, by one in-lane byte shuffle of them loaded into both halves. The compiler
/// made `vpmovzxbw` of them two widenings of masked bytes, and (with Q5's codes widened from bytes) the shuffle
/// ports were the 4- and 5-bit types' limit: their decode 1.17–1.25× faster on a Zen 3 this way (BENCHMARKS.md).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn zero_extend16(b: &[u8], at: usize) -> __m256i {
    let spread = _mm256_setr_epi8(
        0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6, -1, 7, -1, 8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1,
        15, -1,
    );
    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load16(b, at)), spread)
}

/// A 5-bit block's codes less 16 from its `qh` word at `at` and the nibbles after it, in 16-bit lanes: a code less
/// 16 is its nibble where its fifth bit is set, the nibble less 16 where it is not. (In 16-bit lanes from the start:
/// widening codes made as bytes took three more shuffles a block.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bits(b: &[u8], at: usize) -> [__m256i; 2] {
    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let bytes = zero_extend16(b, at + 4);
    // Lane j tests bit j.
    const BITS: [u16; 16] = {
        let mut bits = [0; 16];
        let mut j = 0;
        while j < 16 {
            bits[j] = 1 << j;
            j += 1;
        }
        bits
    };
    let bit = _mm256_loadu_si256(BITS.as_ptr().cast());
    let code = |nibbles: __m256i, bits: u32| {
        let set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(bits as u16 as i16), bit), bit);
        _mm256_sub_epi16(nibbles, _mm256_andnot_si256(set, _mm256_set1_epi16(16)))
    };
    [
        code(_mm256_and_si256(bytes, _mm256_set1_epi16(0xF)), qh),
        code(_mm256_srli_epi16::<4>(bytes), qh >> 16),
    ]
}

struct Q4_0;
impl Block for Q4_0 {
    const BYTES: usize = 18;
    const CENTRE: i8 = 8;
    const HAS_MIN: bool = false;
    unsafe fn codes(b: &[u8]) -> [__m256i; 2] {
        nibbles(b, 2, 8)
    }
}

struct Q4_1;
impl Block for Q4_1 {
    const BYTES: usize = 20;
    const CENTRE: i8 = 8;
    const HAS_MIN: bool = true;
    unsafe fn codes(b: &[u8]) -> [__m256i; 2] {
        nibbles(b, 4, 8)
    }
}

struct Q5_0;
impl Block for Q5_0 {
    const BYTES: usize = 22;
    const CENTRE: i8 = 16;
    const HAS_MIN: bool = false;
    unsafe fn codes(b: &[u8]) -> [__m256i; 2] {
        five_bits(b, 2)
    }
}

struct Q5_1;
impl Block for Q5_1 {
    const BYTES: usize = 24;
    const CENTRE: i8 = 16;
    const HAS_MIN: bool = true;
    unsafe fn codes(b: &[u8]) -> [__m256i; 2] {
        five_bits(b, 4)
    }
}

struct Q8_0;
impl Block for Q8_0 {
    const BYTES: usize = 34;
    const CENTRE: i8 = 0;
    const HAS_MIN: bool = false;
    unsafe fn codes(b: &[u8]) -> [__m256i; 2] {
        [_mm256_cvtepi8_epi16(load16(b, 2)), _mm256_cvtepi8_epi16(load16(b, 18))]
    }
}

/// `Σ_blocks d·scale_x·Σ q·a (+ m·Σx)` over each of `R` rows of [`Block`]s of the same length (a row, or a pair:
/// each block's activations, scale and sum loaded once for all). Each row's sum takes the same operations in the same
/// order whatever `R`, so a row's value does not depend on whether it came in a pair.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots<B: Block, const R: usize>(rows: [&[u8]; R], x: &Activations16) -> [f32; R] {
    let blocks = rows[0].len() / B::BYTES;
    assert!(rows.iter().all(|row| row.len() == blocks * B::BYTES));
    assert!(x.a.len() >= 32 * blocks && x.scale_sum.len() >= blocks);
    // Per row, the even and the odd blocks' sums and minima's (apart, so that a block's FMA need not wait for the
    // last one's). The pairs of blocks are unrolled: an accumulator picked by `k % 2` lived on the stack.
    let zero = ([_mm256_setzero_ps(); R], [_mm_setzero_ps(); R]);
    let (mut even, mut odd) = (zero, zero);
    for k in (0..blocks).step_by(2) {
        block::<B, R>(rows, x, k, &mut even);
        if k + 1 < blocks {
            block::<B, R>(rows, x, k + 1, &mut odd);
        }
    }
    std::array::from_fn(|j| {
        hsum(_mm256_add_ps(even.0[j], odd.0[j])) + _mm_cvtss_f32(_mm_movehdup_ps(_mm_add_ps(even.1[j], odd.1[j])))
    })
}

/// Block `k` of each row of [`dots`] into its sums and minima's.
#[inline(always)]
unsafe fn block<B: Block, const R: usize>(
    rows: [&[u8]; R],
    x: &Activations16,
    k: usize,
    (acc, mins): &mut ([__m256; R], [__m128; R]),
) {
    let a = x.a.as_ptr().add(32 * k);
    let (a0, a1) = (_mm256_loadu_si256(a.cast()), _mm256_loadu_si256(a.add(16).cast()));
    // The activations' [scale, Σx, 0, 0].
    let scale_sum = _mm_castpd_ps(_mm_load_sd(x.scale_sum.as_ptr().add(k).cast()));
    for (j, row) in rows.into_iter().enumerate() {
        let b = row.get_unchecked(k * B::BYTES..(k + 1) * B::BYTES);
        let [q0, q1] = B::codes(b);
        // Two exact products per 32-bit lane and two lanes added, |q·a| ≤ 128·32767: they fit.
        let dots = _mm256_add_epi32(_mm256_madd_epi16(q0, a0), _mm256_madd_epi16(q1, a1));
        // [d, m] as float32 (m: the next half, whatever it is without a minimum).
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(b.as_ptr().cast::<i32>().read_unaligned()));
        // [d, m + CENTRE·d] times [scale, Σx]: lane 0 is the codes' scale, lane 1 the minimum's share, summed in
        // lane 1 of `mins`.
        let centred = match B::HAS_MIN {
            true => _mm_fmadd_ps(_mm_broadcastss_ps(dm), _mm_setr_ps(0.0, B::CENTRE.into(), 0.0, 0.0), dm),
            false => dm,
        };
        let scales = _mm_mul_ps(centred, scale_sum);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_broadcastss_ps(scales), acc[j]);
        if B::HAS_MIN {
            mins[j] = _mm_add_ps(mins[j], scales);
        }
    }
}

/// Q4_K's and Q5_K's super-block of 256: eight sub-blocks of 32, each with its own scale and minimum.
trait SuperBlock {
    const BYTES: usize;
    /// What [`SuperBlock::codes`] centres the codes on.
    const CENTRE: f32;

    /// Per sub-block, `d·sc` and the minimum added as `min·Σx`: `CENTRE·d·sc − dmin·m` for the codes
    /// [`SuperBlock::codes`] centres on `CENTRE`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `b` holds `BYTES` bytes.
    unsafe fn scales(b: &[u8]) -> (__m256, __m256);

    /// Sub-blocks `2p` and `2p + 1`, each as two vectors of 16-bit codes as stored (from 0, not centred), elements
    /// 0..16 then 16..32.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `b` holds `BYTES` bytes; `p < 4`.
    unsafe fn codes(b: &[u8], p: usize) -> [[__m256i; 2]; 2];
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load32(b: &[u8], at: usize) -> __m256i {
    assert!(at + 32 <= b.len());
    _mm256_loadu_si256(b.as_ptr().add(at).cast())
}

/// Q4_K/Q5_K's eight `d·sc` and `centre·d·sc − dmin·m` (also the AVX-512 kernels').
///
/// # Safety
/// AVX2, FMA and F16C; `b` holds at least 16 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k_scales(b: &[u8], centre: f32) -> (__m256, __m256) {
    let (sc, mn) = super::blocks::k_scale_min(&b[4..16]);
    let (d, dmin) = (half8(b), half8(&b[2..]));
    let widen = |v: [u8; 8]| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(v))));
    let scale = _mm256_mul_ps(d, widen(sc));
    let min = _mm256_mul_ps(dmin, widen(mn));
    (scale, _mm256_fmsub_ps(_mm256_set1_ps(centre), scale, min))
}

struct Q4K;
impl SuperBlock for Q4K {
    const BYTES: usize = 144;
    const CENTRE: f32 = 8.0;
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales(b: &[u8]) -> (__m256, __m256) {
        k_scales(b, Self::CENTRE)
    }
    /// The low and high nibbles of the 32 bytes at `16 + 32p`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], p: usize) -> [[__m256i; 2]; 2] {
        let low = _mm256_set1_epi16(0xF);
        let halves = [zero_extend16(b, 16 + 32 * p), zero_extend16(b, 32 + 32 * p)];
        [
            halves.map(|q| _mm256_and_si256(q, low)),
            halves.map(|q| _mm256_srli_epi16::<4>(q)),
        ]
    }
}

struct Q5K;
impl SuperBlock for Q5K {
    const BYTES: usize = 176;
    const CENTRE: f32 = 16.0;
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales(b: &[u8]) -> (__m256, __m256) {
        k_scales(b, Self::CENTRE)
    }
    /// Q4_K's nibbles (at 48) plus bit `2p` and `2p + 1` of the 32 bytes at 16 as bit 4.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(b: &[u8], p: usize) -> [[__m256i; 2]; 2] {
        let (low, sixteen) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(16));
        let q = load32(b, 48 + 32 * p);
        let high = load32(b, 16);
        let with_bit = |nibbles: __m256i, j: usize| {
            let bit = _mm256_set1_epi8(1 << j);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(high, bit), bit);
            _mm256_or_si256(nibbles, _mm256_and_si256(set, sixteen))
        };
        [
            widen_signed(with_bit(_mm256_and_si256(q, low), 2 * p)),
            widen_signed(with_bit(_mm256_and_si256(_mm256_srli_epi16::<4>(q), low), 2 * p + 1)),
        ]
    }
}

struct Q6K;

impl Q6K {
    const BYTES: usize = 210;

    /// Sub-blocks j = 4h + k for the pair p = 2h + k / 2… taken as (h, k ∈ {2(p % 2), 2(p % 2) + 1}): nibble k / 2 of
    /// the 32 bytes at `64h + 32·(k % 2)`, bits `2k..2k + 2` of the 32 bytes at `128 + 32h` as bits 4 and 5,
    /// minus 32, each as two vectors of 16-bit codes (elements 0..16, then 16..32).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn centred(b: &[u8], p: usize) -> [[__m256i; 2]; 2] {
        let (h, k0) = (p / 2, 2 * (p % 2));
        let low = _mm256_set1_epi8(0xF);
        let qh = load32(b, 128 + 32 * h);
        std::array::from_fn(|i| {
            let k = k0 + i;
            let ql = load32(b, 64 * h + 32 * (k % 2));
            let nib = match k / 2 {
                0 => _mm256_and_si256(ql, low),
                _ => _mm256_and_si256(_mm256_srli_epi16::<4>(ql), low),
            };
            let two = _mm256_and_si256(
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)),
                _mm256_set1_epi8(3),
            );
            widen_signed(_mm256_sub_epi8(
                _mm256_or_si256(nib, _mm256_slli_epi16::<4>(two)),
                _mm256_set1_epi8(32),
            ))
        })
    }
}

/// 32 signed bytes as two vectors of 16-bit lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_signed(v: __m256i) -> [__m256i; 2] {
    [
        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)),
    ]
}

/// `Σ_sub-blocks scale_w·scale_x·Σ q·a + min·Σx` over one row of Q4_K or Q5_K super-blocks: each sub-block's
/// integer dot summed whole (exact), then the eight times their scales in one multiply.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_k<K: SuperBlock>(row: &[u8], x: &Activations16) -> f32 {
    let supers = row.len() / K::BYTES;
    assert!(row.len() == supers * K::BYTES && x.a.len() >= 256 * supers && x.scale_sum.len() >= 8 * supers);
    assert!(x.block_sum.len() >= 8 * supers);
    let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (s, b) in row.chunks_exact(K::BYTES).enumerate() {
        // The activations' eight [scale, Σx] pairs: scales and sums apart, in order.
        let pairs = x.scale_sum.as_ptr().add(8 * s).cast::<f32>();
        let (lo, hi) = (_mm256_loadu_ps(pairs), _mm256_loadu_ps(pairs.add(8)));
        let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
        let xscales = order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi));
        let (scale, min) = K::scales(b);
        mins = _mm256_fmadd_ps(min, order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)), mins);
        let a = x.a.as_ptr().add(256 * s);
        let mut dots = [_mm256_setzero_si256(); 8];
        for p in 0..4 {
            for (i, [q0, q1]) in K::codes(b, p).into_iter().enumerate() {
                let j = 2 * p + i;
                // Four exact products per 32-bit lane, |q·a| ≤ 31·32767: they fit.
                dots[j] = _mm256_add_epi32(
                    _mm256_madd_epi16(q0, _mm256_loadu_si256(a.add(32 * j).cast())),
                    _mm256_madd_epi16(q1, _mm256_loadu_si256(a.add(32 * j + 16).cast())),
                );
            }
        }
        // Σ(q − CENTRE)·a from the codes as stored: CENTRE·Σa, per sub-block, less.
        let block_sums = _mm256_loadu_si256(x.block_sum.as_ptr().add(8 * s).cast());
        let centring = _mm256_mullo_epi32(block_sums, _mm256_set1_epi32(K::CENTRE as i32));
        let sums = _mm256_sub_epi32(sum8(dots), centring);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(scale, xscales), acc);
    }
    hsum(_mm256_add_ps(acc, mins))
}

/// Lane `j` the sum of `v[j]`'s eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum8(v: [__m256i; 8]) -> __m256i {
    let pairs = [0, 2, 4, 6].map(|i| _mm256_hadd_epi32(v[i], v[i + 1]));
    // Per 128-bit half, [Σ half of v[0], …, v[3]] and of v[4..8].
    let (first, last) = (
        _mm256_hadd_epi32(pairs[0], pairs[1]),
        _mm256_hadd_epi32(pairs[2], pairs[3]),
    );
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(first, last),
        _mm256_permute2x128_si256::<0x31>(first, last),
    )
}

/// `Σ_groups d·sc·scale_x·Σ q·a` over one row of Q6_K super-blocks: each 16-element group's integer dot times its
/// scale in float32. (Folding the int8 scale into the codes took a multiply and a broadcast shuffle per group.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6k(row: &[u8], x: &Activations16) -> f32 {
    let supers = row.len() / Q6K::BYTES;
    assert!(row.len() == supers * Q6K::BYTES && x.a.len() >= 256 * supers && x.scale_sum.len() >= 8 * supers);
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (s, b) in row.chunks_exact(Q6K::BYTES).enumerate() {
        // The activations' scale of each group's block of 32: [s0, s0, s1, s1, …] from the [scale, Σx] pairs.
        let pairs = x.scale_sum.as_ptr().add(8 * s).cast::<f32>();
        let (lo, hi) = (_mm256_loadu_ps(pairs), _mm256_loadu_ps(pairs.add(8)));
        let xscales = [
            _mm256_shuffle_ps::<0b10_10_00_00>(lo, lo),
            _mm256_shuffle_ps::<0b10_10_00_00>(hi, hi),
        ];
        let group_scales = load16(b, 192);
        let int8 = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        let d = half8(&b[208..]);
        // `d·sc` rounded as the portable code rounds it, then the activations' scale.
        let mut scales = [0f32; 16];
        _mm256_storeu_ps(
            scales.as_mut_ptr(),
            _mm256_mul_ps(_mm256_mul_ps(d, int8(group_scales)), xscales[0]),
        );
        _mm256_storeu_ps(
            scales.as_mut_ptr().add(8),
            _mm256_mul_ps(_mm256_mul_ps(d, int8(_mm_srli_si128::<8>(group_scales))), xscales[1]),
        );
        // Broadcast from memory (a load), as in `dot_k`.
        let scales = std::hint::black_box(&scales);
        let a = x.a.as_ptr().add(256 * s);
        for p in 0..4 {
            for (i, [q0, q1]) in Q6K::centred(b, p).into_iter().enumerate() {
                let j = 2 * p + i;
                // Two exact products per 32-bit lane, |q·a| ≤ 32·32767: they fit.
                let dots = [
                    _mm256_madd_epi16(q0, _mm256_loadu_si256(a.add(32 * j).cast())),
                    _mm256_madd_epi16(q1, _mm256_loadu_si256(a.add(32 * j + 16).cast())),
                ];
                a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[0]), _mm256_broadcast_ss(&scales[2 * j]), a0);
                a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[1]), _mm256_broadcast_ss(&scales[2 * j + 1]), a1);
            }
        }
    }
    hsum(_mm256_add_ps(a0, a1))
}

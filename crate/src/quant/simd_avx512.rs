//! AVX-512 (F, BW) decode kernels over 16-bit activations ([`Activations16`]): each block's 32 codes are widened
//! to 16-bit lanes and multiplied with the block's rounded activations by one `vpmaddwd` (pairs of exact products
//! summed into 32-bit lanes), then scaled by the weight's and the activations' scales into a float32 accumulator,
//! lane by lane; the lanes are summed once per row.

use std::arch::x86_64::*;

use super::activations::Activations16;
use super::matmul::{each_row, prefetch};
use super::GgmlType;

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("f16c")
}

/// The dots of the stored rows `rows` (`out.len()` of them, each as long) with `x`, for the types of
/// [`super::activations::has_16bit_dot`].
///
/// # Safety
/// [`available`] is true, and `x` holds at least a row's blocks.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub(super) unsafe fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 => dots::<Q4_0>(rows, x, out),
        GgmlType::Q4_1 => dots::<Q4_1>(rows, x, out),
        GgmlType::Q8_0 => dots::<Q8_0>(rows, x, out),
        GgmlType::LoomQ4_0 => dots::<LoomQ4_0>(rows, x, out),
        GgmlType::Q5_0 => dots::<Q5_0>(rows, x, out),
        GgmlType::Q5_1 => dots::<Q5_1>(rows, x, out),
        GgmlType::Q4_K => each_row(rows, out, |row| dot_k::<Q4K>(row, x)),
        GgmlType::Q5_K => each_row(rows, out, |row| dot_k::<Q5K>(row, x)),
        GgmlType::Q6_K => each_row(rows, out, |row| dot_k::<Q6K>(row, x)),
        ty if ty.interleaved() => super::interleaved::rows_dot_16(ty, rows, x, out),
        _ => unreachable!("rows_dot_16 on {ty}: check has_16bit_dot first"),
    }
}

/// [`rows_dot_16`] where the CPU has AVX-512 VNNI too: the interleaved types take two groups to a vector.
///
/// # Safety
/// [`available`] is true, the CPU has AVX-512 VNNI, and `x` holds at least a row's blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_dot_16_vnni(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
    match ty {
        ty if ty.interleaved() => super::interleaved::rows_dot_16_vnni(ty, rows, x, out),
        _ => rows_dot_16(ty, rows, x, out),
    }
}

/// One block type's layout: where its scale is, and how its 32 codes become 16-bit integers in element order.
pub(super) trait Block {
    const BYTES: usize;
    /// Q4_1's and Q5_1's minimum, added as `m·Σx`.
    const HAS_MIN: bool = false;

    /// The block at `b`'s scale in lane 0 and, with a minimum, in lane 1 the minimum that goes with [`Block::codes`]
    /// (centred codes: `m` plus the centre times the scale). Other lanes: any value.
    ///
    /// # Safety
    /// AVX-512 F and BW, and F16C; `b` points at `BYTES` readable bytes.
    unsafe fn scale_min(b: *const u8) -> __m128;

    /// The 32 codes of the block at `b` as signed 16-bit integers, element `i` in lane `i`: centred (Q4_1 and Q5_1
    /// too), so that the rounding of the activations weighs on them as little as it can.
    ///
    /// # Safety
    /// AVX-512 F and BW, and F16C; `b` points at `BYTES` readable bytes.
    unsafe fn codes(b: *const u8) -> __m512i;
}

/// The two halves at `p` as float32, in lanes 0 and 1.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn halves(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()))
}

/// The 16 bytes at `p` as their 32 nibbles, 0..16: the low nibbles in lanes 0..16, the high ones in 16..32
/// (ggml's Q4 element order).
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn nibbles(p: *const u8) -> __m512i {
    let bytes = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast())));
    let high = _mm512_mask_srli_epi16::<4>(bytes, 0xFFFF_0000, bytes);
    _mm512_and_si512(high, _mm512_set1_epi16(0xF))
}

pub(super) struct Q4_0;
pub(super) struct Q4_1;
pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q8_0;
pub(super) struct LoomQ4_0;

/// Q5's 32 codes centred, `q − 16`: the nibbles at `qs` plus 16 where bit `i` of the 32-bit word at `qh` is set,
/// minus 16.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn q5_codes(qh: *const u8, qs: *const u8) -> __m512i {
    let nib = nibbles(qs);
    let high = qh.cast::<u32>().read_unaligned();
    // q − 16 = nibble − 16 where the bit is clear, the nibble where it is set: one masked subtraction.
    _mm512_mask_sub_epi16(nib, !high, nib, _mm512_set1_epi16(16))
}

impl Block for Q4_0 {
    const BYTES: usize = 18;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        halves(b)
    }

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        _mm512_sub_epi16(nibbles(b.add(2)), _mm512_set1_epi16(8))
    }
}

/// Centred on 8, with the minimum `m + 8·d`, as Q5_1: codes 0..16 against activations rounded to 16 bits put
/// twice the rounding error into the dot (tiny-llama's logits decoded token by token moved by 1.1e-3, by 5e-4
/// centred).
impl Block for Q4_1 {
    const BYTES: usize = 20;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        let dm = halves(b);
        _mm_fmadd_ps(_mm_broadcastss_ps(dm), _mm_setr_ps(0.0, 8.0, 0.0, 0.0), dm)
    }

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        _mm512_sub_epi16(nibbles(b.add(4)), _mm512_set1_epi16(8))
    }
}

impl Block for Q5_0 {
    const BYTES: usize = 22;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        halves(b)
    }

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        q5_codes(b.add(2), b.add(6))
    }
}

/// Centred on 16, with the minimum `m + 16·d`: the uncentred codes' sum and the minimum's cancel (SmolLM2 Q5_1's
/// logits moved by 0.021 that way, by 0.004 centred).
impl Block for Q5_1 {
    const BYTES: usize = 24;
    const HAS_MIN: bool = true;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        let dm = halves(b);
        _mm_fmadd_ps(_mm_broadcastss_ps(dm), _mm_setr_ps(0.0, 16.0, 0.0, 0.0), dm)
    }

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        q5_codes(b.add(4), b.add(8))
    }
}

impl Block for Q8_0 {
    const BYTES: usize = 34;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        halves(b)
    }

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(b.add(2).cast()))
    }
}

impl Block for LoomQ4_0 {
    const BYTES: usize = 20;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scale_min(b: *const u8) -> __m128 {
        _mm_load_ss(b.cast())
    }

    /// Byte `j` holds element `2j` (low nibble) and `2j + 1` (high), 4-bit two's complement: each goes to the top
    /// of its 16-bit lane, and an arithmetic shift brings it back down with its sign.
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> __m512i {
        let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(4).cast()));
        let top = _mm512_or_si512(
            _mm512_and_si512(_mm512_slli_epi32(bytes, 12), _mm512_set1_epi32(0xF000)),
            _mm512_and_si512(_mm512_slli_epi32(bytes, 24), _mm512_set1_epi32(0xF000_0000u32 as i32)),
        );
        _mm512_srai_epi16(top, 12)
    }
}

/// [`dot`] over the `out.len()` equal rows in `rows`, four at a time: each block's activations are loaded once for
/// four rows, each row has one accumulator (four independent chains), and the four are summed in one reduction.
/// The next four rows are asked of the cache while these are read, a share of them per block.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn dots<B: Block>(rows: &[u8], x: &Activations16, out: &mut [f32]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let row_bytes = rows.len() / n;
    let blocks = row_bytes / B::BYTES;
    assert!(rows.len() == n * row_bytes && row_bytes == blocks * B::BYTES);
    assert!(x.a.len() >= 32 * blocks && x.scale_sum.len() >= blocks);
    if B::HAS_MIN {
        assert!(x.pair_sum.len() >= 16 * blocks);
    }
    let mut r = 0;
    while r + 4 <= n {
        let p = rows.as_ptr().add(r * row_bytes);
        let (mut a0, mut a1, mut a2, mut a3) = (zero(), zero(), zero(), zero());
        for k in 0..blocks {
            let ahead = p.wrapping_add(4 * row_bytes + 4 * k * B::BYTES);
            prefetch(ahead, 4 * B::BYTES);
            let xk = XBlock::load::<B>(x, k);
            let b = p.add(k * B::BYTES);
            a0 = block::<B>(b, &xk, a0);
            a1 = block::<B>(b.add(row_bytes), &xk, a1);
            a2 = block::<B>(b.add(2 * row_bytes), &xk, a2);
            a3 = block::<B>(b.add(3 * row_bytes), &xk, a3);
        }
        _mm_storeu_ps(out.as_mut_ptr().add(r), reduce4(a0, a1, a2, a3));
        r += 4;
    }
    each_row(&rows[r * row_bytes..], &mut out[r..], |row| dot::<B>(row, x));
}

/// The lane sums of four vectors, `[Σv0, Σv1, Σv2, Σv3]`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn reduce4(v0: __m512, v1: __m512, v2: __m512, v3: __m512) -> __m128 {
    // Quarters (128 bits) of two vectors folded in half side by side: [v0 (two quarters), v1 (two quarters)].
    let fold = |a, b| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
        )
    };
    let (v01, v23) = (fold(v0, v1), fold(v2, v3));
    // Quarter i: four partial sums of v_i.
    let q = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0b10_00_10_00>(v01, v23),
        _mm512_shuffle_f32x4::<0b11_01_11_01>(v01, v23),
    );
    let q = _mm512_add_ps(q, _mm512_permute_ps::<0b10_11_00_01>(q));
    let q = _mm512_add_ps(q, _mm512_permute_ps::<0b01_00_11_10>(q));
    _mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        q,
    ))
}

/// `Σ_blocks scale_w·scale_x·Σ q·a (+ m·Σx)` over one row.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn dot<B: Block>(row: &[u8], x: &Activations16) -> f32 {
    let blocks = row.len() / B::BYTES;
    assert!(row.len() == blocks * B::BYTES && x.a.len() >= 32 * blocks && x.scale_sum.len() >= blocks);
    if B::HAS_MIN {
        assert!(x.pair_sum.len() >= 16 * blocks);
    }
    let b = |k: usize| row.as_ptr().add(k * B::BYTES);
    // Four accumulators in named variables (an array indexed by `k % 4` would live in memory).
    let (mut a0, mut a1, mut a2, mut a3) = (zero(), zero(), zero(), zero());
    let mut k = 0;
    while k + 4 <= blocks {
        a0 = block::<B>(b(k), &XBlock::load::<B>(x, k), a0);
        a1 = block::<B>(b(k + 1), &XBlock::load::<B>(x, k + 1), a1);
        a2 = block::<B>(b(k + 2), &XBlock::load::<B>(x, k + 2), a2);
        a3 = block::<B>(b(k + 3), &XBlock::load::<B>(x, k + 3), a3);
        k += 4;
    }
    while k < blocks {
        a0 = block::<B>(b(k), &XBlock::load::<B>(x, k), a0);
        k += 1;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)))
}

#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn zero() -> __m512 {
    _mm512_setzero_ps()
}

/// Block `k` of the activations, as [`block`] takes it.
struct XBlock {
    a: __m512i,
    /// The scale in lane 0.
    scale: __m128,
    /// `x[2i] + x[2i + 1]` in lane `i` (a type with a minimum; otherwise zero).
    pair_sum: __m512,
}

impl XBlock {
    /// # Safety
    /// AVX-512 F and BW; `x` holds block `k` (and its pair sums when `B` has a minimum).
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn load<B: Block>(x: &Activations16, k: usize) -> XBlock {
        XBlock {
            a: _mm512_loadu_si512(x.a.as_ptr().add(32 * k).cast()),
            scale: _mm_load_ss(&x.scale_sum.get_unchecked(k)[0]),
            pair_sum: match B::HAS_MIN {
                true => _mm512_loadu_ps(x.pair_sum.as_ptr().add(16 * k)),
                false => zero(),
            },
        }
    }
}

/// `acc` plus the block at `b` times the activations' block `x`: `scale_w·scale_x·Σ q·a`, lane by lane, and with a
/// minimum `m·(x[2i] + x[2i + 1])` in the lane of the pair `i`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn block<B: Block>(b: *const u8, x: &XBlock, acc: __m512) -> __m512 {
    // Pairs of 16-bit products summed into 32 bits: exact (|q·a| ≤ 128·32767).
    let q = _mm512_madd_epi16(B::codes(b), x.a);
    let scale_min = B::scale_min(b);
    let scale = _mm_mul_ss(scale_min, x.scale);
    let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_broadcastss_ps(scale), acc);
    if !B::HAS_MIN {
        return acc;
    }
    let min = _mm512_permutexvar_ps(_mm512_set1_epi32(1), _mm512_castps128_ps512(scale_min));
    _mm512_fmadd_ps(x.pair_sum, min, acc)
}

/// A K-quant's super-block of 256: eight sub-blocks of 32, each with its own scale (and minimum).
pub(super) trait SuperBlock {
    const BYTES: usize;

    /// Per sub-block of 32, the weight scale and the minimum added as `min·Σx`: `d·sc` and `CENTRE·d·sc − dmin·m`
    /// for the codes [`SuperBlock::codes`] centres on `CENTRE` (Q6_K: `d`, none).
    ///
    /// # Safety
    /// AVX-512 F and BW, and F16C; `b` points at `BYTES` readable bytes.
    unsafe fn scales(b: *const u8) -> (__m256, Option<__m256>);

    /// The eight sub-blocks' 32 codes each as signed 16-bit integers, element `i` in lane `i` (Q6_K: times their
    /// 16-element group's scale, at most 32·128 in magnitude).
    ///
    /// # Safety
    /// AVX-512 F and BW, and F16C; `b` points at `BYTES` readable bytes.
    unsafe fn codes(b: *const u8) -> [__m512i; 8];
}

/// The 32 bytes at `p` as 16-bit lanes.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn bytes32(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi16(_mm256_loadu_si256(p.cast()))
}

pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

impl SuperBlock for Q4K {
    const BYTES: usize = 144;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scales(b: *const u8) -> (__m256, Option<__m256>) {
        // The AVX2 kernels' (Level::Avx512 also has AVX2, FMA and F16C: `Level::current` checks them first).
        let (scale, min) = super::simd_x86_16::k_scales(std::slice::from_raw_parts(b, Self::BYTES), 8.0);
        (scale, Some(min))
    }

    /// Sub-blocks 2p and 2p + 1: the low and high nibbles of the 32 bytes at `16 + 32p`, centred on 8.
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> [__m512i; 8] {
        let (nibble, eight) = (_mm512_set1_epi16(0xF), _mm512_set1_epi16(8));
        let mut out = [_mm512_setzero_si512(); 8];
        for p in 0..4 {
            let q = bytes32(b.add(16 + 32 * p));
            out[2 * p] = _mm512_sub_epi16(_mm512_and_si512(q, nibble), eight);
            out[2 * p + 1] = _mm512_sub_epi16(_mm512_srli_epi16::<4>(q), eight);
        }
        out
    }
}

impl SuperBlock for Q5K {
    const BYTES: usize = 176;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scales(b: *const u8) -> (__m256, Option<__m256>) {
        let (scale, min) = super::simd_x86_16::k_scales(std::slice::from_raw_parts(b, Self::BYTES), 16.0);
        (scale, Some(min))
    }

    /// Q4_K's nibbles (at 48) plus 16 where bit `j` of the 32 bytes at 16 is set, centred on 16.
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> [__m512i; 8] {
        let (nibble, sixteen) = (_mm512_set1_epi16(0xF), _mm512_set1_epi16(16));
        let high = bytes32(b.add(16));
        let mut out = [_mm512_setzero_si512(); 8];
        for p in 0..4 {
            let q = bytes32(b.add(48 + 32 * p));
            for (j, q) in [
                (2 * p, _mm512_and_si512(q, nibble)),
                (2 * p + 1, _mm512_srli_epi16::<4>(q)),
            ] {
                let set = _mm512_test_epi16_mask(high, _mm512_set1_epi16(1 << j));
                // q + 16·bit − 16: the bit's 16 taken away where it is clear.
                out[j] = _mm512_mask_sub_epi16(q, !set, q, sixteen);
            }
        }
        out
    }
}

impl SuperBlock for Q6K {
    const BYTES: usize = 210;

    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn scales(b: *const u8) -> (__m256, Option<__m256>) {
        (_mm256_broadcastss_ps(halves(b.add(208))), None)
    }

    /// Sub-block `j` = 4h + k: nibble `k / 2` of the 32 bytes at `64h + 32·(k % 2)`, bits `2k..2k + 2` of the 32
    /// bytes at `128 + 32h` as bits 4 and 5, minus 32; its first 16 elements times the int8 scale at `192 + 2j`,
    /// the others times the next one.
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn codes(b: *const u8) -> [__m512i; 8] {
        let (nibble, two_bits, thirty_two) = (_mm512_set1_epi16(0xF), _mm512_set1_epi16(0x30), _mm512_set1_epi16(32));
        // The 16 scales as 16-bit lanes, twice: lanes 0..16 of sub-block j take scale 2j, lanes 16..32 scale 2j + 1.
        let scales = _mm512_cvtepi8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128(b.add(192).cast())));
        let mut out = [_mm512_setzero_si512(); 8];
        for h in 0..2 {
            let (l0, l1) = (bytes32(b.add(64 * h)), bytes32(b.add(64 * h + 32)));
            let qh = bytes32(b.add(128 + 32 * h));
            let low = [
                _mm512_and_si512(l0, nibble),
                _mm512_and_si512(l1, nibble),
                _mm512_srli_epi16::<4>(l0),
                _mm512_srli_epi16::<4>(l1),
            ];
            let high = [
                _mm512_slli_epi16::<4>(qh),
                _mm512_slli_epi16::<2>(qh),
                qh,
                _mm512_srli_epi16::<2>(qh),
            ];
            for k in 0..4 {
                let j = 4 * h + k;
                let q = _mm512_or_si512(low[k], _mm512_and_si512(high[k], two_bits));
                // Lanes 0..16: scale 2j; lanes 16..32: scale 2j + 1.
                let pick = _mm512_mask_blend_epi16(
                    0xFFFF_0000,
                    _mm512_set1_epi16(2 * j as i16),
                    _mm512_set1_epi16(2 * j as i16 + 1),
                );
                let scale = _mm512_permutexvar_epi16(pick, scales);
                out[j] = _mm512_mullo_epi16(_mm512_sub_epi16(q, thirty_two), scale);
            }
        }
        out
    }
}

/// `Σ_sub-blocks scale_w·scale_x·Σ q·a + min·Σx` over one row of super-blocks.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn dot_k<K: SuperBlock>(row: &[u8], x: &Activations16) -> f32 {
    let supers = row.len() / K::BYTES;
    assert!(row.len() == supers * K::BYTES && x.a.len() >= 256 * supers && x.scale_sum.len() >= 8 * supers);
    // The activations' eight scales in the low half, their eight sums in the high half.
    let split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    let (mut a0, mut a1, mut mins) = (zero(), zero(), _mm256_setzero_ps());
    for (s, b) in row.chunks_exact(K::BYTES).enumerate() {
        let b = b.as_ptr();
        let xs = _mm512_permutexvar_ps(split, _mm512_loadu_ps(x.scale_sum.as_ptr().add(8 * s).cast()));
        let (scale, min) = K::scales(b);
        if let Some(min) = min {
            mins = _mm256_fmadd_ps(
                min,
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(xs))),
                mins,
            );
        }
        let mut scales = [0f32; 8];
        _mm256_storeu_ps(scales.as_mut_ptr(), _mm256_mul_ps(scale, _mm512_castps512_ps256(xs)));
        let a = x.a.as_ptr().add(256 * s);
        for (j, q) in K::codes(b).into_iter().enumerate() {
            // Pairs of exact products summed into 32 bits: |q·a| ≤ 32·128·32767 (Q6_K's scaled codes), two fit.
            let q = _mm512_madd_epi16(q, _mm512_loadu_si512(a.add(32 * j).cast()));
            let q = _mm512_cvtepi32_ps(q);
            if j % 2 == 0 {
                a0 = _mm512_fmadd_ps(q, _mm512_set1_ps(scales[j]), a0);
            } else {
                a1 = _mm512_fmadd_ps(q, _mm512_set1_ps(scales[j]), a1);
            }
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + super::simd_x86::hsum(mins)
}

/// Four float32 rows dotted with two tokens' `x`, 16 lanes at a time (prefill over a dequantized tile).
///
/// # Safety
/// [`available`] is true.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub(super) unsafe fn dot4x2(w: [&[f32]; 4], x0: &[f32], x1: &[f32]) -> [[f32; 4]; 2] {
    let n = x0.len();
    assert!(x1.len() == n && w.iter().all(|w| w.len() == n));
    let load = |v: &[f32], i: usize| _mm512_loadu_ps(v.as_ptr().add(i));
    let mut acc = [[_mm512_setzero_ps(); 4]; 2];
    let mut i = 0;
    while i + 16 <= n {
        let (xv0, xv1) = (load(x0, i), load(x1, i));
        for k in 0..4 {
            let wv = load(w[k], i);
            acc[0][k] = _mm512_fmadd_ps(wv, xv0, acc[0][k]);
            acc[1][k] = _mm512_fmadd_ps(wv, xv1, acc[1][k]);
        }
        i += 16;
    }
    let mut out = [[0.0; 4]; 2];
    for (j, x) in [x0, x1].into_iter().enumerate() {
        for k in 0..4 {
            let tail: f32 = w[k][i..].iter().zip(&x[i..]).map(|(a, b)| a * b).sum();
            out[j][k] = _mm512_reduce_add_ps(acc[j][k]) + tail;
        }
    }
    out
}

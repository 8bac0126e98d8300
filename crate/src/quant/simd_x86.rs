//! AVX2 + FMA + F16C kernels. Every function requires those features (the caller checked them at run time).
//! Block scales multiply a block's partial sum, `d·Σ q·x`, except where a minimum is added (Q4_1), whose
//! weights are formed `d·q + m` first so no cancellation between `d·Σq·x` and `m·Σx` can occur.

use std::arch::x86_64::*;

use super::GgmlType;

/// The dot of one stored row with `x`, for the types with a fused kernel (`None` for the others).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn row_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> Option<f32> {
    Some(match ty {
        GgmlType::F32 => dot_f32(row, x),
        GgmlType::F16 => dot_f16(row, x),
        GgmlType::BF16 => dot_bf16(row, x),
        GgmlType::Q4_0 => dot_q4_0(row, x),
        GgmlType::Q4_1 => dot_q4_1(row, x),
        GgmlType::Q8_0 => dot_q8_0(row, x),
        GgmlType::LoomQ4_0 => dot_loom_q4_0(row, x),
        _ => return None,
    })
}

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The half at `b[0..2]`, broadcast.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn half8(b: &[u8]) -> __m256 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_set1_epi16(bits as i16)))
}

/// The low 8 bytes of `v` as signed integers, to float32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn i8x8_ps(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

/// 8 floats of `x` from element `i`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load(x: &[f32], i: usize) -> __m256 {
    assert!(i + 8 <= x.len());
    _mm256_loadu_ps(x.as_ptr().add(i))
}

/// 16 bytes of `b` from byte `i`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load16(b: &[u8], i: usize) -> __m128i {
    assert!(i + 16 <= b.len());
    _mm_loadu_si128(b.as_ptr().add(i).cast())
}

/// `Σ a[i]·b[i]`: four running sums of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load(a, i + 8 * k), load(b, i + 8 * k), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load(a, i), load(b, i), acc[0]);
        i += 8;
    }
    let tail: f32 = a[i..n].iter().zip(&b[i..n]).map(|(a, b)| a * b).sum();
    hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    )) + tail
}

/// Four rows dotted with one `x`, each 8 floats of `x` loaded once.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot4(w: [&[f32]; 4], x: &[f32]) -> [f32; 4] {
    let n = x.len();
    assert!(w.iter().all(|w| w.len() == n));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 8 <= n {
        let xv = load(x, i);
        for (acc, w) in acc.iter_mut().zip(w) {
            *acc = _mm256_fmadd_ps(load(w, i), xv, *acc);
        }
        i += 8;
    }
    let mut out = [0.0; 4];
    for ((out, acc), w) in out.iter_mut().zip(acc).zip(w) {
        *out = hsum(acc) + w[i..].iter().zip(&x[i..]).map(|(a, b)| a * b).sum::<f32>();
    }
    out
}

/// Four rows dotted with two tokens' `x`, each 8 weights loaded once for both.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot4x2(w: [&[f32]; 4], x0: &[f32], x1: &[f32]) -> [[f32; 4]; 2] {
    let n = x0.len();
    assert!(x1.len() == n && w.iter().all(|w| w.len() == n));
    let mut acc = [[_mm256_setzero_ps(); 4]; 2];
    let mut i = 0;
    while i + 8 <= n {
        let (xv0, xv1) = (load(x0, i), load(x1, i));
        for k in 0..4 {
            let wv = load(w[k], i);
            acc[0][k] = _mm256_fmadd_ps(wv, xv0, acc[0][k]);
            acc[1][k] = _mm256_fmadd_ps(wv, xv1, acc[1][k]);
        }
        i += 8;
    }
    let mut out = [[0.0; 4]; 2];
    for (j, x) in [x0, x1].into_iter().enumerate() {
        for k in 0..4 {
            let tail: f32 = w[k][i..].iter().zip(&x[i..]).map(|(a, b)| a * b).sum();
            out[j][k] = hsum(acc[j][k]) + tail;
        }
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    assert_eq!(row.len(), 4 * n);
    let p = row.as_ptr().cast::<f32>();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(i + 8 * k)), load(x, i + 8 * k), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(i)), load(x, i), acc[0]);
        i += 8;
    }
    let tail: f32 = row[4 * i..]
        .chunks_exact(4)
        .zip(&x[i..])
        .map(|(w, x)| f32::from_le_bytes([w[0], w[1], w[2], w[3]]) * x)
        .sum();
    hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    )) + tail
}

/// Halves (`widen` = F16C) or bfloat16s (`widen` = shift into the high half) dotted with `x`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_16bit(row: &[u8], x: &[f32], widen: unsafe fn(__m128i) -> __m256, one: fn(&[u8]) -> f32) -> f32 {
    let n = x.len();
    assert_eq!(row.len(), 2 * n);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let w = widen(load16(row, 2 * (i + 8 * k)));
            *acc = _mm256_fmadd_ps(w, load(x, i + 8 * k), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(widen(load16(row, 2 * i)), load(x, i), acc[0]);
        i += 8;
    }
    let tail: f32 = row[2 * i..].chunks_exact(2).zip(&x[i..]).map(|(w, x)| one(w) * x).sum();
    hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    )) + tail
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_f16(v: __m128i) -> __m256 {
    _mm256_cvtph_ps(v)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_bf16(v: __m128i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    dot_16bit(row, x, widen_f16, |b| {
        half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    dot_16bit(row, x, widen_bf16, |b| {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    })
}

/// `Σ q·x` over one block of 32 signed codes given as two vectors of 16 bytes (elements 0..16, 16..32).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sum(q0: __m128i, q1: __m128i, x: &[f32]) -> __m256 {
    let s = _mm256_mul_ps(i8x8_ps(q0), load(x, 0));
    let s = _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(q0, 8)), load(x, 8), s);
    let s = _mm256_fmadd_ps(i8x8_ps(q1), load(x, 16), s);
    _mm256_fmadd_ps(i8x8_ps(_mm_srli_si128(q1, 8)), load(x, 24), s)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_0(row: &[u8], x: &[f32]) -> f32 {
    let (low, eight) = (_mm_set1_epi8(0xF), _mm_set1_epi8(8));
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(18).zip(x.chunks_exact(32)) {
        let qs = load16(b, 2);
        let lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);
        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
        acc = _mm256_fmadd_ps(half8(b), block_sum(lo, hi, x), acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
        acc = _mm256_fmadd_ps(half8(b), block_sum(load16(b, 2), load16(b, 18), x), acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_loom_q4_0(row: &[u8], x: &[f32]) -> f32 {
    let (low, eight) = (_mm_set1_epi8(0xF), _mm_set1_epi8(8));
    let mut acc = _mm256_setzero_ps();
    for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let s = _mm256_set1_ps(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let qs = load16(b, 4);
        // Sign-extend 4-bit two's complement: (q ^ 8) − 8. Element 2j is byte j's low nibble.
        let lo = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(qs, low), eight), eight);
        let hi = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight), eight);
        let sum = block_sum(_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi), x);
        acc = _mm256_fmadd_ps(s, sum, acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_1(row: &[u8], x: &[f32]) -> f32 {
    let low = _mm_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let (d, m) = (half8(b), half8(&b[2..]));
        let qs = load16(b, 4);
        let lo = _mm_and_si128(qs, low);
        let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
        let q = [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)];
        for (k, (acc, q)) in acc.iter_mut().zip(q).enumerate() {
            let w = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), m);
            *acc = _mm256_fmadd_ps(w, load(x, 8 * k), *acc);
        }
    }
    hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ))
}

/// Dequantizes whole blocks of the types with a kernel here (`false` for the others), bit-identical to the
/// portable code: the same single products and sums, never fused.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    let (low, eight) = (_mm_set1_epi8(0xF), _mm_set1_epi8(8));
    let blocks = bytes
        .chunks_exact(ty.block_bytes())
        .zip(out.chunks_exact_mut(ty.block_len()));
    match ty {
        GgmlType::F16 => {
            for (h, out) in bytes.chunks_exact(16).zip(out.chunks_exact_mut(8)) {
                store(out, 0, _mm256_cvtph_ps(load16(h, 0)));
            }
            let done = bytes.len() / 16 * 8;
            for (h, v) in bytes[2 * done..].chunks_exact(2).zip(&mut out[done..]) {
                *v = half::f16::from_bits(u16::from_le_bytes([h[0], h[1]])).to_f32();
            }
        }
        GgmlType::BF16 => {
            // A bfloat16 is the top half of its float32.
            for (h, out) in bytes.chunks_exact(16).zip(out.chunks_exact_mut(8)) {
                store(
                    out,
                    0,
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load16(h, 0)))),
                );
            }
            let done = bytes.len() / 16 * 8;
            for (h, v) in bytes[2 * done..].chunks_exact(2).zip(&mut out[done..]) {
                *v = f32::from_bits(u32::from(u16::from_le_bytes([h[0], h[1]])) << 16);
            }
        }
        GgmlType::Q4_0 => {
            for (b, out) in blocks {
                let qs = load16(b, 2);
                let lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);
                let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
                store_block(out, half8(b), lo, hi);
            }
        }
        GgmlType::Q8_0 => {
            for (b, out) in blocks {
                store_block(out, half8(b), load16(b, 2), load16(b, 18));
            }
        }
        GgmlType::LoomQ4_0 => {
            for (b, out) in blocks {
                let s = _mm256_set1_ps(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                let qs = load16(b, 4);
                let lo = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(qs, low), eight), eight);
                let hi = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight), eight);
                store_block(out, s, _mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi));
            }
        }
        GgmlType::Q4_1 => {
            for (b, out) in blocks {
                let (d, m) = (half8(b), half8(&b[2..]));
                let qs = load16(b, 4);
                let lo = _mm_and_si128(qs, low);
                let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low);
                for (k, q) in [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
                    .into_iter()
                    .enumerate()
                {
                    let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
                    store(out, 8 * k, _mm256_add_ps(_mm256_mul_ps(d, q), m));
                }
            }
        }
        GgmlType::Q5_0 => {
            for (b, out) in blocks {
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let [lo, hi] = q5_codes(qh, load16(b, 6));
                let sixteen = _mm_set1_epi8(16);
                store_block(out, half8(b), _mm_sub_epi8(lo, sixteen), _mm_sub_epi8(hi, sixteen));
            }
        }
        GgmlType::Q5_1 => {
            for (b, out) in blocks {
                let (d, m) = (half8(b), half8(&b[2..]));
                let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                let [lo, hi] = q5_codes(qh, load16(b, 8));
                for (k, q) in [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
                    .into_iter()
                    .enumerate()
                {
                    let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
                    store(out, 8 * k, _mm256_add_ps(_mm256_mul_ps(d, q), m));
                }
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let qs_at = if ty == GgmlType::Q5_K { 48 } else { 16 };
            for (b, out) in blocks {
                let (scales, mins) = super::blocks::k_scales(b);
                for (j, out) in out.chunks_exact_mut(32).enumerate() {
                    let at = qs_at + 32 * (j / 2);
                    let shift = _mm_cvtsi32_si128(4 * (j as i32 % 2));
                    let mut q =
                        [load16(b, at), load16(b, at + 16)].map(|q| _mm_and_si128(_mm_srl_epi16(q, shift), low));
                    if ty == GgmlType::Q5_K {
                        // Bit j of the 32 bytes at 16, as bit 4.
                        let bit = _mm_set1_epi8(1 << j);
                        for (h, q) in q.iter_mut().enumerate() {
                            let set = _mm_cmpeq_epi8(_mm_and_si128(load16(b, 16 + 16 * h), bit), bit);
                            *q = _mm_or_si128(*q, _mm_and_si128(set, _mm_set1_epi8(16)));
                        }
                    }
                    let (scale, min) = (_mm256_set1_ps(scales[j]), _mm256_set1_ps(mins[j]));
                    for (k, q8) in [q[0], _mm_srli_si128(q[0], 8), q[1], _mm_srli_si128(q[1], 8)]
                        .into_iter()
                        .enumerate()
                    {
                        let q8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8));
                        store(out, 8 * k, _mm256_sub_ps(_mm256_mul_ps(scale, q8), min));
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            for (b, out) in blocks {
                let d = half::f16::from_bits(u16::from_le_bytes([b[208], b[209]])).to_f32();
                for (j, out) in out.chunks_exact_mut(32).enumerate() {
                    // Sub-block j = 4h + k: nibble k / 2 of the 32 bytes at 64h + 32·(k % 2), bits 2k..2k + 2 of the
                    // 32 bytes at 128 + 32h as bits 4 and 5, minus 32.
                    let (h, k) = (j / 4, j % 4);
                    let (at, high_at) = (64 * h + 32 * (k % 2), 128 + 32 * h);
                    let (shift, high_shift) = (_mm_cvtsi32_si128(4 * (k as i32 / 2)), _mm_cvtsi32_si128(2 * k as i32));
                    for half in 0..2 {
                        let lo = _mm_and_si128(_mm_srl_epi16(load16(b, at + 16 * half), shift), low);
                        let hi = _mm_and_si128(
                            _mm_srl_epi16(load16(b, high_at + 16 * half), high_shift),
                            _mm_set1_epi8(3),
                        );
                        let q = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
                        // Each 16 elements share one int8 scale, rounded into d first as gguf-py does.
                        let scale = _mm256_set1_ps(d * f32::from(b[192 + 2 * j + half] as i8));
                        store(out, 16 * half, _mm256_mul_ps(scale, i8x8_ps(q)));
                        store(out, 16 * half + 8, _mm256_mul_ps(scale, i8x8_ps(_mm_srli_si128(q, 8))));
                    }
                }
            }
        }
        _ => return false,
    }
    true
}

/// Q5_0/Q5_1's 32 codes, 0..32, as bytes (elements 0..16, 16..32): the low and high nibbles of `qs`, with bit `j`
/// of `qh` as element `j`'s bit 4.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_codes(qh: u32, qs: __m128i) -> [__m128i; 2] {
    let low = _mm_set1_epi8(0xF);
    // Byte j of the result holds byte j / 8 of the 16 bits; the mask picks its bit j % 8.
    let spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let bits = _mm_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let high = |word: u32| {
        let set = _mm_and_si128(_mm_shuffle_epi8(_mm_cvtsi32_si128(word as i32), spread), bits);
        _mm_and_si128(_mm_cmpeq_epi8(set, bits), _mm_set1_epi8(16))
    };
    [
        _mm_or_si128(_mm_and_si128(qs, low), high(qh & 0xFFFF)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qs, 4), low), high(qh >> 16)),
    ]
}

/// Stores 8 floats at `out[i..i + 8]`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store(out: &mut [f32], i: usize, v: __m256) {
    assert!(i + 8 <= out.len());
    _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
}

/// Stores one block of 32 `scale·q` (signed codes: elements 0..16 in `q0`, 16..32 in `q1`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_block(out: &mut [f32], scale: __m256, q0: __m128i, q1: __m128i) {
    store(out, 0, _mm256_mul_ps(scale, i8x8_ps(q0)));
    store(out, 8, _mm256_mul_ps(scale, i8x8_ps(_mm_srli_si128(q0, 8))));
    store(out, 16, _mm256_mul_ps(scale, i8x8_ps(q1)));
    store(out, 24, _mm256_mul_ps(scale, i8x8_ps(_mm_srli_si128(q1, 8))));
}

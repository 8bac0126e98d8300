//! Q4_0 and Q4_K with their rows interleaved eight at a time ([`GgmlType::Q4_0x8`], [`GgmlType::Q4_Kx8`]), made when
//! a CPU engine opens a model, for the AVX2 decode kernels (llama.cpp repacks for the same reason,
//! `ggml-cpu/repack.cpp`). Stored rows give a kernel one row's 32 codes per load, to be spread into 16-bit lanes by
//! shuffles and summed across lanes at the end. Here one 32-byte load holds four pairs of codes of each of eight rows,
//! one pair to a nibble of each 16-bit lane: shifts and masks take the pairs apart, one broadcast pair of activations
//! multiplies eight rows at once (`vpmaddwd`), and each row's sum stays in its own 32-bit lane, with no shuffles and
//! no sums across lanes (BENCHMARKS.md).
//!
//! The codes of 32 elements of eight rows ("a code block", 128 bytes) are four vectors of 32 bytes: in vector `m`,
//! 16-bit lane `2r + t` holds in its nibble `n` row `r`'s code for element `2(4m + n) + t`. Per group of eight rows:
//! - Q4_0x8, per block of 32 columns (144 bytes, eight stored blocks' worth): the eight rows' f16 scales, then the
//!   code block.
//! - Q4_Kx8, per super-block of 256 columns (1184 bytes, 32 more than eight stored ones): the eight rows' f16 `d`,
//!   their f16 `dmin`, the 6-bit sub-block scales as bytes (sub-block `j`'s eight rows at `32 + 8j`), the minima the
//!   same way (at `96 + 8j`), then the eight sub-blocks' code blocks.
//!
//! A group's bytes follow each other, so a run of whole groups of rows is a run of bytes.

#[cfg(target_arch = "x86_64")]
use super::matmul::Level;
use super::matmul::QMatrix;
use super::{blocks, GgmlType};
use crate::error::{LoomError, Result};

/// Rows in a group.
pub(super) const ROWS: usize = 8;
/// Bytes of one block of a Q4_0x8 group: eight stored Q4_0 blocks.
const Q4_0_GROUP: usize = ROWS * 18;
/// Bytes of one super-block of a Q4_Kx8 group.
pub(super) const Q4_K_GROUP: usize = 32 + 2 * 64 + 8 * CODE_BLOCK;
/// Bytes of a code block: 32 elements of eight rows.
const CODE_BLOCK: usize = 128;
/// Where a Q4_Kx8 super-block's scales, minima and code blocks start.
const K_SCALES: usize = 32;
const K_MINS: usize = 96;
const K_CODES: usize = 160;

/// The interleaved type of `ty`, where there is one.
fn interleaved_type(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::Q4_0 => Some(GgmlType::Q4_0x8),
        GgmlType::Q4_K => Some(GgmlType::Q4_Kx8),
        _ => None,
    }
}

/// `w` (Q4_0 or Q4_K, its rows a multiple of eight) with its rows interleaved: [`GgmlType::Q4_0x8`] (the same bytes
/// in another order) or [`GgmlType::Q4_Kx8`], and the bytes.
pub fn interleave(w: &QMatrix) -> Result<(GgmlType, Vec<u8>)> {
    let w = QMatrix::new(w.ty, w.rows, w.cols, w.data)?;
    let ty = interleaved_type(w.ty)
        .filter(|_| w.rows.is_multiple_of(ROWS))
        .ok_or_else(|| {
            LoomError::InvalidInput(format!(
                "interleaving a {} matrix of {} rows: only Q4_0 and Q4_K in whole groups of {ROWS} rows",
                w.ty, w.rows
            ))
        })?;
    let groups = w.rows / ROWS;
    let (stored_block, group_block) = match ty {
        GgmlType::Q4_0x8 => (18, Q4_0_GROUP),
        _ => (144, Q4_K_GROUP),
    };
    let blocks = w.data.len() / (w.rows * stored_block).max(1);
    let mut out = vec![0u8; groups * blocks * group_block];
    for (group, stored) in out
        .chunks_exact_mut(blocks * group_block)
        .zip(w.data.chunks_exact(ROWS * blocks * stored_block))
    {
        for (k, g) in group.chunks_exact_mut(group_block).enumerate() {
            let row = |r: usize| &stored[(r * blocks + k) * stored_block..][..stored_block];
            for r in 0..ROWS {
                g[2 * r..2 * r + 2].copy_from_slice(&row(r)[..2]);
            }
            if ty == GgmlType::Q4_0x8 {
                pack_codes(&mut g[16..], |r, e| q4_0_code(row(r), e));
                continue;
            }
            for r in 0..ROWS {
                g[16 + 2 * r..18 + 2 * r].copy_from_slice(&row(r)[2..4]);
                let (sc, mn) = blocks::k_scale_min(&row(r)[4..16]);
                for j in 0..8 {
                    g[K_SCALES + 8 * j + r] = sc[j];
                    g[K_MINS + 8 * j + r] = mn[j];
                }
            }
            for j in 0..8 {
                let codes = &mut g[K_CODES + CODE_BLOCK * j..];
                // Sub-block j: nibble j % 2 of the 32 bytes at 16 + 32·(j / 2).
                pack_codes(codes, |r, e| (row(r)[16 + 32 * (j / 2) + e] >> (4 * (j % 2))) & 15);
            }
        }
    }
    Ok((ty, out))
}

/// Element `e`'s code in a stored Q4_0 block: byte `2 + j` holds element `j` in its low nibble, `j + 16` in its high.
fn q4_0_code(block: &[u8], e: usize) -> u8 {
    match e < 16 {
        true => block[2 + e] & 15,
        false => block[2 + e - 16] >> 4,
    }
}

/// Writes the code block of `code(row, element)` (32 elements of eight rows) at the start of `out`.
fn pack_codes(out: &mut [u8], code: impl Fn(usize, usize) -> u8) {
    for r in 0..ROWS {
        for (m, t) in (0..4).flat_map(|m| [(m, 0), (m, 1)]) {
            let mut word = 0u16;
            for n in 0..4 {
                word |= u16::from(code(r, 2 * (4 * m + n) + t)) << (4 * n);
            }
            let at = 32 * m + 2 * (2 * r + t);
            out[at..at + 2].copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// Row `r`'s code of element `e` in the code block at the start of `g`.
fn unpacked_code(g: &[u8], r: usize, e: usize) -> u8 {
    let (m, n, t) = (e / 8, e / 2 % 4, e % 2);
    let at = 32 * m + 2 * (2 * r + t);
    (u16::from_le_bytes([g[at], g[at + 1]]) >> (4 * n)) as u8 & 15
}

/// Whether a CPU engine should hold a matrix of `ty` with `rows` rows interleaved ([`interleave`]): Q4_0 and Q4_K in
/// whole groups, where decode runs the AVX2 kernels (AVX-512 keeps its own row kernels, and wasm has no interleaved
/// kernels yet).
pub fn interleave_pays(ty: GgmlType, rows: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    let avx2 = Level::current() == Level::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    avx2 && interleaved_type(ty).is_some() && rows > 0 && rows.is_multiple_of(ROWS)
}

/// Row `r` of an interleaved matrix's bytes (`cols` columns) into `out`, bit-identical to the stored row's values
/// (`blocks::dequantize_block`'s arithmetic).
pub(super) fn dequantize_row(ty: GgmlType, data: &[u8], cols: usize, r: usize, out: &mut [f32]) {
    let (len, group_block) = match ty {
        GgmlType::Q4_0x8 => (32, Q4_0_GROUP),
        _ => (256, Q4_K_GROUP),
    };
    let blocks = cols / len;
    let group = &data[r / ROWS * blocks * group_block..][..blocks * group_block];
    let r = r % ROWS;
    for (g, out) in group.chunks_exact(group_block).zip(out.chunks_exact_mut(len)) {
        let d = blocks::half(&g[2 * r..]);
        if ty == GgmlType::Q4_0x8 {
            for (e, v) in out.iter_mut().enumerate() {
                *v = (f32::from(unpacked_code(&g[16..], r, e)) - 8.0) * d;
            }
            continue;
        }
        let dmin = blocks::half(&g[16 + 2 * r..]);
        for (j, out) in out.chunks_exact_mut(32).enumerate() {
            let scale = d * f32::from(g[K_SCALES + 8 * j + r]);
            let min = dmin * f32::from(g[K_MINS + 8 * j + r]);
            let codes = &g[K_CODES + CODE_BLOCK * j..];
            for (e, v) in out.iter_mut().enumerate() {
                *v = scale * f32::from(unpacked_code(codes, r, e)) - min;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::{rows_dot_16, unpack_tile};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{CODE_BLOCK, K_CODES, K_MINS, K_SCALES, Q4_0_GROUP, Q4_K_GROUP, ROWS};
    use crate::quant::activations::Activations16;
    use crate::quant::matmul::{prefetch, PREFETCH_BYTES};
    use crate::quant::GgmlType;

    /// The dots of whole groups of interleaved rows (`out.len()` rows, a multiple of eight) with `x`. Per block of
    /// 32 columns, [`code_dot`] of each row's codes as stored (from 0) less `8·Σa` (for `q − 8`): exact integers.
    /// Q4_0x8: times the eight scales and the activations' scale in one multiply-add. Q4_Kx8: times the sub-block
    /// scales (still exact) and the activations' scale, with `Σx` times the scales and the minima beside; `d` and
    /// `dmin` once a super-block.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `ty` is Q4_0x8 or Q4_Kx8 and `rows` holds `out.len()` of its rows of `x`'s columns.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
        let blocks = x.scale_sum.len();
        assert!(x.a.len() == 32 * blocks && x.block_sum.len() == blocks && out.len().is_multiple_of(ROWS));
        let group_bytes = match ty {
            GgmlType::Q4_0x8 => blocks * Q4_0_GROUP,
            _ => blocks / 8 * Q4_K_GROUP,
        };
        assert!(rows.len() == out.len() / ROWS * group_bytes && (ty == GgmlType::Q4_0x8 || blocks.is_multiple_of(8)));
        let low = _mm256_set1_epi16(15);
        // `q − 8` summed over a block of the activations.
        let centred = |sums: __m256i, k: usize| _mm256_sub_epi32(sums, _mm256_set1_epi32(8 * x.block_sum[k]));
        for (group, out) in rows.chunks_exact(group_bytes).zip(out.chunks_exact_mut(ROWS)) {
            let mut acc = _mm256_setzero_ps();
            if ty == GgmlType::Q4_0x8 {
                for k in 0..blocks {
                    let b = group.as_ptr().add(k * Q4_0_GROUP);
                    prefetch(b.wrapping_add(PREFETCH_BYTES), Q4_0_GROUP);
                    let sums = centred(code_dot(b.add(16), x, k, low), k);
                    let d = _mm256_cvtph_ps(_mm_loadu_si128(b.cast()));
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(x.scale_sum[k][0]));
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
                }
            } else {
                for s in 0..blocks / 8 {
                    let b = group.as_ptr().add(s * Q4_K_GROUP);
                    prefetch(b.wrapping_add(PREFETCH_BYTES), Q4_K_GROUP);
                    // Σ sc·Σ(q − 8)·a·xs, Σ sc·Σx and Σ m·Σx over the sub-blocks.
                    let (mut dots, mut scales, mut mins) =
                        (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
                    for j in 0..8 {
                        let k = 8 * s + j;
                        let sums = centred(code_dot(b.add(K_CODES + CODE_BLOCK * j), x, k, low), k);
                        let bytes = |at: usize| _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(at + 8 * j).cast()));
                        let (sc, mn) = (bytes(K_SCALES), bytes(K_MINS));
                        let [xs, sx] = x.scale_sum[k];
                        // Exact: |Σ(q − 8)·a| ≤ 32·8·32767, times a scale < 64.
                        let scaled = _mm256_cvtepi32_ps(_mm256_mullo_epi32(sums, sc));
                        dots = _mm256_fmadd_ps(scaled, _mm256_set1_ps(xs), dots);
                        scales = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sc), _mm256_set1_ps(sx), scales);
                        mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(sx), mins);
                    }
                    let d = _mm256_cvtph_ps(_mm_loadu_si128(b.cast()));
                    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(b.add(16).cast()));
                    // d·(Σ sc·Σ(q − 8)·a·xs + 8·Σ sc·Σx) − dmin·Σ m·Σx.
                    let centre = _mm256_fmadd_ps(scales, _mm256_set1_ps(8.0), dots);
                    acc = _mm256_fmadd_ps(centre, d, acc);
                    acc = _mm256_fnmadd_ps(mins, dmin, acc);
                }
            }
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    }

    /// Eight rows' `Σ q·a` over block `k` of the activations, the codes as stored, from the code block at `codes`:
    /// sixteen pairwise dots, each of one broadcast pair of activations with that pair of the eight rows.
    #[inline(always)]
    unsafe fn code_dot(codes: *const u8, x: &Activations16, k: usize, low: __m256i) -> __m256i {
        let pairs = x.a.as_ptr().add(32 * k).cast::<i32>();
        // Two chains of sums, so that each add waits on the one before last.
        let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for m in 0..4 {
            let q = nibbles(codes.add(32 * m), low);
            for (n, q) in q.into_iter().enumerate() {
                let a = _mm256_set1_epi32(pairs.add(4 * m + n).read_unaligned());
                let p = _mm256_madd_epi16(q, a);
                match n % 2 {
                    0 => s0 = _mm256_add_epi32(s0, p),
                    _ => s1 = _mm256_add_epi32(s1, p),
                }
            }
        }
        _mm256_add_epi32(s0, s1)
    }

    /// [`crate::quant::prefill`]'s tile from whole groups of interleaved rows of `cols` columns: each row's codes
    /// less 8 in order ([`transpose_codes`]), each block's scale, and its minimum plus 8 times its scale (zero for
    /// Q4_0x8), formed as the portable unpacking forms them.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `ty` is Q4_0x8 or Q4_Kx8; `rows` holds whole groups of its rows of `cols` columns,
    /// `codes` their `[rows][cols]`, and `scale` and `min` their `[rows][cols / 32]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack_tile(
        ty: GgmlType,
        rows: &[u8],
        cols: usize,
        codes: &mut [i16],
        scale: &mut [f32],
        min: &mut [f32],
    ) {
        let blocks = cols / 32;
        let count = codes.len() / cols.max(1);
        let group_bytes = match ty {
            GgmlType::Q4_0x8 => blocks * Q4_0_GROUP,
            _ => blocks / 8 * Q4_K_GROUP,
        };
        assert!(count.is_multiple_of(ROWS) && rows.len() == count / ROWS * group_bytes);
        assert!(codes.len() == count * cols && scale.len() == count * blocks && min.len() == scale.len());
        for (g, group) in rows.chunks_exact(group_bytes.max(1)).enumerate() {
            let codes = &mut codes[ROWS * g * cols..];
            let (scale, min) = (&mut scale[ROWS * g * blocks..], &mut min[ROWS * g * blocks..]);
            if ty == GgmlType::Q4_0x8 {
                for k in 0..blocks {
                    let b = group.as_ptr().add(k * Q4_0_GROUP);
                    transpose_codes(b.add(16), codes, cols, 32 * k);
                    for r in 0..ROWS {
                        scale[r * blocks + k] = crate::quant::blocks::half(&group[k * Q4_0_GROUP + 2 * r..]);
                        min[r * blocks + k] = 0.0;
                    }
                }
                continue;
            }
            for (s, b) in group.chunks_exact(Q4_K_GROUP).enumerate() {
                for j in 0..8 {
                    let k = 8 * s + j;
                    transpose_codes(b.as_ptr().add(K_CODES + CODE_BLOCK * j), codes, cols, 32 * k);
                    for r in 0..ROWS {
                        let (d, dmin) = (
                            crate::quant::blocks::half(&b[2 * r..]),
                            crate::quant::blocks::half(&b[16 + 2 * r..]),
                        );
                        let sc = d * f32::from(b[K_SCALES + 8 * j + r]);
                        scale[r * blocks + k] = sc;
                        min[r * blocks + k] = -(dmin * f32::from(b[K_MINS + 8 * j + r])) + sc * 8.0;
                    }
                }
            }
        }
    }

    /// The code block at `p` as eight rows of 32 codes less 8, at `codes[r·cols + at..]`: the sixteen vectors of one
    /// pair of codes of eight rows (a 32-bit lane a row) transposed into eight rows of sixteen pairs.
    #[inline(always)]
    unsafe fn transpose_codes(p: *const u8, codes: &mut [i16], cols: usize, at: usize) {
        let (low, eight) = (_mm256_set1_epi16(15), _mm256_set1_epi16(8));
        // (Loops, not closures: a closure does not inherit the target features, and its intrinsics become calls.)
        let mut pairs = [_mm256_setzero_ps(); 16];
        for m in 0..4 {
            let q = nibbles(p.add(32 * m), low);
            for n in 0..4 {
                pairs[4 * m + n] = _mm256_castsi256_ps(_mm256_sub_epi16(q[n], eight));
            }
        }
        assert!(at + 32 <= cols && codes.len() >= (ROWS - 1) * cols + at + 32);
        for half in 0..2 {
            let p = &pairs[8 * half..];
            let rows8 = transpose8([p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]]);
            for (r, v) in rows8.into_iter().enumerate() {
                _mm256_storeu_ps(codes.as_mut_ptr().add(r * cols + at + 16 * half).cast(), v);
            }
        }
    }

    /// The 32 bytes at `p` (a vector of a code block) as four vectors of codes, nibble `n` of each 16-bit lane
    /// in vector `n` (`low`: fifteen in every 16-bit lane).
    #[inline(always)]
    unsafe fn nibbles(p: *const u8, low: __m256i) -> [__m256i; 4] {
        let v = _mm256_loadu_si256(p.cast());
        [
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
            _mm256_and_si256(_mm256_srli_epi16::<8>(v), low),
            _mm256_srli_epi16::<12>(v),
        ]
    }

    /// Eight vectors of eight 32-bit lanes, transposed: lane `j` of vector `i` goes to lane `i` of vector `j`.
    #[inline(always)]
    unsafe fn transpose8(v: [__m256; 8]) -> [__m256; 8] {
        let t = [
            _mm256_unpacklo_ps(v[0], v[1]),
            _mm256_unpackhi_ps(v[0], v[1]),
            _mm256_unpacklo_ps(v[2], v[3]),
            _mm256_unpackhi_ps(v[2], v[3]),
            _mm256_unpacklo_ps(v[4], v[5]),
            _mm256_unpackhi_ps(v[4], v[5]),
            _mm256_unpacklo_ps(v[6], v[7]),
            _mm256_unpackhi_ps(v[6], v[7]),
        ];
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        [
            _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
            _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
        ]
    }
}

//! Q4_0 with its rows interleaved eight at a time ([`GgmlType::Q4_0x8`]), made when a CPU engine opens a model, for
//! the AVX2 decode kernel (llama.cpp repacks for the same reason, `ggml-cpu/repack.cpp`). Stored Q4_0 gives a kernel
//! one row's 32 codes per load, to be spread into 16-bit lanes by shuffles and summed across lanes at the end. Here
//! one 32-byte load holds four pairs of codes of each of eight rows, one pair to a nibble of each 16-bit lane: shifts
//! and masks take the pairs apart, one broadcast pair of activations multiplies eight rows at once (`vpmaddwd`), and
//! each row's sum stays in its own 32-bit lane, with no shuffles and no sums across lanes (BENCHMARKS.md).
//!
//! Layout, per group of eight rows, per block `k` of 32 columns (144 bytes, eight stored blocks' worth): the eight
//! rows' f16 scales, then four vectors of 32 bytes; in vector `m`, 16-bit lane `2r + t` holds in its nibble `n`
//! row `r`'s code for element `2(4m + n) + t`. A group's bytes are its eight stored rows' bytes in another order, so a
//! run of whole groups is a run of rows.

#[cfg(target_arch = "x86_64")]
use super::matmul::Level;
use super::matmul::QMatrix;
use super::{blocks, GgmlType};
use crate::error::{LoomError, Result};

/// Rows in a group.
pub(super) const ROWS: usize = 8;
/// Bytes of one block of a group: eight stored Q4_0 blocks.
const GROUP_BLOCK: usize = ROWS * 18;

/// `w` (Q4_0, rows a multiple of eight) as [`GgmlType::Q4_0x8`]: the same bytes in the interleaved order.
pub fn interleave_q4_0(w: &QMatrix) -> Result<Vec<u8>> {
    let w = QMatrix::new(w.ty, w.rows, w.cols, w.data)?;
    if w.ty != GgmlType::Q4_0 || !w.rows.is_multiple_of(ROWS) {
        return Err(LoomError::InvalidInput(format!(
            "interleaving a {} matrix of {} rows: only Q4_0 in whole groups of {ROWS} rows",
            w.ty, w.rows
        )));
    }
    let blocks = w.cols / 32;
    let mut out = vec![0u8; w.data.len()];
    for (group, stored) in out
        .chunks_exact_mut(blocks * GROUP_BLOCK)
        .zip(w.data.chunks_exact(blocks * GROUP_BLOCK))
    {
        let row_bytes = blocks * 18;
        for (k, g) in group.chunks_exact_mut(GROUP_BLOCK).enumerate() {
            for r in 0..ROWS {
                let b = &stored[r * row_bytes + 18 * k..][..18];
                g[2 * r..2 * r + 2].copy_from_slice(&b[..2]);
                for (m, t) in (0..4).flat_map(|m| [(m, 0), (m, 1)]) {
                    let mut word = 0u16;
                    for n in 0..4 {
                        word |= u16::from(code(b, 2 * (4 * m + n) + t)) << (4 * n);
                    }
                    let at = 16 + 32 * m + 2 * (2 * r + t);
                    g[at..at + 2].copy_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
    Ok(out)
}

/// Element `e`'s code in a stored Q4_0 block: byte `2 + j` holds element `j` in its low nibble, `j + 16` in its high.
fn code(block: &[u8], e: usize) -> u8 {
    match e < 16 {
        true => block[2 + e] & 15,
        false => block[2 + e - 16] >> 4,
    }
}

/// Whether a CPU engine should hold a matrix of `ty` with `rows` rows as [`GgmlType::Q4_0x8`]: Q4_0 in whole groups,
/// where decode runs the AVX2 kernels (AVX-512 keeps its own row kernel, and wasm has no interleaved kernel yet).
pub fn interleave_pays(ty: GgmlType, rows: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    let avx2 = Level::current() == Level::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    avx2 && ty == GgmlType::Q4_0 && rows > 0 && rows.is_multiple_of(ROWS)
}

/// Row `r` of a group's block (`GROUP_BLOCK` bytes) as the stored Q4_0 block it came from.
fn stored_block(g: &[u8], r: usize) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..2].copy_from_slice(&g[2 * r..2 * r + 2]);
    for (m, t) in (0..4).flat_map(|m| [(m, 0), (m, 1)]) {
        let at = 16 + 32 * m + 2 * (2 * r + t);
        let word = u16::from_le_bytes([g[at], g[at + 1]]);
        for n in 0..4 {
            let (e, q) = (2 * (4 * m + n) + t, (word >> (4 * n)) as u8 & 15);
            match e < 16 {
                true => b[2 + e] |= q,
                false => b[2 + e - 16] |= q << 4,
            }
        }
    }
    b
}

/// Row `r` of an interleaved matrix's bytes (`cols` columns) into `out`, bit-identical to the stored row's values.
pub(super) fn dequantize_row(data: &[u8], cols: usize, r: usize, out: &mut [f32]) {
    let blocks = cols / 32;
    let group = &data[r / ROWS * blocks * GROUP_BLOCK..][..blocks * GROUP_BLOCK];
    for (g, out) in group.chunks_exact(GROUP_BLOCK).zip(out.chunks_exact_mut(32)) {
        blocks::dequantize_block(GgmlType::Q4_0, &stored_block(g, r % ROWS), out);
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::{rows_dot_16, unpack_tile};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{GROUP_BLOCK, ROWS};
    use crate::quant::activations::Activations16;
    use crate::quant::matmul::{prefetch, PREFETCH_BYTES};

    /// The dots of whole groups of interleaved rows (`out.len()` rows, a multiple of eight) with `x`: per block, for
    /// each of the sixteen activation pairs, one 16-bit pairwise dot (`vpmaddwd`) with eight rows' codes of that pair,
    /// the codes as stored (from 0); then `8·Σa` taken off once for `q − 8`, and one multiply-add by the eight scales
    /// times the activations' scale.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `rows` holds `out.len()` interleaved rows of `x`'s columns.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn rows_dot_16(rows: &[u8], x: &Activations16, out: &mut [f32]) {
        let blocks = x.scale_sum.len();
        assert!(out.len().is_multiple_of(ROWS) && rows.len() == out.len() / ROWS * blocks * GROUP_BLOCK);
        assert!(x.a.len() == 32 * blocks && x.block_sum.len() == blocks);
        let low = _mm256_set1_epi16(15);
        for (group, out) in rows.chunks_exact(blocks * GROUP_BLOCK).zip(out.chunks_exact_mut(ROWS)) {
            let mut acc = _mm256_setzero_ps();
            for k in 0..blocks {
                let b = group.as_ptr().add(k * GROUP_BLOCK);
                prefetch(b.wrapping_add(PREFETCH_BYTES), GROUP_BLOCK);
                let pairs = x.a.as_ptr().add(32 * k).cast::<i32>();
                // Two chains of sums, so that each add waits on the one before last.
                let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for m in 0..4 {
                    let q = nibbles(b.add(16 + 32 * m), low);
                    for (n, q) in q.into_iter().enumerate() {
                        let a = _mm256_set1_epi32(pairs.add(4 * m + n).read_unaligned());
                        let p = _mm256_madd_epi16(q, a);
                        match n % 2 {
                            0 => s0 = _mm256_add_epi32(s0, p),
                            _ => s1 = _mm256_add_epi32(s1, p),
                        }
                    }
                }
                // Exact: |Σ q·a| ≤ 32·15·32767 and 8·Σa fit 32 bits.
                let eight_sum = _mm256_set1_epi32(8 * *x.block_sum.get_unchecked(k));
                let sums = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), eight_sum);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(b.cast()));
                let scale = _mm256_mul_ps(d, _mm256_set1_ps(x.scale_sum.get_unchecked(k)[0]));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    }

    /// [`crate::quant::prefill`]'s tile from whole groups of interleaved rows of `cols` columns: each row's codes
    /// less 8, in order, and its scales. Per block, the sixteen vectors of one pair of codes of eight rows (a 32-bit
    /// lane a row) are transposed into eight rows of sixteen pairs.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `rows` holds whole groups of rows of `cols` columns, `codes` their `[rows][cols]` and
    /// `scale` their `[rows][cols / 32]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack_tile(rows: &[u8], cols: usize, codes: &mut [i16], scale: &mut [f32]) {
        let blocks = cols / 32;
        let count = rows.len() / (18 * blocks).max(1);
        assert!(count.is_multiple_of(ROWS) && rows.len() == count * blocks * 18);
        assert!(codes.len() == count * cols && scale.len() == count * blocks);
        let (low, eight) = (_mm256_set1_epi16(15), _mm256_set1_epi16(8));
        for (g, group) in rows.chunks_exact(blocks * GROUP_BLOCK).enumerate() {
            for k in 0..blocks {
                let b = group.as_ptr().add(k * GROUP_BLOCK);
                // (Loops, not closures: a closure does not inherit the target features, and its intrinsics
                // become calls.)
                let mut pairs = [_mm256_setzero_ps(); 16];
                for m in 0..4 {
                    let q = nibbles(b.add(16 + 32 * m), low);
                    for n in 0..4 {
                        pairs[4 * m + n] = _mm256_castsi256_ps(_mm256_sub_epi16(q[n], eight));
                    }
                }
                for half in 0..2 {
                    let p = &pairs[8 * half..];
                    let rows8 = transpose8([p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]]);
                    for (r, v) in rows8.into_iter().enumerate() {
                        let at = (ROWS * g + r) * cols + 32 * k + 16 * half;
                        _mm256_storeu_ps(codes.as_mut_ptr().add(at).cast(), v);
                    }
                }
                let mut d = [0f32; ROWS];
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(b.cast())));
                for (r, d) in d.into_iter().enumerate() {
                    scale[(ROWS * g + r) * blocks + k] = d;
                }
            }
        }
    }

    /// The 32 bytes at `p` (a vector of a group's block) as four vectors of codes, nibble `n` of each 16-bit lane
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

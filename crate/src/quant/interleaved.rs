//! Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K with their rows interleaved eight at a time ([`GgmlType::Q4_0x8`],
//! [`GgmlType::Q4_1x8`], [`GgmlType::Q5_0x8`], [`GgmlType::Q5_1x8`], [`GgmlType::Q4_Kx8`], [`GgmlType::Q5_Kx8`],
//! [`GgmlType::Q6_Kx8`]), made when a CPU engine opens a model, for the x86-64 decode kernels
//! (AVX2; AVX-512 with VNNI, two groups to a vector; llama.cpp repacks for the same reason,
//! `ggml-cpu/repack.cpp`). Stored rows give a kernel one row's 32 codes per load, to be spread into 16-bit lanes by
//! shuffles and summed across lanes at the end. Here one 32-byte load holds four pairs of codes of each of eight rows,
//! one pair to a nibble of each 16-bit lane: shifts and masks take the pairs apart, one broadcast pair of activations
//! multiplies eight rows at once (`vpmaddwd`), and each row's sum stays in its own 32-bit lane, with no shuffles and
//! no sums across lanes (BENCHMARKS.md).
//!
//! The 4-bit codes of 32 elements of eight rows ("a code block", 128 bytes) are four vectors of 32 bytes: in vector
//! `m`, 16-bit lane `2r + t` holds in its nibble `n` row `r`'s code for element `2(4m + n) + t`. The 5-bit types keep
//! each code's bit 4 apart ("a high block", 32 bytes): bit `p` of 16-bit lane `2r + t` is that of element `2p + t` of
//! row `r`. Per group of eight rows:
//! - Q4_0x8 (Q5_0x8), per block of 32 columns: the eight rows' f16 scales, then the code block (and the high block):
//!   144 (176) bytes, eight stored blocks' worth. Q4_1x8 (Q5_1x8): the eight f16 minima between the scales and the
//!   code block, 160 (192) bytes.
//! - Q4_Kx8 (Q5_Kx8), per super-block of 256 columns: the eight rows' f16 `d`, their f16 `dmin`, the 6-bit sub-block
//!   scales as bytes (sub-block `j`'s eight rows at `32 + 8j`), the minima the same way (at `96 + 8j`), then each
//!   sub-block's code block (and high block): 1184 (1440) bytes, 32 more than eight stored super-blocks.
//! - Q6_Kx8, per super-block: the eight rows' f16 `d`, the int8 scales of the sixteen sub-blocks of 16 (sub-block
//!   `s`'s eight rows at `16 + 8s`), then per 32 columns the code block of the low four bits and a 64-byte high
//!   block of bits 4 and 5 (bits `2i..` of lane `2r + t` of its vector `v` those of element `2(8v + i) + t`): 1680
//!   bytes, as stored. Its kernels sum each half block apart, for its scale.
//!
//! A group's bytes follow each other, so a run of whole groups of rows is a run of bytes.

#[cfg(target_arch = "x86_64")]
use super::matmul::Level;
use super::matmul::QMatrix;
use super::{blocks, GgmlType};
use crate::error::{LoomError, Result};

/// Rows in a group.
pub(super) const ROWS: usize = 8;
/// Bytes of a code block (32 elements of eight rows) and of a high block.
const CODE_BLOCK: usize = 128;
const HIGH_BLOCK: usize = 32;
/// Where a K-quant group's scales, minima and sub-blocks start.
const K_SCALES: usize = 32;
const K_MINS: usize = 96;
const K_CODES: usize = 160;
/// Where a Q6_Kx8 group's int8 scales (sixteen sub-blocks of 16) and codes start.
const Q6_SCALES: usize = 16;
const Q6_CODES: usize = 144;

/// Where an interleaved type keeps things, per group of eight rows and block of `len` columns (a super-block for the
/// K-quants).
#[derive(Clone, Copy)]
pub(super) struct Geometry {
    /// Columns per block.
    len: usize,
    /// Bytes of a stored block of the type it came from.
    stored: usize,
    /// Bytes of a group's block.
    pub(super) group: usize,
    /// Bytes of a code block and, for a 5- or 6-bit type, its high block.
    sub: usize,
    /// Where the first code block starts: after the scales (and minima) of the eight rows.
    first: usize,
    /// Whether codes have a fifth bit (a high block after each code block).
    high: bool,
    /// Whether codes have two high bits (Q6_Kx8: a 64-byte high block after each code block).
    six: bool,
    /// Whether the block has sub-blocks with scales (and minima: Q4_K, Q5_K).
    k: bool,
    /// Whether a block of 32 has a minimum (Q4_1, Q5_1: the eight rows' f16 minima after their scales).
    min: bool,
    /// What the codes are centred on: 8 for 4 bits, 16 for 5, 32 for 6.
    centre: i32,
}

impl Geometry {
    /// `ty`'s geometry (`ty` one of the interleaved types; any other is taken as Q6_Kx8).
    pub(super) const fn of(ty: GgmlType) -> Geometry {
        let (len, stored, high, six, k, min) = match ty {
            GgmlType::Q4_0x8 => (32, 18, false, false, false, false),
            GgmlType::Q4_1x8 => (32, 20, false, false, false, true),
            GgmlType::Q5_0x8 => (32, 22, true, false, false, false),
            GgmlType::Q5_1x8 => (32, 24, true, false, false, true),
            GgmlType::Q4_Kx8 => (256, 144, false, false, true, false),
            GgmlType::Q5_Kx8 => (256, 176, true, false, true, false),
            _ => (256, 210, false, true, true, false),
        };
        let sub = CODE_BLOCK
            + if high {
                HIGH_BLOCK
            } else if six {
                2 * HIGH_BLOCK
            } else {
                0
            };
        let first = match (six, k) {
            (true, _) => Q6_CODES,
            (_, true) => K_CODES,
            // The eight f16 scales, and the eight minima where there are.
            _ => 16 * (1 + min as usize),
        };
        Geometry {
            len,
            stored,
            group: first + if k { 8 * sub } else { sub },
            sub,
            first,
            high,
            six,
            k,
            min,
            centre: if six {
                32
            } else if high {
                16
            } else {
                8
            },
        }
    }

    /// Where sub-block `j`'s code block starts (its high block follows it).
    const fn codes(self, j: usize) -> usize {
        self.first + self.sub * j
    }

    /// Bytes of a group of eight rows of `cols` columns (whole blocks).
    const fn group_bytes(self, cols: usize) -> usize {
        cols / self.len * self.group
    }
}

/// The interleaved type of `ty`, where there is one.
fn interleaved_type(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::Q4_0 => Some(GgmlType::Q4_0x8),
        GgmlType::Q4_1 => Some(GgmlType::Q4_1x8),
        GgmlType::Q5_0 => Some(GgmlType::Q5_0x8),
        GgmlType::Q5_1 => Some(GgmlType::Q5_1x8),
        GgmlType::Q4_K => Some(GgmlType::Q4_Kx8),
        GgmlType::Q5_K => Some(GgmlType::Q5_Kx8),
        GgmlType::Q6_K => Some(GgmlType::Q6_Kx8),
        _ => None,
    }
}

/// `w` (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K, its rows a multiple of eight) with its rows interleaved, and the
/// interleaved type: [`GgmlType::Q4_Kx8`] and [`GgmlType::Q5_Kx8`] hold 4 bytes a row more, the others the same bytes
/// in another order.
pub fn interleave(w: &QMatrix) -> Result<(GgmlType, Vec<u8>)> {
    let w = QMatrix::new(w.ty, w.rows, w.cols, w.data)?;
    let ty = interleaved_type(w.ty)
        .filter(|_| w.rows.is_multiple_of(ROWS))
        .ok_or_else(|| {
            LoomError::InvalidInput(format!(
                "interleaving a {} matrix of {} rows: only Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K in whole groups of \
                 {ROWS} rows",
                w.ty, w.rows
            ))
        })?;
    let geo = Geometry::of(ty);
    let blocks = w.cols / geo.len;
    let mut out = vec![0u8; w.rows / ROWS * geo.group_bytes(w.cols)];
    let (group_bytes, stored_bytes) = (geo.group_bytes(w.cols).max(1), (ROWS * blocks * geo.stored).max(1));
    let one_group = |(group, stored): (&mut [u8], &[u8])| {
        for (k, g) in group.chunks_exact_mut(geo.group).enumerate() {
            let rows: [&[u8]; ROWS] = std::array::from_fn(|r| &stored[(r * blocks + k) * geo.stored..][..geo.stored]);
            interleave_block(geo, rows, g);
        }
    };
    // Natively the groups are split across the kernels' pool: a model's weights are repacked when it opens.
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        let groups = out
            .par_chunks_exact_mut(group_bytes)
            .zip(w.data.par_chunks_exact(stored_bytes));
        super::matmul::install(|| groups.for_each(one_group));
    }
    #[cfg(target_arch = "wasm32")]
    out.chunks_exact_mut(group_bytes)
        .zip(w.data.chunks_exact(stored_bytes))
        .for_each(one_group);
    Ok((ty, out))
}

/// A group's block `g` from the eight rows' stored blocks `rows`.
fn interleave_block(geo: Geometry, rows: [&[u8]; ROWS], g: &mut [u8]) {
    // Each row's f16 `d`: first in a stored block, last in Q6_K's.
    let d = if geo.six { 208 } else { 0 };
    for (r, row) in rows.iter().enumerate() {
        g[2 * r..2 * r + 2].copy_from_slice(&row[d..d + 2]);
    }
    // Each row's 32 codes (their low four bits) of one block or sub-block, and their high bits.
    let mut low = [[0u8; 32]; ROWS];
    let mut high = [[0u8; 32]; ROWS];
    if !geo.k {
        // d at 0 (Q4_1, Q5_1: m at 2), then Q4_0's nibbles, or Q5_0's u32 whose bit e is element e's bit 4 and then
        // its nibbles.
        let scales = if geo.min { 4 } else { 2 };
        let at = scales + if geo.high { 4 } else { 0 };
        for (r, row) in rows.iter().enumerate() {
            if geo.min {
                g[16 + 2 * r..18 + 2 * r].copy_from_slice(&row[2..4]);
            }
            nibbles(&row[at..at + 16], &mut low[r]);
            if geo.high {
                let qh = u32::from_le_bytes(row[scales..scales + 4].try_into().unwrap());
                high[r] = std::array::from_fn(|e| (qh >> e) as u8 & 1);
            }
        }
        let codes = geo.codes(0);
        pack_codes(&mut g[codes..], &low);
        if geo.high {
            pack_high(&mut g[codes + CODE_BLOCK..], &high);
        }
        return;
    }
    if geo.six {
        // Stored Q6_K: codes (ql, qh) at 0, int8 scales at 192 (d at 208).
        for (r, row) in rows.iter().enumerate() {
            for s in 0..16 {
                g[Q6_SCALES + 8 * s + r] = row[192 + s];
            }
        }
        for j in 0..8 {
            // As `blocks::q6_code`: elements 32j.. are a nibble of 32 bytes of ql and two bits of 32 bytes of qh.
            let (h, quarter) = (j / 4, j % 4);
            let (ql, qh) = (64 * h + 32 * (quarter % 2), 128 + 32 * h);
            for (r, row) in rows.iter().enumerate() {
                let ql: &[u8; 32] = row[ql..ql + 32].try_into().unwrap();
                let qh: &[u8; 32] = row[qh..qh + 32].try_into().unwrap();
                low[r] = ql.map(|b| (b >> (4 * (quarter / 2))) & 15);
                high[r] = qh.map(|b| (b >> (2 * quarter)) & 3);
            }
            let sub = &mut g[geo.codes(j)..];
            pack_codes(sub, &low);
            pack_high2(&mut sub[CODE_BLOCK..], &high);
        }
        return;
    }
    let qs = if geo.high { 48 } else { 16 };
    for (r, row) in rows.iter().enumerate() {
        g[16 + 2 * r..18 + 2 * r].copy_from_slice(&row[2..4]);
        let (sc, mn) = blocks::k_scale_min(&row[4..16]);
        for j in 0..8 {
            g[K_SCALES + 8 * j + r] = sc[j];
            g[K_MINS + 8 * j + r] = mn[j];
        }
    }
    for j in 0..8 {
        // Sub-block j: nibble j % 2 of the 32 bytes at qs + 32·(j / 2); Q5_K's bit 4 is bit j of byte 16 + e.
        let at = qs + 32 * (j / 2);
        for (r, row) in rows.iter().enumerate() {
            let bytes: &[u8; 32] = row[at..at + 32].try_into().unwrap();
            low[r] = bytes.map(|b| (b >> (4 * (j % 2))) & 15);
            if geo.high {
                let bits: &[u8; 32] = row[16..48].try_into().unwrap();
                high[r] = bits.map(|b| (b >> j) & 1);
            }
        }
        let sub = &mut g[geo.codes(j)..];
        pack_codes(sub, &low);
        if geo.high {
            pack_high(&mut sub[CODE_BLOCK..], &high);
        }
    }
}

/// The 32 codes of a stored block's 16 bytes of nibbles into `codes`: byte `j` holds element `j` in its low nibble,
/// `j + 16` in its high.
fn nibbles(qs: &[u8], codes: &mut [u8; 32]) {
    for (j, &b) in qs.iter().enumerate().take(16) {
        codes[j] = b & 15;
        codes[j + 16] = b >> 4;
    }
}

/// Writes the high block of `bits` (bit 4 of each row's 32 codes) at the start of `out`.
fn pack_high(out: &mut [u8], bits: &[[u8; 32]; ROWS]) {
    for (r, bits) in bits.iter().enumerate() {
        for t in 0..2 {
            let mut word = 0u16;
            // Elements 8q..8q + 8, a byte each: pairs 4q..4q + 4's bits gathered by two shifts, as `pack_codes` does.
            for q in 0..4 {
                let v = u64::from_le_bytes(bits[8 * q..8 * q + 8].try_into().unwrap());
                let x = (v >> (8 * t)) & 0x0001_0001_0001_0001;
                let x = (x | x >> 15) & 0x0000_0003_0000_0003;
                word |= (((x | x >> 30) & 0xF) as u16) << (4 * q);
            }
            let at = 2 * (2 * r + t);
            out[at..at + 2].copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// Writes the high block of `bits` (bits 4 and 5 of each row's 32 codes, as 0..3) at the start of `out`: two
/// vectors of 32 bytes, in vector `v` bits `2i..2i + 2` of 16-bit lane `2r + t` those of element `2(8v + i) + t` of
/// row `r`.
fn pack_high2(out: &mut [u8], bits: &[[u8; 32]; ROWS]) {
    for (r, bits) in bits.iter().enumerate() {
        for (v, t) in (0..2).flat_map(|v| [(v, 0), (v, 1)]) {
            let mut word = 0u16;
            // Elements 16v + 8q.., a byte each: pairs 8v + 4q..'s two bits gathered by two shifts.
            for q in 0..2 {
                let at = 16 * v + 8 * q;
                let x = (u64::from_le_bytes(bits[at..at + 8].try_into().unwrap()) >> (8 * t)) & 0x0003_0003_0003_0003;
                let x = (x | x >> 14) & 0x0000_000F_0000_000F;
                word |= (((x | x >> 28) & 0xFF) as u16) << (8 * q);
            }
            let at = 32 * v + 2 * (2 * r + t);
            out[at..at + 2].copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// Writes the code block of `codes` (each row's 32 codes, their low four bits) at the start of `out`.
fn pack_codes(out: &mut [u8], codes: &[[u8; 32]; ROWS]) {
    for (r, codes) in codes.iter().enumerate() {
        for m in 0..4 {
            // Elements 8m..8m + 8, a byte each: the even ones' nibbles (t = 0), then the odd ones', gathered into a
            // 16-bit word by two shifts.
            let v = u64::from_le_bytes(codes[8 * m..8 * m + 8].try_into().unwrap());
            for t in 0..2 {
                let x = (v >> (8 * t)) & 0x000F_000F_000F_000F;
                let x = (x | x >> 12) & 0x0000_00FF_0000_00FF;
                let word = (x | x >> 24) as u16;
                let at = 32 * m + 2 * (2 * r + t);
                out[at..at + 2].copy_from_slice(&word.to_le_bytes());
            }
        }
    }
}

/// Row `r`'s code of element `e` in the code block at the start of `g`, with its high bits from the high block after
/// it for a 5- or 6-bit `geo`.
fn unpacked_code(g: &[u8], r: usize, e: usize, geo: Geometry) -> u8 {
    let (m, n, t, p) = (e / 8, e / 2 % 4, e % 2, e / 2);
    let word = |at: usize| u16::from_le_bytes([g[at], g[at + 1]]);
    let low = (word(32 * m + 2 * (2 * r + t)) >> (4 * n)) as u8 & 15;
    match (geo.high, geo.six) {
        (true, _) => low | ((word(CODE_BLOCK + 2 * (2 * r + t)) >> p) as u8 & 1) << 4,
        (_, true) => low | ((word(CODE_BLOCK + 32 * (p / 8) + 2 * (2 * r + t)) >> (2 * (p % 8))) as u8 & 3) << 4,
        _ => low,
    }
}

/// Whether a CPU engine should hold a matrix of `ty` with `rows` rows interleaved ([`interleave`]): the types
/// [`interleave`] takes, in whole groups, where decode runs the x86-64 kernels (AVX2, AVX-512; wasm has no interleaved
/// kernels yet).
pub fn interleave_pays(ty: GgmlType, rows: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    let simd = Level::current() != Level::Portable;
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    simd && interleaved_type(ty).is_some() && rows > 0 && rows.is_multiple_of(ROWS)
}

/// Row `r` of an interleaved matrix's bytes (`cols` columns) into `out`, bit-identical to the stored row's values
/// (`blocks::dequantize_block`'s arithmetic).
pub(super) fn dequantize_row(ty: GgmlType, data: &[u8], cols: usize, r: usize, out: &mut [f32]) {
    let geo = Geometry::of(ty);
    let group_bytes = geo.group_bytes(cols);
    let group = &data[r / ROWS * group_bytes..][..group_bytes];
    let r = r % ROWS;
    for (g, out) in group.chunks_exact(geo.group).zip(out.chunks_exact_mut(geo.len)) {
        let d = blocks::half(&g[2 * r..]);
        if !geo.k {
            let codes = &g[geo.codes(0)..];
            let code = |e: usize| f32::from(unpacked_code(codes, r, e, geo));
            if geo.min {
                // As `blocks::dequantize_block`: d·q + m.
                let m = blocks::half(&g[16 + 2 * r..]);
                out.iter_mut().enumerate().for_each(|(e, v)| *v = d * code(e) + m);
            } else {
                let centre = geo.centre as f32;
                out.iter_mut()
                    .enumerate()
                    .for_each(|(e, v)| *v = d * (code(e) - centre));
            }
            continue;
        }
        if geo.six {
            // As `blocks::dequantize_block`: d·scale·(q − 32).
            for (e, v) in out.iter_mut().enumerate() {
                let (j, l) = (e / 32, e % 32);
                let scale = f32::from(g[Q6_SCALES + 8 * (e / 16) + r] as i8);
                let q = i16::from(unpacked_code(&g[geo.codes(j)..], r, l, geo)) - 32;
                *v = d * scale * f32::from(q);
            }
            continue;
        }
        let dmin = blocks::half(&g[16 + 2 * r..]);
        for (j, out) in out.chunks_exact_mut(32).enumerate() {
            let scale = d * f32::from(g[K_SCALES + 8 * j + r]);
            let min = dmin * f32::from(g[K_MINS + 8 * j + r]);
            let codes = &g[geo.codes(j)..];
            for (e, v) in out.iter_mut().enumerate() {
                *v = scale * f32::from(unpacked_code(codes, r, e, geo)) - min;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::{rows_dot_16, unpack_tile};
#[cfg(target_arch = "x86_64")]
pub(super) use avx512::rows_dot_16 as rows_dot_16_vnni;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Geometry, CODE_BLOCK, HIGH_BLOCK, K_MINS, K_SCALES, Q6_SCALES, ROWS};
    use crate::quant::activations::Activations16;
    use crate::quant::matmul::{prefetch, PREFETCH_BYTES};
    use crate::quant::GgmlType;

    /// The dots of whole groups of interleaved rows (`out.len()` rows, a multiple of eight) with `x`. Per block of
    /// 32 columns, [`code_dot`] of each row's codes as stored (from 0) less `centre·Σa`: exact integers. Q4_0x8 and
    /// Q5_0x8: times the eight scales and the activations' scale in one multiply-add; Q4_1x8 and Q5_1x8 add the
    /// minima plus the centre times the scales, times `Σx`. Q4_Kx8 and Q5_Kx8: times the
    /// sub-block scales (still exact) and the activations' scale, with `Σx` times the scales and the minima beside;
    /// `d` and `dmin` once a super-block. Q6_Kx8: each half block (16 columns) less `32·Σa` times its int8 scale,
    /// then the activations' scale; `d` once a super-block.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `ty` is an interleaved type and `rows` holds `out.len()` of its rows of `x`'s columns.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
        let (geo, group_bytes) = checked(ty, rows, x, out.len());
        for (group, out) in rows.chunks_exact(group_bytes).zip(out.chunks_exact_mut(ROWS)) {
            let acc = group_dot(geo, group, x, &Avx2 { geo, x });
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
        }
    }

    /// `ty`'s geometry and the bytes of a group of `x`'s columns, checked against `rows` (`count` rows of `ty`).
    pub(super) fn checked(ty: GgmlType, rows: &[u8], x: &Activations16, count: usize) -> (Geometry, usize) {
        let geo = Geometry::of(ty);
        let cols = 32 * x.scale_sum.len();
        assert!(x.a.len() == cols && x.block_sum.len() == x.scale_sum.len() && count.is_multiple_of(ROWS));
        let group_bytes = geo.group_bytes(cols);
        assert!(rows.len() == count / ROWS * group_bytes && cols.is_multiple_of(geo.len));
        (geo, group_bytes)
    }

    /// Eight rows' `Σ q·a` over a block of activations, the codes as stored, from a code block (and the high block
    /// after it, for a 5- or 6-bit type): the sums over its first 16 columns and over its last 16.
    pub(super) trait CodeDot {
        /// Over block `k`, from the code block at `codes`.
        ///
        /// # Safety
        /// The CPU has the kernel's instructions; `codes` points at a code block (and its high block), `k` is a
        /// block of the activations.
        unsafe fn dot(&self, codes: *const u8, k: usize) -> [__m256i; 2];
    }

    pub(super) struct Avx2<'a> {
        pub(super) geo: Geometry,
        pub(super) x: &'a Activations16,
    }

    impl CodeDot for Avx2<'_> {
        #[inline(always)]
        unsafe fn dot(&self, codes: *const u8, k: usize) -> [__m256i; 2] {
            code_dot(codes, self.geo, self.x, k)
        }
    }

    /// One group of eight rows (`group`, its blocks of `geo`) dotted with `x`, the eight sums: per block of 32
    /// columns, `dot`'s integer sums less `centre·Σa`, scaled as [`rows_dot_16`] says.
    ///
    /// # Safety
    /// AVX2, FMA and F16C and `dot`'s instructions; `group` holds a group of `x`'s columns.
    #[inline(always)]
    pub(super) unsafe fn group_dot(geo: Geometry, group: &[u8], x: &Activations16, dot: &impl CodeDot) -> __m256 {
        // `q − centre` summed over a block of the activations.
        let centred = |[lo, hi]: [__m256i; 2], k: usize| {
            _mm256_sub_epi32(_mm256_add_epi32(lo, hi), _mm256_set1_epi32(geo.centre * x.block_sum[k]))
        };
        let mut acc = _mm256_setzero_ps();
        if geo.six {
            for s in 0..x.scale_sum.len() / 8 {
                let b = group.as_ptr().add(s * geo.group);
                prefetch(b.wrapping_add(PREFETCH_BYTES), geo.group);
                let mut dots = _mm256_setzero_ps();
                for j in 0..8 {
                    let k = 8 * s + j;
                    let [lo, hi] = dot.dot(b.add(geo.codes(j)), k);
                    let [a_lo, a_hi] = x.half_sum[k];
                    // Exact, |Σ(q − 32)·a| ≤ 16·32·32767 < 2²⁴ over a half, and so is its conversion.
                    let lo = _mm256_cvtepi32_ps(_mm256_sub_epi32(lo, _mm256_set1_epi32(32 * a_lo)));
                    let hi = _mm256_cvtepi32_ps(_mm256_sub_epi32(hi, _mm256_set1_epi32(32 * a_hi)));
                    let scale = |h: usize| {
                        let bytes = _mm_loadl_epi64(b.add(Q6_SCALES + 8 * (2 * j + h)).cast());
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))
                    };
                    let scaled = _mm256_fmadd_ps(lo, scale(0), _mm256_mul_ps(hi, scale(1)));
                    dots = _mm256_fmadd_ps(scaled, _mm256_set1_ps(x.scale_sum[k][0]), dots);
                }
                acc = _mm256_fmadd_ps(dots, _mm256_cvtph_ps(_mm_loadu_si128(b.cast())), acc);
            }
            return acc;
        }
        if !geo.k {
            for k in 0..x.scale_sum.len() {
                let b = group.as_ptr().add(k * geo.group);
                prefetch(b.wrapping_add(PREFETCH_BYTES), geo.group);
                let sums = centred(dot.dot(b.add(geo.codes(0)), k), k);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(b.cast()));
                let [xs, sx] = x.scale_sum[k];
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d, _mm256_set1_ps(xs)), acc);
                if geo.min {
                    // The centred codes' minimum, m + centre·d (the product exact), times Σx.
                    let m = _mm256_cvtph_ps(_mm_loadu_si128(b.add(16).cast()));
                    let min = _mm256_fmadd_ps(d, _mm256_set1_ps(geo.centre as f32), m);
                    acc = _mm256_fmadd_ps(min, _mm256_set1_ps(sx), acc);
                }
            }
            return acc;
        }
        for s in 0..x.scale_sum.len() / 8 {
            let b = group.as_ptr().add(s * geo.group);
            prefetch(b.wrapping_add(PREFETCH_BYTES), geo.group);
            // Σ sc·Σ(q − centre)·a·xs, Σ sc·Σx and Σ m·Σx over the sub-blocks.
            let (mut dots, mut scales, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            for j in 0..8 {
                let k = 8 * s + j;
                let sums = centred(dot.dot(b.add(geo.codes(j)), k), k);
                let bytes = |at: usize| _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(at + 8 * j).cast()));
                let (sc, mn) = (bytes(K_SCALES), bytes(K_MINS));
                let [xs, sx] = x.scale_sum[k];
                // |Σ(q − centre)·a| ≤ 32·16·32767 < 2²⁴ converts exactly, so the product of floats rounds once, as
                // the conversion of the exact integer product would (one multiply, not `vpmulld`'s two).
                let sc = _mm256_cvtepi32_ps(sc);
                let scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), sc);
                dots = _mm256_fmadd_ps(scaled, _mm256_set1_ps(xs), dots);
                scales = _mm256_fmadd_ps(sc, _mm256_set1_ps(sx), scales);
                mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(sx), mins);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(b.cast()));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(b.add(16).cast()));
            // d·(Σ sc·Σ(q − centre)·a·xs + centre·Σ sc·Σx) − dmin·Σ m·Σx.
            let centre = _mm256_fmadd_ps(scales, _mm256_set1_ps(geo.centre as f32), dots);
            acc = _mm256_fmadd_ps(centre, d, acc);
            acc = _mm256_fnmadd_ps(mins, dmin, acc);
        }
        acc
    }

    /// Eight rows' `Σ q·a` over block `k` of the activations, the codes as stored, from the code block at `codes`
    /// (and the high block after it, for a 5- or 6-bit `geo`): sixteen pairwise dots, each of one broadcast pair of
    /// activations with that pair of the eight rows; the first 16 columns' and the last 16's apart.
    #[inline(always)]
    unsafe fn code_dot(codes: *const u8, geo: Geometry, x: &Activations16, k: usize) -> [__m256i; 2] {
        let pairs = x.a.as_ptr().add(32 * k).cast::<i32>();
        let h = high_block(codes, geo);
        // Two chains of sums (vectors 0 and 1 hold the first 16 columns), so that each add waits on the one before last.
        let mut s = [_mm256_setzero_si256(); 2];
        for m in 0..4 {
            let q = nibbles(codes.add(32 * m), geo, h, m);
            for (n, q) in q.into_iter().enumerate() {
                let a = _mm256_set1_epi32(pairs.add(4 * m + n).read_unaligned());
                s[m / 2] = _mm256_add_epi32(s[m / 2], _mm256_madd_epi16(q, a));
            }
        }
        s
    }

    /// The high block after the code block at `codes`: one vector for a 5-bit `geo`, two for a 6-bit one.
    #[inline(always)]
    unsafe fn high_block(codes: *const u8, geo: Geometry) -> [__m256i; 2] {
        let load = |at: usize| _mm256_loadu_si256(codes.add(at).cast());
        match (geo.high, geo.six) {
            (true, _) => [load(CODE_BLOCK), _mm256_setzero_si256()],
            (_, true) => [load(CODE_BLOCK), load(CODE_BLOCK + HIGH_BLOCK)],
            _ => [_mm256_setzero_si256(); 2],
        }
    }

    /// [`crate::quant::prefill`]'s tile from whole groups of interleaved rows of `cols` columns: each row's codes
    /// less their centre in order ([`transpose_codes`]), each block's scale, and its minimum plus the centre times its
    /// scale (zero for Q4_0x8 and Q5_0x8), formed as the portable unpacking forms them.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `ty` is an interleaved type; `rows` holds whole groups of its rows of `cols` columns,
    /// `codes` their `[rows][cols]`, and `scale` and `min` their `[rows][cols / 32]` (`[rows][cols / 16]` for
    /// Q6_Kx8).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn unpack_tile(
        ty: GgmlType,
        rows: &[u8],
        cols: usize,
        codes: &mut [i16],
        scale: &mut [f32],
        min: &mut [f32],
    ) {
        let geo = Geometry::of(ty);
        // Scales a row: a block of 32 has one, or two for Q6_Kx8.
        let per = if geo.six { 2 } else { 1 };
        let blocks = per * cols / 32;
        let count = codes.len() / cols.max(1);
        let group_bytes = geo.group_bytes(cols);
        assert!(count.is_multiple_of(ROWS) && rows.len() == count / ROWS * group_bytes);
        assert!(codes.len() == count * cols && scale.len() == count * blocks && min.len() == scale.len());
        for (g, group) in rows.chunks_exact(group_bytes.max(1)).enumerate() {
            let codes = &mut codes[ROWS * g * cols..];
            let (scale, min) = (&mut scale[ROWS * g * blocks..], &mut min[ROWS * g * blocks..]);
            for (i, b) in group.chunks_exact(geo.group).enumerate() {
                // The eight `d` (and `dmin`) at once: `vcvtph2ps` is exact, as `blocks::half` is.
                let (mut d, mut dmin) = ([0f32; ROWS], [0f32; ROWS]);
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().cast())));
                if geo.six {
                    for j in 0..8 {
                        transpose_codes(b.as_ptr().add(geo.codes(j)), geo, codes, cols, 256 * i + 32 * j);
                    }
                    // As `blocks::block_codes` forms a group: d·scale, no minimum.
                    for (sub, scales) in b[Q6_SCALES..Q6_SCALES + 128].chunks_exact(ROWS).enumerate() {
                        for r in 0..ROWS {
                            scale[r * blocks + 16 * i + sub] = d[r] * f32::from(scales[r] as i8);
                            min[r * blocks + 16 * i + sub] = 0.0;
                        }
                    }
                    continue;
                }
                // The eight `dmin` (Q4_1x8, Q5_1x8: `m`) after the eight `d`.
                if geo.k || geo.min {
                    _mm256_storeu_ps(
                        dmin.as_mut_ptr(),
                        _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(16).cast())),
                    );
                }
                if !geo.k {
                    transpose_codes(b.as_ptr().add(geo.codes(0)), geo, codes, cols, 32 * i);
                    for r in 0..ROWS {
                        scale[r * blocks + i] = d[r];
                        // As the portable unpacking: the minimum plus the centre times the scale.
                        min[r * blocks + i] = match geo.min {
                            true => dmin[r] + d[r] * geo.centre as f32,
                            false => 0.0,
                        };
                    }
                    continue;
                }
                for j in 0..8 {
                    let k = 8 * i + j;
                    transpose_codes(b.as_ptr().add(geo.codes(j)), geo, codes, cols, 32 * k);
                    for r in 0..ROWS {
                        let sc = d[r] * f32::from(b[K_SCALES + 8 * j + r]);
                        scale[r * blocks + k] = sc;
                        min[r * blocks + k] = -(dmin[r] * f32::from(b[K_MINS + 8 * j + r])) + sc * geo.centre as f32;
                    }
                }
            }
        }
    }

    /// The code block at `p` (with its high block, for a 5- or 6-bit `geo`) as eight rows of 32 codes less the centre, at
    /// `codes[r·cols + at..]`: the sixteen vectors of one pair of codes of eight rows (a 32-bit lane a row)
    /// transposed into eight rows of sixteen pairs.
    #[inline(always)]
    unsafe fn transpose_codes(p: *const u8, geo: Geometry, codes: &mut [i16], cols: usize, at: usize) {
        let centre = _mm256_set1_epi16(geo.centre as i16);
        let h = high_block(p, geo);
        // (Loops, not closures: a closure does not inherit the target features, and its intrinsics become calls.)
        let mut pairs = [_mm256_setzero_ps(); 16];
        for m in 0..4 {
            let q = nibbles(p.add(32 * m), geo, h, m);
            for n in 0..4 {
                pairs[4 * m + n] = _mm256_castsi256_ps(_mm256_sub_epi16(q[n], centre));
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

    /// Vector `m` of the code block at `p` as four vectors of codes, nibble `n` of each 16-bit lane in vector `n`,
    /// with bit 4 from the high block `h` for a 5-bit `geo` (pair `p = 4m + n` is bit `p` of its lane), bits 4 and 5
    /// for a 6-bit one (bits `2i..` of vector `p / 8`, `i = p % 8`).
    #[inline(always)]
    unsafe fn nibbles(p: *const u8, geo: Geometry, h: [__m256i; 2], m: usize) -> [__m256i; 4] {
        let low = _mm256_set1_epi16(15);
        let v = _mm256_loadu_si256(p.cast());
        let mut q = [
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
            _mm256_and_si256(_mm256_srli_epi16::<8>(v), low),
            _mm256_srli_epi16::<12>(v),
        ];
        if geo.high || geo.six {
            let (v, mask) = match geo.six {
                true => (h[m / 2], _mm256_set1_epi16(0x30)),
                false => (h[0], _mm256_set1_epi16(16)),
            };
            for (n, q) in q.iter_mut().enumerate() {
                // Bit 4m + n (bits 2i, 2i + 1) of each lane to bit 4 (bits 4 and 5).
                let at = match geo.six {
                    true => 2 * (4 * (m % 2) + n) as i32 - 4,
                    false => (4 * m + n) as i32 - 4,
                };
                let bits = match at < 0 {
                    true => _mm256_sll_epi16(v, _mm_cvtsi32_si128(-at)),
                    false => _mm256_srl_epi16(v, _mm_cvtsi32_si128(at)),
                };
                *q = _mm256_or_si256(*q, _mm256_and_si256(bits, mask));
            }
        }
        q
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::{checked, group_dot, Avx2};
    use super::{Geometry, CODE_BLOCK, HIGH_BLOCK, K_MINS, K_SCALES, Q6_SCALES, ROWS};
    use crate::quant::activations::Activations16;
    use crate::quant::matmul::{prefetch, PREFETCH_BYTES};
    use crate::quant::GgmlType;

    /// [`super::avx2::rows_dot_16`] with 512-bit vectors and VNNI, two groups at a time: a vector holds the same
    /// 32 bytes of each group's code block, one half each, so that one broadcast pair of activations and one
    /// `vpdpwssd` serve sixteen rows, and the scaling after each block does too. A last odd group: the AVX2 kernel.
    ///
    /// # Safety
    /// AVX-512 F, BW and VNNI, AVX2, FMA and F16C; `ty` is an interleaved type and `rows` holds `out.len()` of its
    /// rows of `x`'s columns.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(in crate::quant) unsafe fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
        let (geo, group_bytes) = checked(ty, rows, x, out.len());
        let pairs = rows.chunks_exact(2 * group_bytes);
        let last = pairs.remainder();
        let out_pairs = out.chunks_exact_mut(2 * ROWS);
        for (two, out) in pairs.zip(out_pairs) {
            let acc = pair_dot(geo, two.as_ptr(), two.as_ptr().add(group_bytes), x);
            _mm512_storeu_ps(out.as_mut_ptr(), acc);
        }
        if !last.is_empty() {
            let acc = group_dot(geo, last, x, &Avx2 { geo, x });
            let tail = out.len() - ROWS;
            _mm256_storeu_ps(out[tail..].as_mut_ptr(), acc);
        }
    }

    /// The sixteen sums of the groups at `g0` and `g1`: [`super::avx2::group_dot`]'s arithmetic, `g0`'s rows in the
    /// low half.
    #[inline(always)]
    unsafe fn pair_dot(geo: Geometry, g0: *const u8, g1: *const u8, x: &Activations16) -> __m512 {
        let centred = |[lo, hi]: [__m512i; 2], k: usize| {
            _mm512_sub_epi32(_mm512_add_epi32(lo, hi), _mm512_set1_epi32(geo.centre * x.block_sum[k]))
        };
        // The two groups' eight f16 at `at` as float32.
        let halves = |at: usize| {
            let h = _mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_loadu_si128(g0.add(at).cast())),
                _mm_loadu_si128(g1.add(at).cast()),
            );
            _mm512_cvtph_ps(h)
        };
        // The two groups' eight bytes at `at` (int8 scales where `signed`) as 32-bit integers.
        let bytes = |at: usize, signed: bool| {
            let both = _mm_unpacklo_epi64(_mm_loadl_epi64(g0.add(at).cast()), _mm_loadl_epi64(g1.add(at).cast()));
            match signed {
                true => _mm512_cvtepi8_epi32(both),
                false => _mm512_cvtepu8_epi32(both),
            }
        };
        let mut acc = _mm512_setzero_ps();
        if geo.six {
            for s in 0..x.scale_sum.len() / 8 {
                let at = s * geo.group;
                prefetch(g0.wrapping_add(at + PREFETCH_BYTES), geo.group);
                prefetch(g1.wrapping_add(at + PREFETCH_BYTES), geo.group);
                let mut dots = _mm512_setzero_ps();
                for j in 0..8 {
                    let k = 8 * s + j;
                    let codes = at + geo.codes(j);
                    let [lo, hi] = code_dot(g0.add(codes), g1.add(codes), geo, x, k);
                    let [a_lo, a_hi] = x.half_sum[k];
                    let lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, _mm512_set1_epi32(32 * a_lo)));
                    let hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, _mm512_set1_epi32(32 * a_hi)));
                    let scale = |h: usize| _mm512_cvtepi32_ps(bytes(at + Q6_SCALES + 8 * (2 * j + h), true));
                    let scaled = _mm512_fmadd_ps(lo, scale(0), _mm512_mul_ps(hi, scale(1)));
                    dots = _mm512_fmadd_ps(scaled, _mm512_set1_ps(x.scale_sum[k][0]), dots);
                }
                acc = _mm512_fmadd_ps(dots, halves(at), acc);
            }
            return acc;
        }
        if !geo.k {
            for k in 0..x.scale_sum.len() {
                let at = k * geo.group;
                prefetch(g0.wrapping_add(at + PREFETCH_BYTES), geo.group);
                prefetch(g1.wrapping_add(at + PREFETCH_BYTES), geo.group);
                let codes = at + geo.codes(0);
                let sums = centred(code_dot(g0.add(codes), g1.add(codes), geo, x, k), k);
                let d = halves(at);
                let [xs, sx] = x.scale_sum[k];
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, _mm512_set1_ps(xs)), acc);
                if geo.min {
                    let min = _mm512_fmadd_ps(d, _mm512_set1_ps(geo.centre as f32), halves(at + 16));
                    acc = _mm512_fmadd_ps(min, _mm512_set1_ps(sx), acc);
                }
            }
            return acc;
        }
        for s in 0..x.scale_sum.len() / 8 {
            let at = s * geo.group;
            prefetch(g0.wrapping_add(at + PREFETCH_BYTES), geo.group);
            prefetch(g1.wrapping_add(at + PREFETCH_BYTES), geo.group);
            let (mut dots, mut scales, mut mins) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
            for j in 0..8 {
                let k = 8 * s + j;
                let codes = at + geo.codes(j);
                let sums = centred(code_dot(g0.add(codes), g1.add(codes), geo, x, k), k);
                let (sc, mn) = (bytes(at + K_SCALES + 8 * j, false), bytes(at + K_MINS + 8 * j, false));
                let [xs, sx] = x.scale_sum[k];
                let sc = _mm512_cvtepi32_ps(sc);
                let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(sums), sc);
                dots = _mm512_fmadd_ps(scaled, _mm512_set1_ps(xs), dots);
                scales = _mm512_fmadd_ps(sc, _mm512_set1_ps(sx), scales);
                mins = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mn), _mm512_set1_ps(sx), mins);
            }
            let centre = _mm512_fmadd_ps(scales, _mm512_set1_ps(geo.centre as f32), dots);
            acc = _mm512_fmadd_ps(centre, halves(at), acc);
            acc = _mm512_fnmadd_ps(mins, halves(at + 16), acc);
        }
        acc
    }

    /// Sixteen rows' `Σ q·a` over block `k`: the code blocks at `c0` and `c1` (and their high blocks, for a 5- or
    /// 6-bit `geo`), a vector of each one's 32 bytes at a time; the first 16 columns' and the last 16's apart.
    #[inline(always)]
    unsafe fn code_dot(c0: *const u8, c1: *const u8, geo: Geometry, x: &Activations16, k: usize) -> [__m512i; 2] {
        let both = |at: usize| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(c0.add(at).cast())),
                _mm256_loadu_si256(c1.add(at).cast()),
            )
        };
        let pairs = x.a.as_ptr().add(32 * k).cast::<i32>();
        let h = match (geo.high, geo.six) {
            (true, _) => [both(CODE_BLOCK), _mm512_setzero_si512()],
            (_, true) => [both(CODE_BLOCK), both(CODE_BLOCK + HIGH_BLOCK)],
            _ => [_mm512_setzero_si512(); 2],
        };
        let (low, sixteen, bits45) = (_mm512_set1_epi16(15), _mm512_set1_epi16(16), _mm512_set1_epi16(0x30));
        let mut s = [_mm512_setzero_si512(); 2];
        for m in 0..4 {
            let v = both(32 * m);
            let mut q = [
                _mm512_and_si512(v, low),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
                _mm512_and_si512(_mm512_srli_epi16::<8>(v), low),
                _mm512_srli_epi16::<12>(v),
            ];
            if geo.high {
                for (n, q) in q.iter_mut().enumerate() {
                    // Pair 4m + n's bit 4 is bit 4m + n of the lane; bit 4 of the code is clear, so adding 16 sets it.
                    let set = _mm512_test_epi16_mask(h[0], _mm512_set1_epi16(1 << (4 * m + n)));
                    *q = _mm512_mask_add_epi16(*q, set, *q, sixteen);
                }
            }
            if geo.six {
                for (n, q) in q.iter_mut().enumerate() {
                    // Pair 4m + n's bits 4 and 5 are bits 2i, 2i + 1 of vector m / 2 (i = 4(m % 2) + n): to 4 and 5,
                    // or'ed in as `q | (bits & 0x30)` by one ternary-logic operation.
                    let at = 2 * (4 * (m % 2) + n) as i32 - 4;
                    let bits = match at < 0 {
                        true => _mm512_sll_epi16(h[m / 2], _mm_cvtsi32_si128(-at)),
                        false => _mm512_srl_epi16(h[m / 2], _mm_cvtsi32_si128(at)),
                    };
                    *q = _mm512_ternarylogic_epi32::<0xF8>(*q, bits, bits45);
                }
            }
            for (n, q) in q.into_iter().enumerate() {
                let a = _mm512_set1_epi32(pairs.add(4 * m + n).read_unaligned());
                s[m / 2] = _mm512_dpwssd_epi32(s[m / 2], q, a);
            }
        }
        s
    }
}

//! AVX-512 prefill with VNNI: `y = X·Wᵀ` for several tokens as exact integer dots of 16-bit weight codes with
//! the tokens' activations rounded to 16 bits per block of 32 (as `Activations16` rounds them for decode).
//!
//! Sixteen tokens share a vector: the tokens are interleaved once per matmul ([`Tokens16`]), a pair of columns of
//! sixteen tokens to a vector, so that one `vpdpwssd` multiplies a row's pair of codes (broadcast) with that pair
//! of every token, and no row is ever transposed or summed across lanes. A tile of rows is unpacked once into
//! codes and per-group scales (and minima) and serves every token. After each group (32 columns; 16 for Q6_K,
//! whose scaled codes could overflow 32 bits over 32) the integer sums go to float32, times the row's and the
//! tokens' scales, plus the row's minimum times the tokens' sums.

use std::arch::x86_64::*;

use super::matmul::par_each;
use super::matmul::Level;
use super::prefill::{float_tiles, group_len, has_min, Output, Tile, TokensF32, TILE_ROWS};
use super::simd_avx512::{Block, LoomQ4_0, SuperBlock, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0};
use super::GgmlType;

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    super::simd_avx512::available() && is_x86_feature_detected!("avx512vnni")
}

/// Tokens interleaved by sixteen, their activations rounded as `Activations16` rounds one token.
pub(super) struct Tokens16 {
    n: usize,
    cols: usize,
    /// Per group of 16 tokens (the last padded with zeros), per pair of columns, the 16 tokens' two values.
    a: Vec<i16>,
    /// Per group of 16 tokens, per block of 32 columns, the 16 tokens' scales.
    scale: Vec<f32>,
    /// The same for the blocks' exact float32 sums, where a type has minima.
    sum: Vec<f32>,
}

impl Tokens16 {
    /// `x`: `n` tokens of `cols` values, each block of 32 rounded as `Activations16::new` rounds it. `None`
    /// where that refuses a token (not whole blocks, or a value that is not finite: the float32 path keeps those
    /// as they are).
    ///
    /// # Safety
    /// [`available`] is true.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn new(x: &[f32], n: usize, cols: usize) -> Option<Tokens16> {
        if !cols.is_multiple_of(32) || x.len() != n * cols {
            return None;
        }
        let groups = n.div_ceil(16);
        let blocks = cols / 32;
        let mut out = Tokens16 {
            n,
            cols,
            a: vec![0; groups * 16 * cols],
            scale: vec![0.0; groups * 16 * blocks],
            sum: vec![0.0; groups * 16 * blocks],
        };
        // Each group of 16 tokens writes its own share of `a`, `scale` and `sum`, so the groups are split over the
        // pool (on one thread this was 3% of a prefill's time).
        let finite = {
            let mut groups: Vec<_> = x
                .chunks(16 * cols)
                .zip(out.a.chunks_exact_mut(16 * cols))
                .zip(
                    out.scale
                        .chunks_exact_mut(16 * blocks)
                        .zip(out.sum.chunks_exact_mut(16 * blocks)),
                )
                .map(|((x, a), (scale, sum))| (x, a, scale, sum, false))
                .collect();
            par_each(&mut groups, |(x, a, scale, sum, finite)| {
                // SAFETY: the caller checked the CPU ([`available`]).
                *finite = unsafe { round_group(x, cols, a, scale, sum) };
            });
            groups.iter().all(|g| g.4)
        };
        finite.then_some(out)
    }
}

/// Rounds the tokens `x` (up to 16 of `cols` values) into their group's share of [`Tokens16`]: `a` (16·cols codes),
/// `scale` and `sum` (16 per block). False where a value is not finite.
///
/// # Safety
/// [`available`] is true.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn round_group(x: &[f32], cols: usize, a: &mut [i16], scale: &mut [f32], sum: &mut [f32]) -> bool {
    assert!(x.len() <= 16 * cols && a.len() == 16 * cols && scale.len() == cols / 2 && sum.len() == cols / 2);
    let zero = _mm512_setzero_ps();
    for (lane, x) in x.chunks_exact(cols).enumerate() {
        // Pair `p` of the token goes to 32-bit word `p·16 + lane` of the group.
        let a = a.as_mut_ptr().cast::<i32>().add(lane);
        for (k, block) in x.chunks_exact(32).enumerate() {
            let (lo, hi) = (_mm512_loadu_ps(block.as_ptr()), _mm512_loadu_ps(block.as_ptr().add(16)));
            // `v − v` is 0 exactly where `v` is finite.
            let finite = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_sub_ps(lo, lo), zero)
                & _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_sub_ps(hi, hi), zero);
            if finite != 0xFFFF {
                return false;
            }
            let max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
            let inv = _mm512_set1_ps(if max > 0.0 { 32767.0 / max } else { 0.0 });
            // Rounded to nearest, ties to even (the default rounding mode), as `Activations16` rounds.
            let codes = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(lo, inv)))),
                _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(hi, inv))),
            );
            let mut pairs = [0i32; 16];
            _mm512_storeu_si512(pairs.as_mut_ptr().cast(), codes);
            for (p, pair) in pairs.into_iter().enumerate() {
                // SAFETY: word (16k + p)·16 + lane < 16 · cols / 2, the group's words.
                *a.add((16 * k + p) * 16) = pair;
            }
            scale[16 * k + lane] = max / 32767.0;
            sum[16 * k + lane] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
        }
    }
    true
}

/// Unpacks `rows` (whole stored rows of `ty`, at most [`TILE_ROWS`]) into `tile` with AVX-512.
///
/// # Safety
/// [`available`] is true, and `ty` is one of [`super::activations::has_16bit_dot`]'s types.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack(tile: &mut Tile, ty: GgmlType, rows: &[u8], row_bytes: usize) {
    if tile.unpack_interleaved(ty, rows, row_bytes) {
        return;
    }
    let groups = tile.cols / tile.group;
    for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
        let codes = &mut tile.codes[r * tile.cols..(r + 1) * tile.cols];
        let scale = &mut tile.scale[r * groups..(r + 1) * groups];
        let min = &mut tile.min[r * groups..(r + 1) * groups];
        match ty {
            GgmlType::Q4_0 => blocks::<Q4_0>(row, codes, scale, min),
            GgmlType::Q4_1 => blocks::<Q4_1>(row, codes, scale, min),
            GgmlType::Q5_0 => blocks::<Q5_0>(row, codes, scale, min),
            GgmlType::Q5_1 => blocks::<Q5_1>(row, codes, scale, min),
            GgmlType::Q8_0 => blocks::<Q8_0>(row, codes, scale, min),
            GgmlType::LoomQ4_0 => blocks::<LoomQ4_0>(row, codes, scale, min),
            GgmlType::Q4_K => supers::<Q4K>(row, codes, scale, min),
            GgmlType::Q5_K => supers::<Q5K>(row, codes, scale, min),
            GgmlType::Q6_K => supers::<Q6K>(row, codes, scale, min),
            _ => unreachable!("prefill of {ty}: check has_16bit_dot first"),
        }
    }
}

/// One row of 32-element blocks: codes, scale `d` and minimum ([`Block`]: Q4_1 and Q5_1 centred, the minimum
/// taking the centre, so that the integer sums and `min·Σx` do not cancel).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn blocks<B: Block>(row: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    for (k, b) in row.chunks_exact(B::BYTES).enumerate() {
        let b = b.as_ptr();
        _mm512_storeu_si512(codes.as_mut_ptr().add(32 * k).cast(), B::codes(b));
        let mut dm = [0f32; 4];
        _mm_storeu_ps(dm.as_mut_ptr(), B::scale_min(b));
        scale[k] = dm[0];
        min[k] = match B::HAS_MIN {
            true => dm[1],
            false => 0.0,
        };
    }
}

/// One row of K-quant super-blocks: each sub-block's codes, scale and minimum ([`SuperBlock`]); Q6_K's groups of
/// 16 both take its sub-block's scale.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn supers<K: SuperBlock>(row: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let per_sub = scale.len() / (codes.len() / 32);
    for (s, b) in row.chunks_exact(K::BYTES).enumerate() {
        let b = b.as_ptr();
        for (j, q) in K::codes(b).into_iter().enumerate() {
            _mm512_storeu_si512(codes.as_mut_ptr().add(256 * s + 32 * j).cast(), q);
        }
        let (sc, mn) = K::scales(b);
        let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
        _mm256_storeu_ps(scales.as_mut_ptr(), sc);
        if let Some(mn) = mn {
            _mm256_storeu_ps(mins.as_mut_ptr(), mn);
        }
        for j in 0..8 {
            for h in 0..per_sub {
                scale[(8 * s + j) * per_sub + h] = scales[j];
                min[(8 * s + j) * per_sub + h] = mins[j];
            }
        }
    }
}

/// `y[t][first + r] = Σ_c W[first + r][c]·x[t][c]` for the stored rows `rows` of `ty`.
///
/// # Safety
/// [`available`] is true, `ty` is one of [`super::activations::has_16bit_dot`]'s types, `rows` holds whole rows of
/// `x.cols` columns, `y` has `x.n` tokens of at least `first + rows` rows, and no other task writes these rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows(ty: GgmlType, rows: &[u8], first: usize, x: &Tokens16, y: Output) {
    let row_bytes = ty.block_bytes() * x.cols / ty.block_len();
    assert!(row_bytes > 0 && rows.len().is_multiple_of(row_bytes) && first + rows.len() / row_bytes <= y.rows);
    let mut tile = Tile::new(ty, x.cols);
    for (i, rows) in rows.chunks(TILE_ROWS * row_bytes).enumerate() {
        unpack(&mut tile, ty, rows, row_bytes);
        let (first, count) = (first + i * TILE_ROWS, rows.len() / row_bytes);
        match (group_len(ty), has_min(ty)) {
            (32, false) => tile_rows::<32, false>(&tile, count, x, first, y),
            (32, true) => tile_rows::<32, true>(&tile, count, x, first, y),
            (16, false) => tile_rows::<16, false>(&tile, count, x, first, y),
            _ => unreachable!("a minimum per block of 32 serves groups of 32"),
        }
    }
}

/// Every token against the tile's `count` rows, matrix rows `first..`: four rows and 32 tokens at a time, then
/// the rest.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_rows<const G: usize, const MIN: bool>(tile: &Tile, count: usize, x: &Tokens16, first: usize, y: Output) {
    let groups = x.n.div_ceil(16);
    let mut g = 0;
    while g < groups {
        let mut r = 0;
        while r < count {
            let take = if count - r >= 4 { 4 } else { 1 };
            match (take, groups - g >= 2) {
                (4, true) => kernel::<4, 2, G, MIN>(tile, r, x, g, first, y),
                (4, false) => kernel::<4, 1, G, MIN>(tile, r, x, g, first, y),
                (_, true) => kernel::<1, 2, G, MIN>(tile, r, x, g, first, y),
                (_, false) => kernel::<1, 1, G, MIN>(tile, r, x, g, first, y),
            }
            r += take;
        }
        g += if groups - g >= 2 { 2 } else { 1 };
    }
}

/// Rows `r..r + RB` of the tile (matrix rows `first + r..`) against the token groups `g..g + TB`, into `y`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
// `t` picks a token group in every row's accumulators (`acc[k][t]`).
#[allow(clippy::needless_range_loop)]
unsafe fn kernel<const RB: usize, const TB: usize, const G: usize, const MIN: bool>(
    tile: &Tile,
    r: usize,
    x: &Tokens16,
    g: usize,
    first: usize,
    y: Output,
) {
    let cols = x.cols;
    let (blocks, groups) = (cols / 32, cols / G);
    // A row's codes as pairs (one 32-bit broadcast each), its scales and minima.
    let codes: [*const i32; RB] = std::array::from_fn(|k| tile.codes.as_ptr().add((r + k) * cols).cast());
    let scale: [*const f32; RB] = std::array::from_fn(|k| tile.scale.as_ptr().add((r + k) * groups));
    let min: [*const f32; RB] = std::array::from_fn(|k| tile.min.as_ptr().add((r + k) * groups));
    let xa: [*const __m512i; TB] = std::array::from_fn(|t| x.a.as_ptr().add((g + t) * 16 * cols).cast());
    let mut acc = [[_mm512_setzero_ps(); TB]; RB];
    for group in 0..groups {
        let mut dots = [[_mm512_setzero_si512(); TB]; RB];
        for p in group * G / 2..(group + 1) * G / 2 {
            let xv: [__m512i; TB] = std::array::from_fn(|t| _mm512_loadu_si512(xa[t].add(p).cast()));
            for k in 0..RB {
                let w = _mm512_set1_epi32(codes[k].add(p).read_unaligned());
                for t in 0..TB {
                    dots[k][t] = _mm512_dpwssd_epi32(dots[k][t], xv[t], w);
                }
            }
        }
        let block = group * G / 32;
        for t in 0..TB {
            let at = ((g + t) * blocks + block) * 16;
            let xs = _mm512_loadu_ps(x.scale.as_ptr().add(at));
            for k in 0..RB {
                let s = _mm512_mul_ps(xs, _mm512_set1_ps(*scale[k].add(group)));
                acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[k][t]), s, acc[k][t]);
                if MIN {
                    let sum = _mm512_loadu_ps(x.sum.as_ptr().add(at));
                    acc[k][t] = _mm512_fmadd_ps(sum, _mm512_set1_ps(*min[k].add(group)), acc[k][t]);
                }
            }
        }
    }
    store(acc, x.n, g, first + r, y);
}

/// The kernels' results: `acc[k][t]` (lane `j`: token `16(g + t) + j`) into row `row + k` of `y`, for the first `n`
/// tokens.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
// `t` picks a token group in every row's accumulators (`acc[k][t]`).
#[allow(clippy::needless_range_loop)]
unsafe fn store<const RB: usize, const TB: usize>(acc: [[__m512; TB]; RB], n: usize, g: usize, row: usize, y: Output) {
    for t in 0..TB {
        let tokens = (n - (g + t) * 16).min(16);
        // Token `j`'s row `row` of `y`.
        let out = y.y.add((g + t) * 16 * y.rows + row);
        let mut k = 0;
        while k + 4 <= RB {
            store4(
                [acc[k][t], acc[k + 1][t], acc[k + 2][t], acc[k + 3][t]],
                tokens,
                out.add(k),
                y.rows,
            );
            k += 4;
        }
        while k < RB {
            let mut lanes = [0f32; 16];
            _mm512_storeu_ps(lanes.as_mut_ptr(), acc[k][t]);
            for (j, v) in lanes.into_iter().take(tokens).enumerate() {
                *out.add(j * y.rows + k) = v;
            }
            k += 1;
        }
    }
}

/// Four rows' values for sixteen tokens (lane `j`: token `j`) as each token's four neighbours at
/// `out + j·stride`, for the first `tokens` tokens.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn store4(rows: [__m512; 4], tokens: usize, out: *mut f32, stride: usize) {
    // Within each 128-bit lane: tokens 4c..4c + 4 of the four rows, transposed 4 × 4.
    let lo01 = _mm512_unpacklo_ps(rows[0], rows[1]);
    let hi01 = _mm512_unpackhi_ps(rows[0], rows[1]);
    let lo23 = _mm512_unpacklo_ps(rows[2], rows[3]);
    let hi23 = _mm512_unpackhi_ps(rows[2], rows[3]);
    // Quad `j % 4` of lane `c` is token `4c + j`.
    let quads = [
        _mm512_shuffle_ps::<0x44>(lo01, lo23),
        _mm512_shuffle_ps::<0xEE>(lo01, lo23),
        _mm512_shuffle_ps::<0x44>(hi01, hi23),
        _mm512_shuffle_ps::<0xEE>(hi01, hi23),
    ];
    let lane = |v: __m512, c: usize| match c {
        0 => _mm512_extractf32x4_ps::<0>(v),
        1 => _mm512_extractf32x4_ps::<1>(v),
        2 => _mm512_extractf32x4_ps::<2>(v),
        _ => _mm512_extractf32x4_ps::<3>(v),
    };
    for c in 0..4 {
        for (j, &quad) in quads.iter().enumerate() {
            let token = 4 * c + j;
            if token < tokens {
                _mm_storeu_ps(out.add(token * stride), lane(quad, c));
            }
        }
    }
}

/// [`super::simd_x86_prefill::rows_f32`] with this file's kernel: sixteen tokens to a vector, up to 8 rows by 3
/// groups a call.
///
/// # Safety
/// As [`rows`], with `ty` F32, F16 or BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_f32(ty: GgmlType, rows: &[u8], first: usize, x: &TokensF32<16>, y: Output) {
    float_tiles(
        Level::Avx512,
        ty,
        rows,
        first,
        x,
        y,
        (8, 3),
        |tile, take, step, r, g, first| {
            // SAFETY: this function's CPU; `float_tiles` passes rows of the tile and groups of `x`.
            unsafe {
                match (take, step) {
                    (8, 3) => kernel_f32::<8, 3>(tile, r, x, g, first, y),
                    (8, 2) => kernel_f32::<8, 2>(tile, r, x, g, first, y),
                    (8, _) => kernel_f32::<8, 1>(tile, r, x, g, first, y),
                    (4, 3) => kernel_f32::<4, 3>(tile, r, x, g, first, y),
                    (4, 2) => kernel_f32::<4, 2>(tile, r, x, g, first, y),
                    (4, _) => kernel_f32::<4, 1>(tile, r, x, g, first, y),
                    (_, 3) => kernel_f32::<1, 3>(tile, r, x, g, first, y),
                    (_, 2) => kernel_f32::<1, 2>(tile, r, x, g, first, y),
                    _ => kernel_f32::<1, 1>(tile, r, x, g, first, y),
                }
            }
        },
    );
}

/// Rows `r..r + RB` of the float32 tile (matrix rows `first + r..`) against the token groups `g..g + TB`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
// `t` picks a token group in every row's accumulators (`acc[k][t]`).
#[allow(clippy::needless_range_loop)]
unsafe fn kernel_f32<const RB: usize, const TB: usize>(
    tile: &[f32],
    r: usize,
    x: &TokensF32<16>,
    g: usize,
    first: usize,
    y: Output,
) {
    let cols = x.cols;
    let w: [*const f32; RB] = std::array::from_fn(|k| tile.as_ptr().add((r + k) * cols));
    let xs: [*const f32; TB] = std::array::from_fn(|t| x.x.as_ptr().add((g + t) * 16 * cols));
    let mut acc = [[_mm512_setzero_ps(); TB]; RB];
    for c in 0..cols {
        let xv: [__m512; TB] = std::array::from_fn(|t| _mm512_loadu_ps(xs[t].add(16 * c)));
        for k in 0..RB {
            let wv = _mm512_set1_ps(*w[k].add(c));
            for t in 0..TB {
                acc[k][t] = _mm512_fmadd_ps(wv, xv[t], acc[k][t]);
            }
        }
    }
    store(acc, x.n, g, first + r, y);
}

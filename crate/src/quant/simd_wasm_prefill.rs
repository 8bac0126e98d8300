//! WebAssembly simd128 prefill: the scheme of the AVX-512 prefill (`simd_avx512_prefill`), four tokens to a
//! vector. The tokens' activations are rounded to 16 bits per block of 32 (as decode rounds them) and interleaved
//! once per matmul, a pair of columns of four tokens to a vector, so that one `i32x4.dot_i16x8_s` multiplies a
//! row's pair of codes (splat) with that pair of each token: exact integer dots, no lanes summed across. A tile of
//! rows is unpacked once (the stored codes, centred, with each group's scale and minimum) and serves every token;
//! after each group the integer sums go to float32 times the row's and the tokens' scales.

use core::arch::wasm32::*;

use super::activations::{Activations16, LANE};
use super::blocks::{self, CodeGroup};
use super::GgmlType;

/// Tokens interleaved by four, their activations rounded as [`Activations16`] rounds one token.
pub(super) struct Tokens4 {
    n: usize,
    cols: usize,
    /// Per group of 4 tokens (padded with zeros to whole pairs of groups), per pair of columns, the 4 tokens' two
    /// values.
    a: Vec<i16>,
    /// Per group of 4 tokens, per block of 32 columns, the 4 tokens' scales.
    scale: Vec<f32>,
    /// The same for the blocks' exact float32 sums, where a type has minima.
    sum: Vec<f32>,
}

impl Tokens4 {
    /// `x`: `n` tokens of `cols` values. `None` where [`Activations16::new`] refuses a token (not whole blocks,
    /// or a value that is not finite: the float32 path keeps those as they are).
    pub(super) fn new(x: &[f32], n: usize, cols: usize) -> Option<Tokens4> {
        // Whole pairs of groups (eight tokens), the kernel's step: the padding is zeros, never stored.
        let (groups, blocks) = (n.div_ceil(8) * 2, cols / 32);
        let mut out = Tokens4 {
            n,
            cols,
            a: vec![0; groups * 4 * cols],
            scale: vec![0.0; groups * 4 * blocks],
            sum: vec![0.0; groups * 4 * blocks],
        };
        for (t, x) in x.chunks_exact(cols).enumerate() {
            let rounded = Activations16::new(x, false)?;
            let (group, lane) = (t / 4, t % 4);
            let a = &mut out.a[group * 4 * cols..];
            // Element `j` of a block sits at `LANE[j]` in `rounded.a`.
            for (b, block) in rounded.a.chunks_exact(32).enumerate() {
                for p in 0..16 {
                    let at = ((16 * b + p) * 4 + lane) * 2;
                    a[at] = block[LANE[2 * p]];
                    a[at + 1] = block[LANE[2 * p + 1]];
                }
            }
            for (k, [scale, sum]) in rounded.scale_sum.iter().enumerate() {
                out.scale[(group * blocks + k) * 4 + lane] = *scale;
                out.sum[(group * blocks + k) * 4 + lane] = *sum;
            }
        }
        Some(out)
    }
}

/// Rows unpacked at a time: each tile serves every token before the next is unpacked.
const TILE_ROWS: usize = 16;

/// Columns per group of `ty`: Q6_K's scales change every 16.
fn group_len(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q6_K => 16,
        _ => 32,
    }
}

/// What the codes of `ty` are centred on (the minimum takes `centre·scale`), so that the integer sums and
/// `min·Σx` do not cancel; 0 for the types without a minimum.
fn centre(ty: GgmlType) -> i32 {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q4_K => 8,
        GgmlType::Q5_1 | GgmlType::Q5_K => 16,
        _ => 0,
    }
}

/// Rows unpacked for the kernel: value `scale·code + min` per group of `group` columns.
struct Tile {
    cols: usize,
    group: usize,
    /// Whether the type has minima (`min·Σx` per group).
    has_min: bool,
    /// `[rows][cols]`.
    codes: Vec<i16>,
    /// `[rows][cols / group]`.
    scale: Vec<f32>,
    min: Vec<f32>,
    /// One row's stored codes and groups (`blocks::block_codes`), kept across rows.
    row_codes: Vec<i32>,
    row_groups: Vec<CodeGroup>,
}

impl Tile {
    fn new(ty: GgmlType, cols: usize) -> Tile {
        let group = group_len(ty);
        Tile {
            cols,
            group,
            has_min: has_min(ty),
            codes: vec![0; TILE_ROWS * cols],
            scale: vec![0.0; TILE_ROWS * cols / group],
            min: vec![0.0; TILE_ROWS * cols / group],
            row_codes: Vec::with_capacity(cols),
            row_groups: Vec::with_capacity(cols / group),
        }
    }

    /// Unpacks `rows` (whole stored rows of `ty`, at most [`TILE_ROWS`]).
    fn unpack(&mut self, ty: GgmlType, rows: &[u8], row_bytes: usize) {
        let (groups, c) = (self.cols / self.group, centre(ty));
        for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
            self.row_codes.clear();
            self.row_groups.clear();
            for block in row.chunks_exact(ty.block_bytes()) {
                let known = blocks::block_codes(ty, block, &mut self.row_codes, &mut self.row_groups);
                assert!(known, "prefill of {ty}: check has_16bit_dot first");
            }
            assert!(self.row_groups.len() == groups && self.row_codes.len() == self.cols);
            let codes = &mut self.codes[r * self.cols..(r + 1) * self.cols];
            for (i, g) in self.row_groups.iter().enumerate() {
                let at = i * self.group;
                for (out, &q) in codes[at..at + self.group].iter_mut().zip(&self.row_codes[at..]) {
                    *out = (q - g.zero - c) as i16;
                }
                self.scale[r * groups + i] = g.scale;
                self.min[r * groups + i] = g.min + g.scale * c as f32;
            }
        }
    }
}

/// Whether `ty` has a minimum (`min·Σx` per group).
fn has_min(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K)
}

/// `y[t][r] = Σ_c W[r][c]·x[t][c]` for every stored row of `ty` in `data` (`y`: `[n][rows]`), for one of
/// [`super::activations::has_16bit_dot`]'s types.
pub(super) fn rows(ty: GgmlType, data: &[u8], x: &Tokens4, y: &mut [f32]) {
    let row_bytes = ty.block_bytes() * x.cols / ty.block_len();
    let rows = data.len() / row_bytes.max(1);
    assert!(row_bytes > 0 && rows * row_bytes == data.len() && y.len() == rows * x.n);
    let mut tile = Tile::new(ty, x.cols);
    for (i, tile_rows) in data.chunks(TILE_ROWS * row_bytes).enumerate() {
        tile.unpack(ty, tile_rows, row_bytes);
        let at = Place {
            first: i * TILE_ROWS,
            rows,
        };
        let count = tile_rows.len() / row_bytes;
        // Two rows and eight tokens at a time; with an odd count, the tile's row after the last is computed and not
        // stored.
        for r in (0..count).step_by(2) {
            for g in (0..x.n.div_ceil(4)).step_by(2) {
                let stored = (count - r).min(2);
                match (tile.group, tile.has_min) {
                    (16, _) => kernel::<16, false>(&tile, r, stored, x, g, at, y),
                    (_, false) => kernel::<32, false>(&tile, r, stored, x, g, at, y),
                    _ => kernel::<32, true>(&tile, r, stored, x, g, at, y),
                }
            }
        }
    }
}

/// Where a tile's rows go in `y`: its first row's index, and the matrix's rows (`y`'s row length).
#[derive(Clone, Copy)]
struct Place {
    first: usize,
    rows: usize,
}

/// Rows `r..r + 2` of the tile against the token groups `g..g + 2`, into `y` (the first `stored` rows), in groups
/// of `G` columns, with minima or not (`MIN`). Three copies: each costs the package's wasm, and a group length or
/// minimum read at run time cost 14% to 20% of a prefill. (Plain loops over the register arrays, no
/// `array::from_fn`: its closure was not inlined in wasm.)
// `k` and `t` pick accumulators in two-dimensional arrays of registers.
#[allow(clippy::needless_range_loop)]
fn kernel<const G: usize, const MIN: bool>(
    tile: &Tile,
    r: usize,
    stored: usize,
    x: &Tokens4,
    g: usize,
    at: Place,
    y: &mut [f32],
) {
    const RB: usize = 2;
    const TB: usize = 2;
    let cols = x.cols;
    let (blocks, groups) = (cols / 32, cols / G);
    assert!(tile.codes.len() >= (r + RB) * cols && x.a.len() >= (g + TB) * 4 * cols && y.len() == x.n * at.rows);
    let mut acc = [[f32x4_splat(0.0); TB]; RB];
    for group in 0..groups {
        let mut dots = [[i32x4_splat(0); TB]; RB];
        for p in group * G / 2..(group + 1) * G / 2 {
            let mut xv = [i32x4_splat(0); TB];
            for t in 0..TB {
                // SAFETY: pair `p < cols / 2` of token group `g + t` is in `x.a` (asserted above).
                xv[t] = unsafe { v128_load(x.a.as_ptr().add(((g + t) * cols / 2 + p) * 8).cast()) };
            }
            for k in 0..RB {
                // SAFETY: the pair of codes `p` of tile row `r + k` is in `tile.codes` (asserted above).
                let w = unsafe { v128_load32_splat(tile.codes.as_ptr().add((r + k) * cols + 2 * p).cast()) };
                for t in 0..TB {
                    dots[k][t] = i32x4_add(dots[k][t], i32x4_dot_i16x8(xv[t], w));
                }
            }
        }
        let block = group * G / 32;
        for t in 0..TB {
            let i = ((g + t) * blocks + block) * 4;
            let xs = f32x4(x.scale[i], x.scale[i + 1], x.scale[i + 2], x.scale[i + 3]);
            for k in 0..RB {
                let s = f32x4_mul(xs, f32x4_splat(tile.scale[(r + k) * groups + group]));
                acc[k][t] = f32x4_add(acc[k][t], f32x4_mul(f32x4_convert_i32x4(dots[k][t]), s));
                if MIN {
                    let sum = f32x4(x.sum[i], x.sum[i + 1], x.sum[i + 2], x.sum[i + 3]);
                    let min = f32x4_splat(tile.min[(r + k) * groups + group]);
                    acc[k][t] = f32x4_add(acc[k][t], f32x4_mul(sum, min));
                }
            }
        }
    }
    for t in 0..TB {
        // `k` up to the constant, not to `stored`: an index known only at run time would put `acc` in memory.
        for k in 0..RB {
            if k >= stored {
                continue;
            }
            let lanes = [
                f32x4_extract_lane::<0>(acc[k][t]),
                f32x4_extract_lane::<1>(acc[k][t]),
                f32x4_extract_lane::<2>(acc[k][t]),
                f32x4_extract_lane::<3>(acc[k][t]),
            ];
            for (j, v) in lanes.into_iter().enumerate() {
                let token = (g + t) * 4 + j;
                if token < x.n {
                    y[token * at.rows + at.first + r + k] = v;
                }
            }
        }
    }
}

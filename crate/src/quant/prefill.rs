//! Integer prefill where the tile is unpacked by portable code (`blocks::block_codes`) or, for the types it has code
//! for, by the kernel's architecture ([`Kernel::unpack`]: the decode kernels' code for the 32-element blocks and
//! the K-quants): WebAssembly simd128 (`simd_wasm_prefill`, four tokens to a vector) and AVX2 without AVX-512 VNNI
//! (`simd_x86_prefill`, eight). The scheme of the AVX-512 prefill (`simd_avx512_prefill`): the tokens' activations
//! are rounded to 16 bits per block of 32 (as decode rounds them) and interleaved once per matmul, a pair of columns
//! of `L` tokens to a vector, so that one pairwise 16-bit dot (`i32x4.dot_i16x8_s`, `vpmaddwd`) multiplies a row's
//! pair of codes (broadcast) with that pair of each token: exact integer dots, no lanes summed across. A tile of rows
//! is unpacked once (the stored codes, centred, with each group's scale and minimum) and serves every token; after
//! each group the integer sums go to float32 times the row's and the tokens' scales. Each architecture's [`Kernel`]
//! takes two rows and two vectors of tokens at a time.

use super::activations::{Activations16, LANE};
use super::blocks::{self, CodeGroup};
use super::matmul::Level;
use super::GgmlType;

/// Tokens interleaved by `L`, their activations rounded as [`Activations16`] rounds one token.
pub(super) struct Tokens<const L: usize> {
    pub(super) n: usize,
    pub(super) cols: usize,
    /// Per group of `L` tokens (padded with zeros to whole steps of the kernel), per pair of columns, the `L`
    /// tokens' two values.
    pub(super) a: Vec<i16>,
    /// Per group of `L` tokens, per block of 32 columns, the `L` tokens' scales.
    pub(super) scale: Vec<f32>,
    /// The same for the blocks' exact float32 sums, where a type has minima.
    pub(super) sum: Vec<f32>,
}

impl<const L: usize> Tokens<L> {
    /// `x`: `n` tokens of `cols` values. `None` where [`Activations16::new`] refuses a token (not whole blocks,
    /// or a value that is not finite: the float32 path keeps those as they are).
    /// Padded with zeros (never stored) to whole steps of `step` groups, the kernel's ([`Kernel::GROUPS`]).
    pub(super) fn new(x: &[f32], n: usize, cols: usize, step: usize) -> Option<Tokens<L>> {
        let (groups, blocks) = (n.div_ceil(step * L) * step, cols / 32);
        let mut out = Tokens {
            n,
            cols,
            a: vec![0; groups * L * cols],
            scale: vec![0.0; groups * L * blocks],
            sum: vec![0.0; groups * L * blocks],
        };
        for (t, x) in x.chunks_exact(cols).enumerate() {
            let rounded = Activations16::new(x, false)?;
            let (group, lane) = (t / L, t % L);
            let a = &mut out.a[group * L * cols..];
            // Element `j` of a block sits at `LANE[j]` in `rounded.a`.
            for (b, block) in rounded.a.chunks_exact(32).enumerate() {
                for p in 0..16 {
                    let at = ((16 * b + p) * L + lane) * 2;
                    a[at] = block[LANE[2 * p]];
                    a[at + 1] = block[LANE[2 * p + 1]];
                }
            }
            for (k, [scale, sum]) in rounded.scale_sum.iter().enumerate() {
                out.scale[(group * blocks + k) * L + lane] = *scale;
                out.sum[(group * blocks + k) * L + lane] = *sum;
            }
        }
        Some(out)
    }
}

/// Rows unpacked at a time: each tile serves every token before the next is unpacked.
pub(super) const TILE_ROWS: usize = 16;

/// Columns per group of `ty`: 16 for Q6_K (its scales change every 16; and the AVX-512 kernel's codes, scaled, reach
/// 32·128, so 16 products of at most 32767 in magnitude fit a 32-bit sum where 32 might not), 32 for the rest.
pub(super) fn group_len(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q6_K | GgmlType::Q6_Kx8 => 16,
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
pub(super) struct Tile {
    pub(super) cols: usize,
    pub(super) group: usize,
    /// Whether the type has minima (`min·Σx` per group).
    has_min: bool,
    /// `[rows][cols]`.
    pub(super) codes: Vec<i16>,
    /// `[rows][cols / group]`.
    pub(super) scale: Vec<f32>,
    pub(super) min: Vec<f32>,
    /// One row's stored codes and groups (`blocks::block_codes`), kept across rows.
    row_codes: Vec<i32>,
    row_groups: Vec<CodeGroup>,
}

impl Tile {
    pub(super) fn new(ty: GgmlType, cols: usize) -> Tile {
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

    /// Unpacks `rows` (whole stored rows of `ty`, at most [`TILE_ROWS`]) with `K`'s code where it has some for
    /// `ty`, else with portable code.
    ///
    /// # Safety
    /// The CPU has `K`'s instructions.
    unsafe fn unpack<const L: usize, K: Kernel<L>>(&mut self, ty: GgmlType, rows: &[u8], row_bytes: usize) {
        // SAFETY: on x86-64 every kernel needs AVX2 at least; `rows` are whole groups (runs start at multiples of 16).
        #[cfg(target_arch = "x86_64")]
        if self.unpack_interleaved(ty, rows, row_bytes) {
            return;
        }
        let count = rows.len() / row_bytes;
        let groups = self.cols / self.group;
        let (codes, scale, min) = (
            &mut self.codes[..count * self.cols],
            &mut self.scale[..count * groups],
            &mut self.min[..count * groups],
        );
        if K::unpack(ty, rows, codes, scale, min) {
            return;
        }
        let c = centre(ty);
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

    /// Unpacks `rows` (whole groups of rows of an interleaved `ty`) with the AVX2 transposition; false for the other
    /// types.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn unpack_interleaved(&mut self, ty: GgmlType, rows: &[u8], row_bytes: usize) -> bool {
        if !ty.interleaved() {
            return false;
        }
        let (count, groups) = (rows.len() / row_bytes, self.cols / self.group);
        let (codes, scale, min) = (
            &mut self.codes[..count * self.cols],
            &mut self.scale[..count * groups],
            &mut self.min[..count * groups],
        );
        super::interleaved::unpack_tile(ty, rows, self.cols, codes, scale, min);
        true
    }
}

/// Whether `ty` has a minimum (`min·Σx` per group).
pub(super) fn has_min(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_1
            | GgmlType::Q5_1
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q4_1x8
            | GgmlType::Q5_1x8
            | GgmlType::Q4_Kx8
            | GgmlType::Q5_Kx8
    )
}

/// One architecture's kernel: rows `r..r + 2` of the tile (matrix rows `first + r..`) against the token groups
/// `g..g + GROUPS`, into `y` (the first `stored` rows), in groups of `G` columns, with minima or not (`MIN`).
pub(super) trait Kernel<const L: usize> {
    /// Groups of `L` tokens a call takes (the tokens are padded to whole steps of it).
    const GROUPS: usize;

    /// Unpacks whole stored rows of `ty` as [`Tile`] holds them (`codes`, `scale` and `min` are theirs, each
    /// group's in order) where the architecture has code for `ty`; false where it has none (the portable code runs).
    ///
    /// # Safety
    /// The CPU has the kernel's instructions.
    unsafe fn unpack(ty: GgmlType, rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) -> bool;

    /// # Safety
    /// The CPU has the kernel's instructions; `tile` holds rows `r..r + 2` and `x` token groups `g..g + GROUPS` of
    /// the same columns; `y` holds `x.n` tokens of rows up to `first + r + stored`, which no other task writes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run<const G: usize, const MIN: bool>(
        tile: &Tile,
        r: usize,
        stored: usize,
        x: &Tokens<L>,
        g: usize,
        first: usize,
        y: Output,
    );
}

/// `y[t][first + r] = Σ_c W[first + r][c]·x[t][c]` for the stored rows `rows` of `ty`, one of
/// [`super::activations::has_16bit_dot`]'s types.
///
/// # Safety
/// The CPU has `K`'s instructions; `y` has `x.n` tokens of at least `first + rows` rows, and no other task writes
/// these rows.
pub(super) unsafe fn rows<const L: usize, K: Kernel<L>>(
    ty: GgmlType,
    rows: &[u8],
    first: usize,
    x: &Tokens<L>,
    y: Output,
) {
    let row_bytes = ty.block_bytes() * x.cols / ty.block_len();
    assert!(row_bytes > 0 && rows.len().is_multiple_of(row_bytes) && first + rows.len() / row_bytes <= y.rows);
    let mut tile = Tile::new(ty, x.cols);
    for (i, tile_rows) in rows.chunks(TILE_ROWS * row_bytes).enumerate() {
        tile.unpack::<L, K>(ty, tile_rows, row_bytes);
        let (first, count) = (first + i * TILE_ROWS, tile_rows.len() / row_bytes);
        // Two rows and `K::GROUPS` groups of tokens at a time; with an odd count, the tile's row after the last is
        // computed and not stored. Three copies of each kernel (a group length or minimum read at run time cost the
        // wasm one 14% to 20% of a prefill; each copy costs the package's wasm).
        // Each step of token groups serves every row of the tile while its activations are in the first-level
        // cache (rows outside: 20% to 35% slower, the activations streamed again for every two rows).
        for g in (0..x.n.div_ceil(L)).step_by(K::GROUPS) {
            for r in (0..count).step_by(2) {
                let stored = (count - r).min(2);
                match (tile.group, tile.has_min) {
                    (16, _) => K::run::<16, false>(&tile, r, stored, x, g, first, y),
                    (_, false) => K::run::<32, false>(&tile, r, stored, x, g, first, y),
                    _ => K::run::<32, true>(&tile, r, stored, x, g, first, y),
                }
            }
        }
    }
}

/// Tokens interleaved by `L` as float32, for the float types (F32, F16, BF16), whose prefill stays exact: the tile's
/// rows are widened to float32 and each FMA multiplies one weight (broadcast) with `L` tokens, so that no row is
/// summed across lanes: `L` is 16 with AVX-512 (`simd_avx512_prefill`), 8 with AVX2 (`simd_x86_prefill`), 4 in wasm
/// (`simd_wasm_prefill`).
pub(super) struct TokensF32<const L: usize> {
    pub(super) n: usize,
    pub(super) cols: usize,
    /// Per group of `L` tokens (the last padded with zeros), per column, the `L` tokens' values.
    pub(super) x: Vec<f32>,
}

impl<const L: usize> TokensF32<L> {
    /// `x`: `n` tokens of `cols` values.
    pub(super) fn new(x: &[f32], n: usize, cols: usize) -> TokensF32<L> {
        let mut out = TokensF32 {
            n,
            cols,
            x: vec![0.0; n.div_ceil(L) * L * cols],
        };
        for (t, x) in x.chunks_exact(cols).enumerate() {
            let group = &mut out.x[t / L * L * cols..];
            for (c, &v) in x.iter().enumerate() {
                group[c * L + t % L] = v;
            }
        }
        out
    }
}

/// The float prefill's loop over `rows` (whole stored rows of F32, F16 or BF16, rows `first..` of `y`): a tile of
/// rows widened to float32 at a time (by `level`'s conversions), then `kernel(tile, take, step, r, g, first)` for
/// rows `r..r + take` of the tile (matrix rows `first + r..`; `take` is `widest`, 4 or 1) against the token groups
/// `g..g + step` (`step` up to `most_groups`), each step of token groups over every row of the tile while its tokens
/// are in the first-level cache.
#[allow(clippy::too_many_arguments)]
pub(super) fn float_tiles<const L: usize>(
    level: Level,
    ty: GgmlType,
    rows: &[u8],
    first: usize,
    x: &TokensF32<L>,
    y: Output,
    (widest, most_groups): (usize, usize),
    mut kernel: impl FnMut(&[f32], usize, usize, usize, usize, usize),
) {
    let row_bytes = ty.block_bytes() * x.cols / ty.block_len();
    assert!(row_bytes > 0 && rows.len().is_multiple_of(row_bytes) && first + rows.len() / row_bytes <= y.rows);
    let mut tile = vec![0f32; TILE_ROWS * x.cols];
    let groups = x.n.div_ceil(L);
    for (i, rows) in rows.chunks(TILE_ROWS * row_bytes).enumerate() {
        let count = rows.len() / row_bytes;
        super::matmul::dequantize_blocks(level, ty, rows, &mut tile[..count * x.cols]);
        let first = first + i * TILE_ROWS;
        let mut g = 0;
        while g < groups {
            let step = (groups - g).min(most_groups);
            let mut r = 0;
            while r < count {
                let take = match count - r {
                    n if n >= widest => widest,
                    4.. => 4,
                    _ => 1,
                };
                kernel(&tile, take, step, r, g, first);
                r += take;
            }
            g += step;
        }
    }
}

/// `y` (`[n][rows]`), shared by tasks that each write their own rows of the matrix (columns of `y`).
#[derive(Clone, Copy)]
pub(super) struct Output {
    pub(super) y: *mut f32,
    pub(super) rows: usize,
}

// SAFETY: tasks write disjoint elements (`rows` documents the rule), and `y` outlives them (`Output::new`'s borrow
// is held by the caller for the whole matmul).
unsafe impl Send for Output {}
unsafe impl Sync for Output {}

impl Output {
    pub(super) fn new(y: &mut [f32], rows: usize) -> Output {
        Output {
            y: y.as_mut_ptr(),
            rows,
        }
    }

    /// Writes a vector's lanes, tokens `token0..` of row `row`, for the tokens below `n` (a group's padding is
    /// not stored).
    ///
    /// # Safety
    /// `y` has `n` tokens of more than `row` rows, and no other task writes row `row`.
    #[inline(always)]
    pub(super) unsafe fn put(self, lanes: &[f32], token0: usize, n: usize, row: usize) {
        for (j, &v) in lanes.iter().enumerate() {
            let token = token0 + j;
            if token < n {
                *self.y.add(token * self.rows + row) = v;
            }
        }
    }
}

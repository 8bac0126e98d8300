//! The WebAssembly simd128 kernel of the portable integer prefill (`prefill`): four tokens to a vector, one
//! `i32x4.dot_i16x8_s` per row's pair of codes (splat) and pair of four tokens' columns.

use core::arch::wasm32::*;

use super::matmul::Level;
use super::prefill::{float_tiles, Kernel, Output, Tile, Tokens, TokensF32};
use super::GgmlType;

/// simd128 (always there: the module is built with it).
pub(super) struct Simd128;

// `k` and `t` pick accumulators in two-dimensional arrays of registers. (Plain loops over the register arrays, no
// `array::from_fn`: its closure was not inlined in wasm.)
#[allow(clippy::needless_range_loop)]
impl Kernel<4> for Simd128 {
    const GROUPS: usize = 2;

    unsafe fn unpack(ty: GgmlType, rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) -> bool {
        super::simd_wasm::unpack_tile(ty, rows, codes, scale, min)
    }

    unsafe fn run<const G: usize, const MIN: bool>(
        tile: &Tile,
        r: usize,
        stored: usize,
        x: &Tokens<4>,
        g: usize,
        first: usize,
        y: Output,
    ) {
        const RB: usize = 2;
        const TB: usize = <Simd128 as Kernel<4>>::GROUPS;
        let cols = x.cols;
        let (blocks, groups) = (cols / 32, cols / G);
        assert!(tile.codes.len() >= (r + RB) * cols && x.a.len() >= (g + TB) * 4 * cols);
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
                y.put(&lanes, (g + t) * 4, x.n, first + r + k);
            }
        }
    }
}

/// `y[t][first + r] = Σ_c W[first + r][c]·x[t][c]` in float32 for the stored rows `rows` of `ty` (F32, F16 or
/// BF16), four tokens to a vector, 4 rows by 2 groups of tokens a call (`prefill::float_tiles`).
pub(super) fn rows_f32(ty: GgmlType, rows: &[u8], first: usize, x: &TokensF32<4>, y: Output) {
    float_tiles(
        Level::Simd128,
        ty,
        rows,
        first,
        x,
        y,
        (4, 2),
        |tile, take, step, r, g, first| {
            // SAFETY: `float_tiles` passes rows of the tile and groups of `x`; `y` as this function's caller says.
            unsafe {
                match (take, step) {
                    (4, 2) => kernel_f32::<4, 2>(tile, r, x, g, first, y),
                    (4, _) => kernel_f32::<4, 1>(tile, r, x, g, first, y),
                    (_, 2) => kernel_f32::<1, 2>(tile, r, x, g, first, y),
                    _ => kernel_f32::<1, 1>(tile, r, x, g, first, y),
                }
            }
        },
    );
}

/// Rows `r..r + RB` of the float32 tile (matrix rows `first + r..`) against the token groups `g..g + TB`.
///
/// # Safety
/// `y` has `x.n` tokens of at least `first + r + RB` rows, and no other task writes these rows.
#[allow(clippy::needless_range_loop)]
unsafe fn kernel_f32<const RB: usize, const TB: usize>(
    tile: &[f32],
    r: usize,
    x: &TokensF32<4>,
    g: usize,
    first: usize,
    y: Output,
) {
    let cols = x.cols;
    assert!(tile.len() >= (r + RB) * cols && x.x.len() >= (g + TB) * 4 * cols);
    let w = tile.as_ptr().add(r * cols);
    let xs = x.x.as_ptr().add(g * 4 * cols);
    let mut acc = [[f32x4_splat(0.0); TB]; RB];
    for c in 0..cols {
        let mut xv = [f32x4_splat(0.0); TB];
        for t in 0..TB {
            xv[t] = v128_load(xs.add((t * cols + c) * 4).cast());
        }
        for k in 0..RB {
            let wv = f32x4_splat(*w.add(k * cols + c));
            for t in 0..TB {
                acc[k][t] = f32x4_add(acc[k][t], f32x4_mul(wv, xv[t]));
            }
        }
    }
    for t in 0..TB {
        for k in 0..RB {
            let mut lanes = [0f32; 4];
            v128_store(lanes.as_mut_ptr().cast(), acc[k][t]);
            y.put(&lanes, (g + t) * 4, x.n, first + r + k);
        }
    }
}

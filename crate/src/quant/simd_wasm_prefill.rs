//! The WebAssembly simd128 kernel of the portable integer prefill (`prefill`): four tokens to a vector, one
//! `i32x4.dot_i16x8_s` per row's pair of codes (splat) and pair of four tokens' columns.

use core::arch::wasm32::*;

use super::prefill::{Kernel, Output, Tile, Tokens};

/// simd128 (always there: the module is built with it).
pub(super) struct Simd128;

// `k` and `t` pick accumulators in two-dimensional arrays of registers. (Plain loops over the register arrays, no
// `array::from_fn`: its closure was not inlined in wasm.)
#[allow(clippy::needless_range_loop)]
impl Kernel<4> for Simd128 {
    const GROUPS: usize = 2;

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
                for (j, v) in lanes.into_iter().enumerate() {
                    let token = (g + t) * 4 + j;
                    if token < x.n {
                        *y.y.add(token * y.rows + first + r + k) = v;
                    }
                }
            }
        }
    }
}

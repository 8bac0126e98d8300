//! The AVX2 kernel of the portable integer prefill (`prefill`), for x86-64 CPUs without AVX-512 VNNI: eight tokens
//! to a vector, one `vpmaddwd` per row's pair of codes (broadcast) and pair of eight tokens' columns, two rows by 32
//! tokens a call. (`vpdpwssd` of AVX-VNNI in place of `vpmaddwd` + `vpaddd` measured slower, 289 against 350 tok/s
//! on a Zen 5 at two rows by 16 tokens: its accumulation is a longer chain.) Also the float types' AVX2 prefill
//! (`rows_f32`).

use std::arch::x86_64::*;

use super::matmul::Level;
use super::prefill::{float_tiles, Kernel, Output, Tile, Tokens, TokensF32};
use super::GgmlType;

/// AVX2 and FMA (checked by the caller).
pub(super) struct Avx2;

// `k` and `t` pick accumulators in two-dimensional arrays of registers.
#[allow(clippy::needless_range_loop)]
impl Kernel<8> for Avx2 {
    /// Four: 32 tokens a call (two measured 1.3× slower: too few independent sums).
    const GROUPS: usize = 4;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack(ty: GgmlType, rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) -> bool {
        super::simd_x86_16::unpack_tile(ty, rows, codes, scale, min)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn run<const G: usize, const MIN: bool>(
        tile: &Tile,
        r: usize,
        stored: usize,
        x: &Tokens<8>,
        g: usize,
        first: usize,
        y: Output,
    ) {
        const RB: usize = 2;
        const TB: usize = <Avx2 as Kernel<8>>::GROUPS;
        let cols = x.cols;
        let (blocks, groups) = (cols / 32, cols / G);
        assert!(tile.codes.len() >= (r + RB) * cols && x.a.len() >= (g + TB) * 8 * cols);
        let mut acc = [[_mm256_setzero_ps(); TB]; RB];
        for group in 0..groups {
            let mut dots = [[_mm256_setzero_si256(); TB]; RB];
            for p in group * G / 2..(group + 1) * G / 2 {
                let mut xv = [_mm256_setzero_si256(); TB];
                for t in 0..TB {
                    xv[t] = _mm256_loadu_si256(x.a.as_ptr().add(((g + t) * cols / 2 + p) * 16).cast());
                }
                for k in 0..RB {
                    let w = _mm256_set1_epi32(
                        tile.codes
                            .as_ptr()
                            .add((r + k) * cols + 2 * p)
                            .cast::<i32>()
                            .read_unaligned(),
                    );
                    for t in 0..TB {
                        dots[k][t] = _mm256_add_epi32(dots[k][t], _mm256_madd_epi16(xv[t], w));
                    }
                }
            }
            let block = group * G / 32;
            for t in 0..TB {
                let i = ((g + t) * blocks + block) * 8;
                let xs = _mm256_loadu_ps(x.scale.as_ptr().add(i));
                for k in 0..RB {
                    let s = _mm256_mul_ps(xs, _mm256_set1_ps(tile.scale[(r + k) * groups + group]));
                    acc[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[k][t]), s, acc[k][t]);
                    if MIN {
                        let min = _mm256_set1_ps(tile.min[(r + k) * groups + group]);
                        acc[k][t] = _mm256_fmadd_ps(_mm256_loadu_ps(x.sum.as_ptr().add(i)), min, acc[k][t]);
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
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[k][t]);
                y.put(&lanes, (g + t) * 8, x.n, first + r + k);
            }
        }
    }
}

/// `y[t][first + r] = Σ_c W[first + r][c]·x[t][c]` in float32 for the stored rows `rows` of `ty` (F32, F16 or
/// BF16), eight tokens to a vector, 4 rows by 3 groups of tokens a call (12 accumulators of AVX2's 16 registers).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `y` has `x.n` tokens of at least `first + rows` rows, and no other task writes
/// these rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_f32(ty: GgmlType, rows: &[u8], first: usize, x: &TokensF32<8>, y: Output) {
    float_tiles(
        Level::Avx2,
        ty,
        rows,
        first,
        x,
        y,
        (4, 2),
        |tile, take, step, r, g, first| {
            // SAFETY: this function's CPU; `float_tiles` passes rows of the tile and groups of `x`.
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
#[target_feature(enable = "avx2,fma,f16c")]
// `t` picks a token group in every row's accumulators (`acc[k][t]`).
#[allow(clippy::needless_range_loop)]
unsafe fn kernel_f32<const RB: usize, const TB: usize>(
    tile: &[f32],
    r: usize,
    x: &TokensF32<8>,
    g: usize,
    first: usize,
    y: Output,
) {
    let cols = x.cols;
    assert!(tile.len() >= (r + RB) * cols && x.x.len() >= (g + TB) * 8 * cols);
    let w: [*const f32; RB] = std::array::from_fn(|k| tile.as_ptr().add((r + k) * cols));
    let xs: [*const f32; TB] = std::array::from_fn(|t| x.x.as_ptr().add((g + t) * 8 * cols));
    let mut acc = [[_mm256_setzero_ps(); TB]; RB];
    for c in 0..cols {
        let xv: [__m256; TB] = std::array::from_fn(|t| _mm256_loadu_ps(xs[t].add(8 * c)));
        for k in 0..RB {
            let wv = _mm256_broadcast_ss(&*w[k].add(c));
            for t in 0..TB {
                acc[k][t] = _mm256_fmadd_ps(wv, xv[t], acc[k][t]);
            }
        }
    }
    for t in 0..TB {
        let mut lanes = [0f32; 8];
        for k in 0..RB {
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc[k][t]);
            y.put(&lanes, (g + t) * 8, x.n, first + r + k);
        }
    }
}

//! WebAssembly simd128 kernels (compiled only with `target-feature=+simd128`, so always available). simd128 has
//! no fused multiply-add: products and sums round separately. Block scales multiply a block's partial sum, except
//! where a minimum is added (Q4_1), whose weights are formed `d·q + m` first. Decode over 16-bit activations
//! (`rows_dot_16`) takes exact integer dots four blocks at a time, then scales them in float32 (`dot16`); rows of
//! 32-element blocks two at a time, each block's activations loaded once for both (`dot16_pair`). Decode over F16
//! and BF16 rows takes them two at a time too (`rows_dot_float`).

use core::arch::wasm32::*;

use super::activations::Activations16;
use super::matmul::far_pairs;
use super::GgmlType;

/// The dot of one stored row with `x`, for the types with a fused kernel (`None` for the others).
pub(super) fn row_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> Option<f32> {
    Some(match ty {
        GgmlType::F32 => dot_f32(row, x),
        GgmlType::F16 => dot_f16(row, x),
        GgmlType::BF16 => dot_16bit(row, x, bf16x4, bf16),
        GgmlType::Q4_0 => dot_q4_0(row, x),
        GgmlType::Q4_1 => dot_q4_1(row, x),
        GgmlType::Q8_0 => dot_q8_0(row, x),
        GgmlType::LoomQ4_0 => dot_loom_q4_0(row, x),
        _ => return None,
    })
}

fn hsum(v: v128) -> f32 {
    (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
        + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
}

fn fma(a: v128, b: v128, acc: v128) -> v128 {
    f32x4_add(acc, f32x4_mul(a, b))
}

/// 4 floats of `x` from element `i`.
fn load(x: &[f32], i: usize) -> v128 {
    assert!(i + 4 <= x.len());
    // SAFETY: in bounds (checked above); wasm loads need no alignment.
    unsafe { v128_load(x.as_ptr().add(i).cast()) }
}

/// 16 bytes of `b` from byte `i`.
fn load16(b: &[u8], i: usize) -> v128 {
    assert!(i + 16 <= b.len());
    // SAFETY: in bounds (checked above); wasm loads need no alignment.
    unsafe { v128_load(b.as_ptr().add(i).cast()) }
}

/// `Σ a[i]·b[i]`: four running sums of 4.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = fma(load(a, i + 4 * k), load(b, i + 4 * k), *acc);
        }
        i += 16;
    }
    while i + 4 <= n {
        acc[0] = fma(load(a, i), load(b, i), acc[0]);
        i += 4;
    }
    let tail: f32 = a[i..n].iter().zip(&b[i..n]).map(|(a, b)| a * b).sum();
    hsum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]))) + tail
}

/// Four rows dotted with one `x`, each 4 floats of `x` loaded once.
pub(super) fn dot4(w: [&[f32]; 4], x: &[f32]) -> [f32; 4] {
    let n = x.len();
    assert!(w.iter().all(|w| w.len() == n));
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    while i + 4 <= n {
        let xv = load(x, i);
        for (acc, w) in acc.iter_mut().zip(w) {
            *acc = fma(load(w, i), xv, *acc);
        }
        i += 4;
    }
    let mut out = [0.0; 4];
    for ((out, acc), w) in out.iter_mut().zip(acc).zip(w) {
        *out = hsum(acc) + w[i..].iter().zip(&x[i..]).map(|(a, b)| a * b).sum::<f32>();
    }
    out
}

fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    assert_eq!(row.len(), 4 * n);
    let mut acc = [f32x4_splat(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        acc[0] = fma(load16(row, 4 * i), load(x, i), acc[0]);
        acc[1] = fma(load16(row, 4 * i + 16), load(x, i + 4), acc[1]);
        i += 8;
    }
    let tail: f32 = row[4 * i..]
        .chunks_exact(4)
        .zip(&x[i..])
        .map(|(w, x)| f32::from_le_bytes([w[0], w[1], w[2], w[3]]) * x)
        .sum();
    hsum(f32x4_add(acc[0], acc[1])) + tail
}

/// Constants of the 16-bit kernels. V8 does not hoist a vector constant out of a loop: written inline, each is
/// rebuilt (three instructions) at every use, so the decode kernel takes them through [`Consts::opaque`], once a
/// row, as values held in registers.
#[derive(Clone, Copy)]
struct Consts {
    /// 0xF in each 16-bit lane.
    nibble: v128,
    /// A half's magnitude bits moved into float32 place (`0x7FFF << 13`), and its sign (`0x8000 << 16`).
    magnitude: v128,
    sign: v128,
    /// 2¹¹², the distance between float16's and float32's exponent biases.
    pow112: v128,
    /// The largest finite half's magnitude bits in float32 place (`0x7BFF << 13`), and float32's exponent bits.
    max_finite: v128,
    exponent: v128,
    eight: v128,
    /// 0xF and 8 in each byte.
    byte_nibble: v128,
    byte_eight: v128,
    /// 1, 3 and 32 in each 16-bit lane; 16.0 in each float lane.
    one16: v128,
    three16: v128,
    thirty_two16: v128,
    sixteen: v128,
    /// 0xFF in each 16-bit lane.
    low_byte: v128,
    /// A sign-extended half shifted into float32 place: float32's sign and the half's magnitude bits.
    signed_magnitude: v128,
    /// A half's sign and mantissa bits (0x83FF) in each 16-bit lane, and zero.
    not_exponent16: v128,
    zero: v128,
}

const CONSTS: Consts = Consts {
    nibble: u16x8(0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF),
    magnitude: u32x4(0x0FFF_E000, 0x0FFF_E000, 0x0FFF_E000, 0x0FFF_E000),
    sign: u32x4(0x8000_0000, 0x8000_0000, 0x8000_0000, 0x8000_0000),
    pow112: u32x4(0x7780_0000, 0x7780_0000, 0x7780_0000, 0x7780_0000),
    max_finite: u32x4(0x0F7F_E000, 0x0F7F_E000, 0x0F7F_E000, 0x0F7F_E000),
    exponent: u32x4(0x7F80_0000, 0x7F80_0000, 0x7F80_0000, 0x7F80_0000),
    eight: f32x4(8.0, 8.0, 8.0, 8.0),
    byte_nibble: u8x16(
        0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF,
    ),
    byte_eight: u8x16(8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8),
    one16: u16x8(1, 1, 1, 1, 1, 1, 1, 1),
    three16: u16x8(3, 3, 3, 3, 3, 3, 3, 3),
    thirty_two16: u16x8(32, 32, 32, 32, 32, 32, 32, 32),
    sixteen: f32x4(16.0, 16.0, 16.0, 16.0),
    low_byte: u16x8(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF),
    signed_magnitude: u32x4(0x8FFF_E000, 0x8FFF_E000, 0x8FFF_E000, 0x8FFF_E000),
    not_exponent16: u16x8(0x83FF, 0x83FF, 0x83FF, 0x83FF, 0x83FF, 0x83FF, 0x83FF, 0x83FF),
    zero: u32x4(0, 0, 0, 0),
};

impl Consts {
    /// The constants as values the compiler cannot see through.
    fn opaque() -> Consts {
        std::hint::black_box(CONSTS)
    }
}

/// Four halves, in the low 16 bits of 32-bit lanes (the high bits are ignored), to float32, exactly: the bits
/// shifted into float32 place and multiplied by 2¹¹² (normals and subnormals); past the largest finite half
/// (infinities, NaNs), an all-ones exponent.
fn halves(words: v128, k: &Consts) -> v128 {
    let shifted = v128_and(i32x4_shl(words, 13), k.magnitude);
    let finite = f32x4_mul(shifted, k.pow112);
    // A signed compare: one instruction on x86, where an unsigned one is four; `shifted` is below 2³¹.
    let special = v128_and(i32x4_gt(shifted, k.max_finite), k.exponent);
    let sign = v128_and(i32x4_shl(words, 16), k.sign);
    v128_or(v128_or(finite, special), sign)
}

/// Four halves (16-bit lanes of `h` widened to 32) to float32.
fn f16x4(h: v128) -> v128 {
    halves(h, &CONSTS)
}

/// Four finite halves, sign-extended from 16-bit lanes to 32, to float32: shifted into float32 place, the sign
/// extension's top bit is float32's sign; the bits between cleared, times 2¹¹² (normals and subnormals alike).
fn finite_halves(signed: v128, k: &Consts) -> v128 {
    f32x4_mul(v128_and(i32x4_shl(signed, 13), k.signed_magnitude), k.pow112)
}

/// Halves dotted with `x`: each 8 converted as finite (four operations for four values, against nine with the
/// infinities and NaNs), while noting whether any was not; a row that had one is done again the exact way.
fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    assert_eq!(row.len(), 2 * n);
    let k = Consts::opaque();
    let mut acc = [f32x4_splat(0.0); 2];
    let mut top = i16x8_splat(i16::MIN);
    let mut i = 0;
    while i + 8 <= n {
        let h = load16(row, 2 * i);
        top = highest_exponent(top, h, &k);
        acc[0] = fma(finite_halves(i32x4_extend_low_i16x8(h), &k), load(x, i), acc[0]);
        acc[1] = fma(finite_halves(i32x4_extend_high_i16x8(h), &k), load(x, i + 4), acc[1]);
        i += 8;
    }
    let one = |b: &[u8]| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    if all_ones_exponent(top) {
        return dot_16bit(row, x, f16x4, one);
    }
    let tail: f32 = row[2 * i..].chunks_exact(2).zip(&x[i..]).map(|(w, x)| one(w) * x).sum();
    hsum(f32x4_add(acc[0], acc[1])) + tail
}

/// Four bfloat16s (16-bit lanes of `h` widened to 32) to float32.
fn bf16x4(h: v128) -> v128 {
    i32x4_shl(h, 16)
}

/// Halves or bfloat16s (`widen` on 32-bit lanes holding 16 bits) dotted with `x`.
fn dot_16bit(row: &[u8], x: &[f32], widen: fn(v128) -> v128, one: fn(&[u8]) -> f32) -> f32 {
    let n = x.len();
    assert_eq!(row.len(), 2 * n);
    let mut acc = [f32x4_splat(0.0); 2];
    let mut i = 0;
    while i + 8 <= n {
        let h = load16(row, 2 * i);
        acc[0] = fma(widen(u32x4_extend_low_u16x8(h)), load(x, i), acc[0]);
        acc[1] = fma(widen(u32x4_extend_high_u16x8(h)), load(x, i + 4), acc[1]);
        i += 8;
    }
    let tail: f32 = row[2 * i..].chunks_exact(2).zip(&x[i..]).map(|(w, x)| one(w) * x).sum();
    hsum(f32x4_add(acc[0], acc[1])) + tail
}

/// 2⁹⁶: `x` is scaled by it for [`rows_dot_float`], whose halves come out as `h·2⁻¹¹²`; its sums are `2⁻¹⁶` of the true
/// ones. `x` up to 2³² in magnitude stays finite.
const F16_PRESCALE: f32 = 79_228_162_514_264_337_593_543_950_336.0;
const F16_UNSCALE: f32 = 65_536.0;
const F16_PRESCALE_LIMIT: f32 = 4_294_967_296.0;

/// The dots of a run of rows of halves or bfloat16s (`out.len()` of them, each as long) with `x`, two rows at a
/// time, each 8 of `x` loaded once for both. Each row's sums are [`dot_f16`]'s and `dot_16bit`'s, the same
/// operations in the same order: the same values (for halves, unless a product `|h·x|` falls below 2⁻¹¹⁰).
pub(super) fn rows_dot_float(ty: GgmlType, rows: &[u8], x: &[f32], out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    assert_eq!(rows.len(), out.len() * 2 * x.len());
    let k = &Consts::opaque();
    match ty {
        GgmlType::F16 => {
            // The halves' bits alone, shifted into float32 place, are `h·2⁻¹¹²`: against `x·2⁹⁶`, no product per
            // weight to undo the bias (three operations for four weights, not four).
            if x.iter().any(|v| v.abs() >= F16_PRESCALE_LIMIT && v.is_finite()) {
                return super::matmul::each_row(rows, out, |row| dot_f16(row, x));
            }
            let scaled: Vec<f32> = x.iter().map(|v| v * F16_PRESCALE).collect();
            let one = |row: &[u8]| dot_f16(row, x);
            far_pairs(
                rows,
                out,
                |r0, r1| {
                    let (sums, special) = float_pair(r0, r1, &scaled, f16_bits, k);
                    std::array::from_fn(|r| match special[r] {
                        // A row with an infinity or a NaN, the exact way.
                        true => dot_16bit([r0, r1][r], x, f16x4, half),
                        false => sums_with_tail(sums[r], [r0, r1][r], x, half, F16_UNSCALE),
                    })
                },
                one,
            );
        }
        GgmlType::BF16 => {
            let one = |row: &[u8]| dot_16bit(row, x, bf16x4, bf16);
            far_pairs(
                rows,
                out,
                |r0, r1| {
                    let (sums, _) = float_pair(r0, r1, x, bf16_bits, k);
                    [
                        sums_with_tail(sums[0], r0, x, bf16, 1.0),
                        sums_with_tail(sums[1], r1, x, bf16, 1.0),
                    ]
                },
                one,
            );
        }
        _ => unreachable!("rows_dot_float on {ty}"),
    }
}

/// A row's two running sums (elements 0..4 and 4..8 of every 8) times `unscale`, plus the elements past the last 8.
fn sums_with_tail(sums: [v128; 2], row: &[u8], x: &[f32], one: fn(&[u8]) -> f32, unscale: f32) -> f32 {
    let whole = x.len() / 8 * 8;
    let tail: f32 = row[2 * whole..]
        .chunks_exact(2)
        .zip(&x[whole..])
        .map(|(w, x)| one(w) * x)
        .sum();
    hsum(f32x4_add(sums[0], sums[1])) * unscale + tail
}

/// Halves in the high 16 bits of 32-bit lanes to their bits in float32 place (sign, then exponent and mantissa
/// moved down three): `h·2⁻¹¹²` for a finite half.
#[inline(always)]
fn f16_bits(high: v128, k: &Consts) -> v128 {
    v128_and(i32x4_shr(high, 3), k.signed_magnitude)
}

/// Bfloat16s in the high 16 bits of 32-bit lanes are float32 already.
#[inline(always)]
fn bf16_bits(high: v128, _: &Consts) -> v128 {
    high
}

/// Two rows of 16-bit floats dotted with `x` over whole 8s: each row's two running sums (its first 4 and its last 4
/// of every 8), and whether the row held a half with an all-ones exponent (an infinity or a NaN).
#[inline(always)]
fn float_pair(
    r0: &[u8],
    r1: &[u8],
    x: &[f32],
    widen: fn(v128, &Consts) -> v128,
    k: &Consts,
) -> ([[v128; 2]; 2], [bool; 2]) {
    let n = x.len();
    assert!(r0.len() == 2 * n && r1.len() == 2 * n);
    let mut top = [i16x8_splat(i16::MIN); 2];
    let mut acc = [[f32x4_splat(0.0); 2]; 2];
    let mut i = 0;
    while i + 8 <= n {
        let (x0, x1) = (load(x, i), load(x, i + 4));
        for (r, row) in [r0, r1].into_iter().enumerate() {
            let h = load16(row, 2 * i);
            top[r] = highest_exponent(top[r], h, k);
            // Each half into the high 16 bits of a 32-bit lane: one unpack.
            let low = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(k.zero, h);
            let high = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(k.zero, h);
            acc[r][0] = fma(widen(low, k), x0, acc[r][0]);
            acc[r][1] = fma(widen(high, k), x1, acc[r][1]);
        }
        i += 8;
    }
    (acc, top.map(all_ones_exponent))
}

/// The running lane-wise maximum of `h | 0x83FF` over halves `h`, from `i16::MIN`: as a signed 16-bit lane it is −1
/// exactly when `h`'s exponent is all ones (an infinity or a NaN), less otherwise. Two operations per 8 halves.
#[inline(always)]
fn highest_exponent(top: v128, h: v128, k: &Consts) -> v128 {
    i16x8_max(top, v128_or(h, k.not_exponent16))
}

/// Whether [`highest_exponent`] saw a half with an all-ones exponent.
#[inline(always)]
fn all_ones_exponent(top: v128) -> bool {
    v128_any_true(i16x8_eq(top, i16x8_splat(-1)))
}

fn bf16(b: &[u8]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
}

fn half(b: &[u8]) -> f32 {
    super::blocks::half_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// `Σ q·x` over 16 signed byte codes `q` against `x[0..16]`.
fn sum16(q: v128, x: &[f32], acc: v128) -> v128 {
    let lo = i16x8_extend_low_i8x16(q);
    let hi = i16x8_extend_high_i8x16(q);
    let acc = fma(f32x4_convert_i32x4(i32x4_extend_low_i16x8(lo)), load(x, 0), acc);
    let acc = fma(f32x4_convert_i32x4(i32x4_extend_high_i16x8(lo)), load(x, 4), acc);
    let acc = fma(f32x4_convert_i32x4(i32x4_extend_low_i16x8(hi)), load(x, 8), acc);
    fma(f32x4_convert_i32x4(i32x4_extend_high_i16x8(hi)), load(x, 12), acc)
}

/// `Σ q·x` over one block of 32 signed codes (elements 0..16 in `q0`, 16..32 in `q1`).
fn block_sum(q0: v128, q1: v128, x: &[f32]) -> v128 {
    sum16(q1, &x[16..], sum16(q0, x, f32x4_splat(0.0)))
}

/// A Q4_0 block's 16 code bytes as its 32 signed codes `q − 8` (elements 0..16, then 16..32).
fn q4_0_codes(qs: v128) -> [v128; 2] {
    let (low, eight) = (u8x16_splat(0xF), i8x16_splat(8));
    [i8x16_sub(v128_and(qs, low), eight), i8x16_sub(u8x16_shr(qs, 4), eight)]
}

/// A Loom Q4_0 block's 16 code bytes as its 32 signed codes in value order (elements 0..16, then 16..32): 4-bit
/// two's complement sign-extended as `(q ^ 8) − 8`, element 2j in byte j's low nibble.
fn loom_q4_0_codes(qs: v128) -> [v128; 2] {
    let (low, eight) = (u8x16_splat(0xF), i8x16_splat(8));
    let lo = i8x16_sub(v128_xor(v128_and(qs, low), eight), eight);
    let hi = i8x16_sub(v128_xor(u8x16_shr(qs, 4), eight), eight);
    [
        i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi),
        i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(lo, hi),
    ]
}

fn dot_q4_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = f32x4_splat(0.0);
    for (b, x) in row.chunks_exact(18).zip(x.chunks_exact(32)) {
        let [lo, hi] = q4_0_codes(load16(b, 2));
        acc = fma(f32x4_splat(half(b)), block_sum(lo, hi, x), acc);
    }
    hsum(acc)
}

fn dot_q8_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = f32x4_splat(0.0);
    for (b, x) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
        acc = fma(f32x4_splat(half(b)), block_sum(load16(b, 2), load16(b, 18), x), acc);
    }
    hsum(acc)
}

fn dot_loom_q4_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = f32x4_splat(0.0);
    for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let s = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let [q0, q1] = loom_q4_0_codes(load16(b, 4));
        acc = fma(f32x4_splat(s), block_sum(q0, q1, x), acc);
    }
    hsum(acc)
}

fn dot_q4_1(row: &[u8], x: &[f32]) -> f32 {
    let low = u8x16_splat(0xF);
    let mut acc = [f32x4_splat(0.0); 2];
    for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let (d, m) = (f32x4_splat(half(b)), f32x4_splat(half(&b[2..])));
        let qs = load16(b, 4);
        for (h, q) in [v128_and(qs, low), u8x16_shr(qs, 4)].into_iter().enumerate() {
            let (lo, hi) = (u16x8_extend_low_u8x16(q), u16x8_extend_high_u8x16(q));
            let q4 = [
                u32x4_extend_low_u16x8(lo),
                u32x4_extend_high_u16x8(lo),
                u32x4_extend_low_u16x8(hi),
                u32x4_extend_high_u16x8(hi),
            ];
            for (k, q) in q4.into_iter().enumerate() {
                let w = f32x4_add(f32x4_mul(d, f32x4_convert_i32x4(q)), m);
                acc[k % 2] = fma(w, load(x, 16 * h + 4 * k), acc[k % 2]);
            }
        }
    }
    hsum(f32x4_add(acc[0], acc[1]))
}

/// One block type's layout for the 16-bit decode kernel: its scale, and its 32 codes as 16-bit integers in the
/// order of [`Activations16`]'s `a` in wasm (each half block's even elements, then its odd ones).
trait Block {
    const BYTES: usize;
    /// Q4_0 and Q4_1 (8), Q5_0 and Q5_1 (16): the codes are `q`, from 0, and the value is `d·(q − CENTRE)`; the
    /// kernel subtracts `CENTRE·Σa`.
    const CENTRE: i32 = 0;
    /// Q4_1 and Q5_1: the minimum, added as `(m + CENTRE·d)·Σx` beside the centred codes, so that neither sum
    /// grows large and cancels the other (in float32 that cost SmolLM2 0.01 of a logit).
    const HAS_MIN: bool = false;

    /// The block's scale bits as a 32-bit word (with a minimum: its bits in the high half).
    fn scale_word(b: &[u8]) -> u32;

    /// Four blocks' scale words as float32: the scales `d` and, with a minimum, `m + CENTRE·d`.
    fn scales(words: v128, k: &Consts) -> (v128, v128);

    /// The codes: elements 0, 2, … 14, then 1, 3, … 15, then 16, 18, … 30, then 17, 19, … 31.
    fn codes(b: &[u8], k: &Consts) -> [v128; 4];
}

/// ggml's Q4 nibbles (element `j` in byte `j`'s low nibble, `16 + j` in its high one) as 16-bit lanes: byte pairs
/// taken apart by 16-bit shifts, which are single instructions where byte shifts are not.
fn q4_codes(qs: v128, k: &Consts) -> [v128; 4] {
    let low = k.nibble;
    [
        v128_and(qs, low),
        v128_and(u16x8_shr(qs, 8), low),
        v128_and(u16x8_shr(qs, 4), low),
        u16x8_shr(qs, 12),
    ]
}

/// 16 signed bytes as 16-bit lanes: the even bytes, then the odd ones.
fn split_i8(q: v128) -> [v128; 2] {
    [i16x8_shr(i16x8_shl(q, 8), 8), i16x8_shr(q, 8)]
}

struct Q4_0;
impl Block for Q4_0 {
    const BYTES: usize = 18;
    const CENTRE: i32 = 8;
    fn scale_word(b: &[u8]) -> u32 {
        u32::from(u16::from_le_bytes([b[0], b[1]]))
    }
    fn scales(words: v128, k: &Consts) -> (v128, v128) {
        (halves(words, k), f32x4_splat(0.0))
    }
    fn codes(b: &[u8], k: &Consts) -> [v128; 4] {
        q4_codes(load16(b, 2), k)
    }
}

struct Q4_1;
impl Block for Q4_1 {
    const BYTES: usize = 20;
    const CENTRE: i32 = 8;
    const HAS_MIN: bool = true;
    fn scale_word(b: &[u8]) -> u32 {
        word(b, 0)
    }
    fn scales(words: v128, k: &Consts) -> (v128, v128) {
        let d = halves(words, k);
        let m = halves(u32x4_shr(words, 16), k);
        (d, f32x4_add(m, f32x4_mul(k.eight, d)))
    }
    fn codes(b: &[u8], k: &Consts) -> [v128; 4] {
        q4_codes(load16(b, 4), k)
    }
}

/// Byte `k` of entry `b`: 16 where bit `k` of `b` is set, else 0 (eight bits of a Q5 `qh` as bytes of bit 4).
static Q5_HIGH: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 8 {
            if b >> k & 1 == 1 {
                table[b] |= 0x10 << (8 * k);
            }
            k += 1;
        }
        b += 1;
    }
    table
};

/// Q5's codes in the order of [`q4_codes`]: bit `e` of the word `qh` is element `e`'s bit 4, spread to bytes by
/// four reads of [`Q5_HIGH`] and merged with the nibble bytes before they are split into 16-bit lanes.
fn q5_codes(qh: u32, qs: v128, k: &Consts) -> [v128; 4] {
    let spread = |byte: u32| Q5_HIGH[(qh >> (8 * byte) & 0xFF) as usize];
    // Byte j: element j's code (low nibble, bit j), and element 16 + j's (high nibble, bit 16 + j).
    let low = v128_or(v128_and(qs, k.byte_nibble), u64x2(spread(0), spread(1)));
    let high = v128_or(v128_and(u16x8_shr(qs, 4), k.byte_nibble), u64x2(spread(2), spread(3)));
    [
        v128_and(low, k.low_byte),
        u16x8_shr(low, 8),
        v128_and(high, k.low_byte),
        u16x8_shr(high, 8),
    ]
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

struct Q5_0;
impl Block for Q5_0 {
    const BYTES: usize = 22;
    const CENTRE: i32 = 16;
    fn scale_word(b: &[u8]) -> u32 {
        u32::from(u16::from_le_bytes([b[0], b[1]]))
    }
    fn scales(words: v128, k: &Consts) -> (v128, v128) {
        (halves(words, k), f32x4_splat(0.0))
    }
    fn codes(b: &[u8], k: &Consts) -> [v128; 4] {
        q5_codes(word(b, 2), load16(b, 6), k)
    }
}

struct Q5_1;
impl Block for Q5_1 {
    const BYTES: usize = 24;
    const CENTRE: i32 = 16;
    const HAS_MIN: bool = true;
    fn scale_word(b: &[u8]) -> u32 {
        word(b, 0)
    }
    fn scales(words: v128, k: &Consts) -> (v128, v128) {
        let d = halves(words, k);
        let m = halves(u32x4_shr(words, 16), k);
        (d, f32x4_add(m, f32x4_mul(k.sixteen, d)))
    }
    fn codes(b: &[u8], k: &Consts) -> [v128; 4] {
        q5_codes(word(b, 4), load16(b, 8), k)
    }
}

struct Q8_0;
impl Block for Q8_0 {
    const BYTES: usize = 34;
    fn scale_word(b: &[u8]) -> u32 {
        u32::from(u16::from_le_bytes([b[0], b[1]]))
    }
    fn scales(words: v128, k: &Consts) -> (v128, v128) {
        (halves(words, k), f32x4_splat(0.0))
    }
    fn codes(b: &[u8], _: &Consts) -> [v128; 4] {
        let ([q0, q1], [q2, q3]) = (split_i8(load16(b, 2)), split_i8(load16(b, 18)));
        [q0, q1, q2, q3]
    }
}

struct LoomQ4_0;
impl Block for LoomQ4_0 {
    const BYTES: usize = 20;
    fn scale_word(b: &[u8]) -> u32 {
        word(b, 0)
    }
    fn scales(words: v128, _: &Consts) -> (v128, v128) {
        (words, f32x4_splat(0.0))
    }
    /// Element `2j` in byte `j`'s low nibble, `2j + 1` in its high one, 4-bit two's complement: so the even
    /// elements are the low nibbles, the odd ones the high nibbles, bytes 0..8 then 8..16.
    fn codes(b: &[u8], k: &Consts) -> [v128; 4] {
        let qs = load16(b, 4);
        // Sign-extended as `(q ^ 8) − 8`.
        let sign = |q: v128| i8x16_sub(v128_xor(q, k.byte_eight), k.byte_eight);
        let (even, odd) = (sign(v128_and(qs, k.byte_nibble)), sign(u8x16_shr(qs, 4)));
        [
            i16x8_extend_low_i8x16(even),
            i16x8_extend_low_i8x16(odd),
            i16x8_extend_high_i8x16(even),
            i16x8_extend_high_i8x16(odd),
        ]
    }
}

/// `Σ q·a` over one block: 32 codes `q` as 16-bit lanes, against its 32 activations `a`; four partial sums.
fn block_dot(a: &[i16], q: [v128; 4]) -> v128 {
    block_dot_loaded(activations(a), q)
}

/// `v`, after one lane of it is stored (`black_box` writes it to the stack). V8 keeps loads and stores in program
/// order but places pure vector operations just before their first use, so without a store every load of a loop
/// body came first and most of the loaded vectors were spilled (x86 has 16 vector registers) before any was used.
/// A store after each block's products keeps each block's loads beside its arithmetic.
fn in_order(v: v128) -> v128 {
    std::hint::black_box(i32x4_extract_lane::<0>(v));
    v
}

/// Lane `k`: the sum of `v[k]`'s four lanes.
fn sum4(v: [v128; 4]) -> v128 {
    let t0 = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]),
        i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]),
    );
    let t1 = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]),
        i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]),
    );
    i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(t0, t1), i32x4_shuffle::<2, 3, 6, 7>(t0, t1))
}

/// The dots of a run of stored rows (`out.len()` of them, each as long) with decode activations as 16-bit integers,
/// for `has_16bit_dot` types: the types of 32-element blocks two rows at a time, so that each block's activations
/// are loaded once for both.
pub(super) fn rows_dot_16(ty: GgmlType, rows: &[u8], x: &Activations16, out: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 => row_pairs::<Q4_0>(rows, x, out),
        GgmlType::Q4_1 => row_pairs::<Q4_1>(rows, x, out),
        GgmlType::Q8_0 => row_pairs::<Q8_0>(rows, x, out),
        GgmlType::LoomQ4_0 => row_pairs::<LoomQ4_0>(rows, x, out),
        GgmlType::Q5_0 => row_pairs::<Q5_0>(rows, x, out),
        GgmlType::Q5_1 => row_pairs::<Q5_1>(rows, x, out),
        _ => super::matmul::each_row(rows, out, |row| row_dot_16(ty, row, x)),
    }
}

/// [`rows_dot_16`] for one block type: pairs of rows, then the odd one.
fn row_pairs<B: Block>(rows: &[u8], x: &Activations16, out: &mut [f32]) {
    far_pairs(
        rows,
        out,
        |r0, r1| dot16_pair::<B>((r0, r1), x),
        |row| dot16::<B>(row, x),
    );
}

/// [`prefill::Tile`](super::prefill::Tile)'s unpacking of whole stored rows of the 32-element ggml types and the
/// K-quants: each block's (sub-block's) codes (the decode kernels', put back in value order; Q6_K's before its
/// scales) less their centre, its scale and its minimum plus centre times scale (formed as the portable unpacking
/// forms them). False for the other types.
pub(super) fn unpack_tile(ty: GgmlType, rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) -> bool {
    match ty {
        GgmlType::Q4_0 => unpack::<Q4_0>(rows, codes, scale, min),
        GgmlType::Q4_1 => unpack::<Q4_1>(rows, codes, scale, min),
        GgmlType::Q8_0 => unpack::<Q8_0>(rows, codes, scale, min),
        GgmlType::Q5_0 => unpack::<Q5_0>(rows, codes, scale, min),
        GgmlType::Q5_1 => unpack::<Q5_1>(rows, codes, scale, min),
        GgmlType::Q4_K => unpack_k::<Q4K>(rows, codes, scale, min),
        GgmlType::Q5_K => unpack_k::<Q5K>(rows, codes, scale, min),
        GgmlType::Q6_K => unpack_q6k(rows, codes, scale, min),
        _ => return false,
    }
    true
}

/// 32 codes in the decode kernels' order (each half block's even elements, then its odd ones) into `out` in value
/// order, less `centre`.
fn store_in_value_order([e0, o0, e1, o1]: [v128; 4], centre: i32, out: &mut [i16]) {
    assert!(out.len() >= 32);
    let values = [
        i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(e0, o0),
        i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(e0, o0),
        i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(e1, o1),
        i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(e1, o1),
    ];
    for (k, v) in values.into_iter().enumerate() {
        // SAFETY: `out` holds 32 values (checked above), so each 8-lane store at 8·k is in bounds; wasm stores need
        // no alignment.
        unsafe {
            v128_store(
                out.as_mut_ptr().add(8 * k).cast(),
                i16x8_sub(v, i16x8_splat(centre as i16)),
            )
        };
    }
}

fn unpack<B: Block>(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let consts = &Consts::opaque();
    let blocks = rows.len() / B::BYTES;
    assert!(codes.len() == 32 * blocks && scale.len() == blocks && min.len() == blocks);
    for ((b, out), (scale, min)) in rows
        .chunks_exact(B::BYTES)
        .zip(codes.chunks_exact_mut(32))
        .zip(scale.iter_mut().zip(min.iter_mut()))
    {
        store_in_value_order(B::codes(b, consts), B::CENTRE, out);
        *scale = half(b);
        *min = match B::HAS_MIN {
            true => half(&b[2..]) + *scale * B::CENTRE as f32,
            false => 0.0,
        };
    }
}

fn unpack_k<K: SuperBlock>(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let consts = &Consts::opaque();
    let supers = rows.len() / K::BYTES;
    assert!(codes.len() == 256 * supers && scale.len() == 8 * supers && min.len() == 8 * supers);
    for (s, b) in rows.chunks_exact(K::BYTES).enumerate() {
        let (d, dmin) = (half(b), half(&b[2..]));
        let (sc, mn) = super::blocks::k_scale_min(&b[4..16]);
        for j in 0..8 {
            store_in_value_order(K::codes(b, j, consts), K::CENTRE, &mut codes[256 * s + 32 * j..]);
            let i = 8 * s + j;
            scale[i] = d * f32::from(sc[j]);
            // − dmin·m added, as the portable unpacking (and gguf-py) takes it.
            min[i] = -(dmin * f32::from(mn[j])) + scale[i] * K::CENTRE as f32;
        }
    }
}

/// [`unpack_tile`] of Q6_K: the codes less 32 and, per 16 elements, `d·scale` (as the portable unpacking forms it);
/// no minima.
fn unpack_q6k(rows: &[u8], codes: &mut [i16], scale: &mut [f32], min: &mut [f32]) {
    let consts = &Consts::opaque();
    let supers = rows.len() / Q6K::BYTES;
    assert!(codes.len() == 256 * supers && scale.len() == 16 * supers && min.len() == 16 * supers);
    for (s, b) in rows.chunks_exact(Q6K::BYTES).enumerate() {
        for j in 0..8 {
            store_in_value_order(Q6K::centred(b, j, consts), 0, &mut codes[256 * s + 32 * j..]);
        }
        let d = half(&b[208..]);
        for (g, &sc) in b[192..208].iter().enumerate() {
            scale[16 * s + g] = d * f32::from(sc as i8);
            min[16 * s + g] = 0.0;
        }
    }
}

/// The dot of one stored row with decode activations as 16-bit integers, for `has_16bit_dot` types.
pub(super) fn row_dot_16(ty: GgmlType, row: &[u8], x: &Activations16) -> f32 {
    match ty {
        GgmlType::Q4_0 => dot16::<Q4_0>(row, x),
        GgmlType::Q4_1 => dot16::<Q4_1>(row, x),
        GgmlType::Q8_0 => dot16::<Q8_0>(row, x),
        GgmlType::LoomQ4_0 => dot16::<LoomQ4_0>(row, x),
        GgmlType::Q5_0 => dot16::<Q5_0>(row, x),
        GgmlType::Q5_1 => dot16::<Q5_1>(row, x),
        GgmlType::Q4_K => dot16_k::<Q4K>(row, x),
        GgmlType::Q5_K => dot16_k::<Q5K>(row, x),
        GgmlType::Q6_K => dot16_k::<Q6K>(row, x),
        _ => unreachable!("row_dot_16 on {ty}: check has_16bit_dot first"),
    }
}

/// Four blocks at a time: their exact integer dots `Σ q·a`, one per lane, times the weight scales and the
/// activation scales. Scales are read and converted four at a time: one block at a time, they cost more than the
/// products. The blocks left at the end of the row (fewer than four) are taken one at a time.
fn dot16<B: Block>(row: &[u8], x: &Activations16) -> f32 {
    let consts = &Consts::opaque();
    let blocks = row.len() / B::BYTES;
    assert!(x.scale_sum.len() >= blocks && x.eight_sum.len() >= blocks && x.a.len() >= 32 * blocks);
    let mut acc = f32x4_splat(0.0);
    let mut row4 = row.chunks_exact(4 * B::BYTES);
    let sums =
        x.a.chunks_exact(128)
            .zip(x.scale_sum.chunks_exact(4))
            .zip(x.eight_sum.chunks_exact(4));
    for (b4, ((a4, ss), e4)) in (&mut row4).zip(sums) {
        let b = |k: usize| &b4[k * B::BYTES..(k + 1) * B::BYTES];
        // Explicit arrays, not `array::from_fn`: V8 does not inline the closure that makes, which then returns each
        // block's codes through memory (a Q5_0 decode took three times as long).
        let dot = |j: usize| in_order(block_dot(&a4[32 * j..], B::codes(b(j), consts)));
        acc = scaled_group::<B>(b4, [dot(0), dot(1), dot(2), dot(3)], (ss, e4), consts, acc);
    }
    hsum(remainder_blocks::<B>(row4.remainder(), blocks / 4 * 4, x, consts, acc))
}

/// Four blocks' exact dots (`dots`, one vector each) times their weight scales and activation scales (`ss`, with
/// `e4`: their `8·Σa`), with their minima, added to `acc`: [`dot16`]'s work after the products.
#[inline(always)]
fn scaled_group<B: Block>(b4: &[u8], dots: [v128; 4], (ss, e4): (&[[f32; 2]], &[i32]), k: &Consts, acc: v128) -> v128 {
    let b = |j: usize| &b4[j * B::BYTES..(j + 1) * B::BYTES];
    let mut isum = sum4(dots);
    if B::CENTRE != 0 {
        isum = centred(isum, e4, B::CENTRE);
    }
    let words = u32x4(
        B::scale_word(b(0)),
        B::scale_word(b(1)),
        B::scale_word(b(2)),
        B::scale_word(b(3)),
    );
    let (d, min) = B::scales(words, k);
    let (scales, sums) = scale_sum_pairs(ss);
    let acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_mul(d, scales)));
    match B::HAS_MIN {
        true => f32x4_add(acc, f32x4_mul(min, sums)),
        false => acc,
    }
}

/// [`dot16`] of two rows, block by block together: each block's activations loaded once for both rows, each row's
/// sums formed as [`dot16`] forms them (the same operations in the same order, so the same values).
fn dot16_pair<B: Block>((r0, r1): (&[u8], &[u8]), x: &Activations16) -> [f32; 2] {
    let consts = &Consts::opaque();
    let blocks = r0.len() / B::BYTES;
    assert!(r1.len() == r0.len());
    assert!(x.scale_sum.len() >= blocks && x.eight_sum.len() >= blocks && x.a.len() >= 32 * blocks);
    let mut acc = [f32x4_splat(0.0); 2];
    let sums =
        x.a.chunks_exact(128)
            .zip(x.scale_sum.chunks_exact(4))
            .zip(x.eight_sum.chunks_exact(4));
    let (mut g0, mut g1) = (r0.chunks_exact(4 * B::BYTES), r1.chunks_exact(4 * B::BYTES));
    for ((b0, b1), ((a4, ss), e4)) in (&mut g0).zip(&mut g1).zip(sums) {
        let b = |r: &[u8], j: usize| -> [v128; 4] { B::codes(&r[j * B::BYTES..(j + 1) * B::BYTES], consts) };
        let mut d0 = [i32x4_splat(0); 4];
        let mut d1 = [i32x4_splat(0); 4];
        for j in 0..4 {
            let a = activations(&a4[32 * j..]);
            d0[j] = in_order(block_dot_loaded(a, b(b0, j)));
            d1[j] = in_order(block_dot_loaded(a, b(b1, j)));
        }
        acc[0] = scaled_group::<B>(b0, d0, (ss, e4), consts, acc[0]);
        acc[1] = scaled_group::<B>(b1, d1, (ss, e4), consts, acc[1]);
    }
    let first = blocks / 4 * 4;
    [
        hsum(remainder_blocks::<B>(g0.remainder(), first, x, consts, acc[0])),
        hsum(remainder_blocks::<B>(g1.remainder(), first, x, consts, acc[1])),
    ]
}

/// One block's 32 activations as four vectors of 8.
#[inline(always)]
fn activations(a: &[i16]) -> [v128; 4] {
    assert!(a.len() >= 32);
    // SAFETY: `a` holds 32 values, so each 8-lane load at 8·k is in bounds; wasm loads need no alignment.
    let at = |k: usize| unsafe { v128_load(a.as_ptr().add(8 * k).cast()) };
    [at(0), at(1), at(2), at(3)]
}

/// [`block_dot`] over activations already loaded.
#[inline(always)]
fn block_dot_loaded(a: [v128; 4], q: [v128; 4]) -> v128 {
    let dot = |k: usize| i32x4_dot_i16x8(q[k], a[k]);
    i32x4_add(i32x4_add(dot(0), dot(1)), i32x4_add(dot(2), dot(3)))
}

/// The blocks at the end of a row (fewer than four; the first is block `first`), one at a time, added to `acc`.
#[inline(always)]
fn remainder_blocks<B: Block>(rest: &[u8], first: usize, x: &Activations16, consts: &Consts, mut acc: v128) -> v128 {
    for (k, b) in rest.chunks_exact(B::BYTES).enumerate() {
        let i = first + k;
        let mut isum = block_dot(&x.a[32 * i..], B::codes(b, consts));
        if B::CENTRE != 0 {
            isum = i32x4_sub(isum, i32x4(x.eight_sum[i] * (B::CENTRE / 8), 0, 0, 0));
        }
        let isum = f32x4_convert_i32x4(isum);
        let (d, min) = B::scales(u32x4_splat(B::scale_word(b)), consts);
        let [scale, sum] = x.scale_sum[i];
        acc = f32x4_add(acc, f32x4_mul(isum, f32x4_mul(d, f32x4_splat(scale))));
        if B::HAS_MIN {
            // One lane: `min` is the same in all four.
            acc = f32x4_add(acc, f32x4_mul(min, f32x4(sum, 0.0, 0.0, 0.0)));
        }
    }
    acc
}

/// Four blocks' activation (scale, sum) pairs as two vectors: their scales, and their sums.
#[inline(always)]
fn scale_sum_pairs(ss: &[[f32; 2]]) -> (v128, v128) {
    assert!(ss.len() >= 4);
    // SAFETY: `ss` holds four pairs, 32 bytes (checked above); wasm loads need no alignment.
    let (p0, p1) = unsafe { (v128_load(ss.as_ptr().cast()), v128_load(ss.as_ptr().add(2).cast())) };
    (i32x4_shuffle::<0, 2, 4, 6>(p0, p1), i32x4_shuffle::<1, 3, 5, 7>(p0, p1))
}

/// `isum − centre·Σa` for four blocks, from their `8·Σa` (`e4` holds four).
fn centred(isum: v128, e4: &[i32], centre: i32) -> v128 {
    assert!(e4.len() >= 4);
    // SAFETY: `e4` holds four values (checked above); wasm loads need no alignment.
    let eight = unsafe { v128_load(e4.as_ptr().cast()) };
    // 8·Σa, doubled for a centre of 16 (a shift by a constant, not a product with a `v128.const`).
    i32x4_sub(isum, i32x4_shl(eight, (centre / 16) as u32))
}

/// A K-quant's super-block of 256 for the 16-bit decode kernel: eight sub-blocks of 32, each with its own scale
/// and minimum.
trait SuperBlock {
    const BYTES: usize;
    /// Q4_K (8) and Q5_K (16): the codes are `q`, from 0, and the kernel subtracts `CENTRE·Σa`. 0 (Q6_K): the
    /// codes are centred and scaled, and each half sub-block is summed on its own.
    const CENTRE: i32;

    /// Per sub-block, the weight scale and the minimum added as `min·Σx`: `d·sc` and `CENTRE·d·sc − dmin·m`
    /// (Q6_K: `d`, 0), so that the centred codes' sum and the minimum's do not cancel.
    fn scales(b: &[u8], k: &Consts) -> ([v128; 2], [v128; 2]);

    /// Sub-block `j`'s 32 codes as 16-bit integers in the order of [`Activations16`]'s `a` (Q6_K: times their
    /// 16-element group's scale, at most 32·128 in magnitude).
    fn codes(b: &[u8], j: usize, k: &Consts) -> [v128; 4];
}

/// `(byte >> shift) & mask` of the 32 bytes at `b[at..]`, as 16-bit lanes in the order of [`Activations16`]'s `a`:
/// the even bytes of the first 16, their odd bytes, then the same of the next 16 (`shift` < 8).
fn byte_fields(b: &[u8], at: usize, shift: u32, mask: v128) -> [v128; 4] {
    let (l0, l1) = (load16(b, at), load16(b, at + 16));
    [
        v128_and(u16x8_shr(l0, shift), mask),
        v128_and(u16x8_shr(l0, shift + 8), mask),
        v128_and(u16x8_shr(l1, shift), mask),
        v128_and(u16x8_shr(l1, shift + 8), mask),
    ]
}

/// Q4_K/Q5_K's eight `d·sc` and `centre·d·sc − dmin·m` (`centre`: a vector of it), four to a vector: the 6-bit
/// fields taken apart in 32-bit words (four at a time), widened and converted in vectors. Byte by byte in scalar
/// code this was half of a Q4_K decode in V8.
#[inline(always)]
fn k_scales_centred(b: &[u8], centre: v128, k: &Consts) -> ([v128; 2], [v128; 2]) {
    let (w0, w1, w2) = (word(b, 4), word(b, 8), word(b, 12));
    let (six, four, top) = (0x3F3F_3F3F, 0x0F0F_0F0F, 0x3030_3030);
    // gguf-py's `get_scale_min`: scales and mins 0..4 are the low 6 bits of bytes 0..4 and 4..8; 4..8 take the
    // nibbles of bytes 8..12 with the top 2 bits of bytes 0..4 (scales) and 4..8 (mins) above them.
    let bytes = u32x4(
        w0 & six,
        (w2 & four) | ((w0 >> 2) & top),
        w1 & six,
        ((w2 >> 4) & four) | ((w1 >> 2) & top),
    );
    let (sc, mn) = (u16x8_extend_low_u8x16(bytes), u16x8_extend_high_u8x16(bytes));
    // The fields are 6-bit, so the signed conversion is exact: one instruction on x86, where the unsigned one is a
    // sequence.
    let f = |v: v128| f32x4_convert_i32x4(v);
    let dm = u32x4_splat(word(b, 0));
    let (d, dmin) = (halves(dm, k), halves(u32x4_shr(dm, 16), k));
    // `d·sc` and `dmin·m` rounded as gguf-py rounds them, then the centre's share.
    let scale = [
        f32x4_mul(d, f(u32x4_extend_low_u16x8(sc))),
        f32x4_mul(d, f(u32x4_extend_high_u16x8(sc))),
    ];
    let min = [
        f32x4_mul(dmin, f(u32x4_extend_low_u16x8(mn))),
        f32x4_mul(dmin, f(u32x4_extend_high_u16x8(mn))),
    ];
    let centred = |i: usize| f32x4_sub(f32x4_mul(centre, scale[i]), min[i]);
    (scale, [centred(0), centred(1)])
}

struct Q4K;
impl SuperBlock for Q4K {
    const BYTES: usize = 144;
    const CENTRE: i32 = 8;
    fn scales(b: &[u8], k: &Consts) -> ([v128; 2], [v128; 2]) {
        k_scales_centred(b, k.eight, k)
    }
    /// Nibble `j % 2` of the 32 bytes at `16 + 32·(j / 2)`.
    fn codes(b: &[u8], j: usize, k: &Consts) -> [v128; 4] {
        byte_fields(b, 16 + 32 * (j / 2), 4 * (j as u32 % 2), k.nibble)
    }
}

struct Q5K;
impl SuperBlock for Q5K {
    const BYTES: usize = 176;
    const CENTRE: i32 = 16;
    fn scales(b: &[u8], k: &Consts) -> ([v128; 2], [v128; 2]) {
        k_scales_centred(b, k.sixteen, k)
    }
    /// Q4_K's nibbles (at 48) plus bit `j` of the 32 bytes at 16, as bit 4.
    fn codes(b: &[u8], j: usize, k: &Consts) -> [v128; 4] {
        let low = byte_fields(b, 48 + 32 * (j / 2), 4 * (j as u32 % 2), k.nibble);
        let high = byte_fields(b, 16, j as u32, k.one16);
        let code = |i: usize| v128_or(low[i], i16x8_shl(high[i], 4));
        [code(0), code(1), code(2), code(3)]
    }
}

struct Q6K;
impl SuperBlock for Q6K {
    const BYTES: usize = 210;
    const CENTRE: i32 = 0;
    fn scales(b: &[u8], _: &Consts) -> ([v128; 2], [v128; 2]) {
        let d = f32x4_splat(half(&b[208..]));
        ([d, d], [f32x4_splat(0.0); 2])
    }
    /// [`Q6K::centred`]'s codes, the first 16 elements (the first two vectors) times the int8 scale at `192 + 2j`,
    /// the others times the next one.
    fn codes(b: &[u8], j: usize, k: &Consts) -> [v128; 4] {
        let q = Self::centred(b, j, k);
        let scales = [
            i16x8_splat((b[192 + 2 * j] as i8).into()),
            i16x8_splat((b[193 + 2 * j] as i8).into()),
        ];
        [0, 1, 2, 3].map(|v| i16x8_mul(q[v], scales[v / 2]))
    }
}

impl Q6K {
    /// Sub-block `j` = 4h + i: nibble `i / 2` of the 32 bytes at `64h + 32·(i % 2)`, bits `2i..2i + 2` of the 32
    /// bytes at `128 + 32h` as bits 4 and 5, minus 32, in the order of [`Activations16`]'s `a`.
    fn centred(b: &[u8], j: usize, k: &Consts) -> [v128; 4] {
        let (h, i) = (j / 4, j as u32 % 4);
        let low = byte_fields(b, 64 * h + 32 * (i as usize % 2), 4 * (i / 2), k.nibble);
        let high = byte_fields(b, 128 + 32 * h, 2 * i, k.three16);
        [0, 1, 2, 3].map(|v| i16x8_sub(v128_or(low[v], i16x8_shl(high[v], 4)), k.thirty_two16))
    }
}

/// [`dot16`] for a K-quant: per super-block, its eight sub-blocks' exact integer dots in two groups of four, each
/// group scaled in one float32 vector.
fn dot16_k<K: SuperBlock>(row: &[u8], x: &Activations16) -> f32 {
    let consts = &Consts::opaque();
    let supers = row.len() / K::BYTES;
    assert!(x.scale_sum.len() >= 8 * supers && x.eight_sum.len() >= 8 * supers && x.a.len() >= 256 * supers);
    let mut acc = f32x4_splat(0.0);
    let sums =
        x.a.chunks_exact(128)
            .zip(x.scale_sum.chunks_exact(4))
            .zip(x.eight_sum.chunks_exact(4));
    let mut sums = sums.take(2 * supers);
    for b in row.chunks_exact(K::BYTES) {
        let (scales, mins) = K::scales(b, consts);
        let first = sums.next().expect("x holds the row's sub-blocks (checked above)");
        let second = sums.next().expect("x holds the row's sub-blocks (checked above)");
        acc = k_group::<K, 0>(b, first, (scales[0], mins[0]), consts, acc);
        acc = k_group::<K, 1>(b, second, (scales[1], mins[1]), consts, acc);
    }
    hsum(acc)
}

/// Four sub-blocks' activations (as [`Activations16`]'s `a`), their (scale, sum) pairs and their `8·Σa`.
type GroupSums<'a> = ((&'a [i16], &'a [[f32; 2]]), &'a [i32]);

/// [`dot16_k`]'s group `G` of four sub-blocks (`4G..4G + 4`) of the super-block `b`, added to `acc`: `G` a constant,
/// so that every shift by a sub-block's index is by a constant (V8 makes a shift by a variable four instructions).
#[inline(always)]
fn k_group<K: SuperBlock, const G: usize>(
    b: &[u8],
    ((a4, ss), e4): GroupSums,
    (w, m): (v128, v128),
    consts: &Consts,
    acc: v128,
) -> v128 {
    // Each sub-block's codes are made where its products are taken (an array of all four went through memory).
    let codes = |j: usize| K::codes(b, 4 * G + j, consts);
    let sums = match K::CENTRE {
        // Q6_K's scaled codes: 32 products of up to 32·128·32767 could wrap a 32-bit sum, 16 cannot: each half
        // sub-block is summed on its own, and the halves are added in float32.
        0 => {
            let halves = |j: usize| {
                let q = codes(j);
                let a = &a4[32 * j..][..32];
                // SAFETY: `a` holds 32 values, so each 8-lane load at 8·v is in bounds; wasm loads need no alignment.
                let dot = |v: usize| i32x4_dot_i16x8(q[v], unsafe { v128_load(a.as_ptr().add(8 * v).cast()) });
                (in_order(i32x4_add(dot(0), dot(1))), in_order(i32x4_add(dot(2), dot(3))))
            };
            let ((l0, h0), (l1, h1), (l2, h2), (l3, h3)) = (halves(0), halves(1), halves(2), halves(3));
            f32x4_add(
                f32x4_convert_i32x4(sum4([l0, l1, l2, l3])),
                f32x4_convert_i32x4(sum4([h0, h1, h2, h3])),
            )
        }
        centre => {
            let dot = |j: usize| in_order(block_dot(&a4[32 * j..], codes(j)));
            f32x4_convert_i32x4(centred(sum4([dot(0), dot(1), dot(2), dot(3)]), e4, centre))
        }
    };
    let (xscales, xsums) = scale_sum_pairs(ss);
    let acc = f32x4_add(acc, f32x4_mul(sums, f32x4_mul(w, xscales)));
    if K::CENTRE != 0 {
        f32x4_add(acc, f32x4_mul(m, xsums))
    } else {
        acc
    }
}

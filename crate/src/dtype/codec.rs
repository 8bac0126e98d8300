//! Auto-scale, quantize (Loom's Morph), dequantize (`GetActive`), unpack (`Unpack`) and native bit-packing.
//!
//! A quantized "Version" is kept as Loom's native packed bytes (spec §4): decoding then re-encoding those bytes is
//! the identity, so a save can write them back verbatim, which is what makes re-saves byte-identical.

use super::minifloat::{e4m3_decode, e4m3_trunc, e5m2_decode, e5m2_trunc, f16_trunc, FP4_TABLE};
use super::DType;

/// Loom's auto-scale for `dt` over the float32 master (spec §2). float32 has no scale and gets 1.
pub fn auto_scale(dt: DType, master: &[f32]) -> f32 {
    match dt {
        DType::Float32 => 1.0,
        DType::Binary => {
            let sum: f64 = master.iter().map(|w| f64::from(w.abs())).sum();
            let s = (sum as f32) / (master.len() as f32);
            if s == 0.0 || master.is_empty() {
                1.0
            } else {
                s
            }
        }
        _ => {
            // NaN never compares greater, as in Loom's loop.
            let max_abs = master.iter().fold(0f32, |m, w| if w.abs() > m { w.abs() } else { m });
            let d = dt.scale_divisor().unwrap_or(1.0);
            if max_abs == 0.0 {
                1.0
            } else {
                max_abs / d
            }
        }
    }
}

/// 2^63 as f64.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// Go's float64→int64 conversion on amd64 (CVTTSD2SQ): NaN and out-of-range values become i64::MIN.
fn go_i64(x: f64) -> i64 {
    if !(-TWO_POW_63..TWO_POW_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// Go's float64→int32 conversion on amd64 (CVTTSD2SL); narrower ints truncate this value.
fn go_i32(x: f64) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// Go's float64→uint64 conversion on amd64.
fn go_u64(x: f64) -> u64 {
    if x < TWO_POW_63 {
        go_i64(x) as u64
    } else {
        (go_i64(x - TWO_POW_63) as u64) ^ (1 << 63)
    }
}

/// `rnd(f32(w / scale))` in f64, with Go's `math.Round` (halves away from zero).
#[inline]
fn rq(w: f32, scale: f32) -> f64 {
    f64::from(w / scale).round()
}

/// Clamps a rounded value into `[lo, hi]`; NaN becomes 0.
#[inline]
fn clamp_code(r: f64, lo: f64, hi: f64) -> u8 {
    if r.is_nan() {
        0
    } else {
        (r.clamp(lo, hi) as i32) as u8
    }
}

/// FP4 code nearest to `u` in Loom's scan order; ties go to the earlier code (spec §3).
fn fp4_code(u: f32) -> u8 {
    const ORDER: [u8; 12] = [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13];
    let mut best = 0u8;
    let mut best_d = (u - FP4_TABLE[0]).abs();
    for &c in &ORDER[1..] {
        let d = (u - FP4_TABLE[c as usize]).abs();
        if d < best_d {
            best = c;
            best_d = d;
        }
    }
    best
}

/// Quantizes the float32 master to `dt` with `scale` and returns Loom's native packed bytes.
pub fn quantize(dt: DType, w: &[f32], scale: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(dt.packed_len(w.len()).unwrap_or(0));
    match dt {
        DType::Float64 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&f64::from(*x).to_le_bytes())),
        DType::Float32 => w.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DType::Float16 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&f16_trunc(*x).to_le_bytes())),
        DType::BFloat16 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes())),
        DType::Fp8E4M3 => out.extend(w.iter().map(|x| e4m3_trunc(x / scale))),
        DType::Fp8E5M2 => out.extend(w.iter().map(|x| e5m2_trunc(x / scale))),
        DType::Int64 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&go_i64(rq(*x, scale)).to_le_bytes())),
        DType::Int32 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&go_i32(rq(*x, scale)).to_le_bytes())),
        DType::Int16 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&(go_i32(rq(*x, scale)) as i16).to_le_bytes())),
        // No clamp: Loom's int8 wraps modulo 256.
        DType::Int8 => out.extend(w.iter().map(|x| go_i32(rq(*x, scale)) as u8)),
        // The unsigned wide types store |round(q)|: the sign is lost.
        DType::Uint64 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&go_u64(rq(*x, scale).abs()).to_le_bytes())),
        DType::Uint32 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&(go_i64(rq(*x, scale).abs()) as u32).to_le_bytes())),
        DType::Uint16 => w
            .iter()
            .for_each(|x| out.extend_from_slice(&(go_i32(rq(*x, scale).abs()) as u16).to_le_bytes())),
        DType::Uint8 => out.extend(w.iter().map(|x| clamp_code(rq(*x, scale), 0.0, 255.0))),
        DType::Int4 => pack_into(dt, w.iter().map(|x| clamp_code(rq(*x, scale), -8.0, 7.0)), &mut out),
        DType::Uint4 => pack_into(dt, w.iter().map(|x| clamp_code(rq(*x, scale), 0.0, 15.0)), &mut out),
        DType::Fp4 => pack_into(dt, w.iter().map(|x| fp4_code(x / scale)), &mut out),
        DType::Int2 => pack_into(dt, w.iter().map(|x| clamp_code(rq(*x, scale), -2.0, 1.0)), &mut out),
        DType::Uint2 => pack_into(dt, w.iter().map(|x| clamp_code(rq(*x, scale), 0.0, 3.0)), &mut out),
        DType::Ternary => pack_into(dt, w.iter().map(|x| clamp_code(rq(*x, scale), -1.0, 1.0)), &mut out),
        DType::Binary => pack_into(
            dt,
            w.iter().map(|x| if x / scale >= 0.0 { 1u8 } else { 255u8 }),
            &mut out,
        ),
    }
    out
}

/// Packs sub-byte codes (two's complement in a u8; binary as 1 / 255) MSB-first, as Loom does.
fn pack_into(dt: DType, codes: impl Iterator<Item = u8>, out: &mut Vec<u8>) {
    let bits = dt.bits();
    let per_byte = 8 / bits;
    let mask = ((1u16 << bits) - 1) as u8;
    let mut byte = 0u8;
    let mut j = 0;
    for c in codes {
        let v = if dt == DType::Binary {
            u8::from((c as i8) > 0)
        } else {
            c & mask
        };
        byte |= v << (8 - bits * (j + 1));
        j += 1;
        if j == per_byte {
            out.push(byte);
            byte = 0;
            j = 0;
        }
    }
    if j != 0 {
        out.push(byte);
    }
}

/// Packs one code per element for a sub-byte dtype (see [`unpack_codes`]); other dtypes are returned as given.
pub fn pack_codes(dt: DType, codes: &[u8]) -> Vec<u8> {
    if dt.bits() >= 8 {
        return codes.to_vec();
    }
    let mut out = Vec::with_capacity(dt.packed_len(codes.len()).unwrap_or(0));
    pack_into(dt, codes.iter().copied(), &mut out);
    out
}

/// Unpacks native bytes of a sub-byte dtype into one code per element, padding included: signed types are
/// sign-extended two's complement, binary is 1 or 255 (-1). Other dtypes are returned as given.
pub fn unpack_codes(dt: DType, bytes: &[u8]) -> Vec<u8> {
    let bits = dt.bits();
    if bits >= 8 {
        return bytes.to_vec();
    }
    let per_byte = 8 / bits;
    let mut out = Vec::with_capacity(bytes.len() * per_byte);
    for &b in bytes {
        for j in 0..per_byte {
            let raw = (b >> (8 - bits * (j + 1))) & (((1u16 << bits) - 1) as u8);
            out.push(match dt {
                DType::Binary => {
                    if raw == 1 {
                        1
                    } else {
                        255
                    }
                }
                DType::Int4 => (((raw << 4) as i8) >> 4) as u8,
                DType::Int2 | DType::Ternary => (((raw << 6) as i8) >> 6) as u8,
                _ => raw,
            });
        }
    }
    out
}

fn le<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    bytes.chunks_exact(N).map(|c| c.try_into().unwrap())
}

/// Decodes native bytes into float32 values: at most `n` of them (padding elements are dropped).
fn decode(dt: DType, bytes: &[u8], scale: f32, zero_scale_is_one: bool, n: usize) -> Vec<f32> {
    let s = if zero_scale_is_one && scale == 0.0 { 1.0 } else { scale };
    let mut out = Vec::with_capacity(n.min(dt.unpacked_len(bytes.len())));
    match dt {
        DType::Float64 => out.extend(le::<8>(bytes).take(n).map(|b| f64::from_le_bytes(b) as f32)),
        DType::Float32 => out.extend(le::<4>(bytes).take(n).map(f32::from_le_bytes)),
        DType::Float16 => out.extend(
            le::<2>(bytes)
                .take(n)
                .map(|b| half::f16::from_bits(u16::from_le_bytes(b)).to_f32()),
        ),
        DType::BFloat16 => out.extend(
            le::<2>(bytes)
                .take(n)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16)),
        ),
        DType::Fp8E4M3 => out.extend(bytes.iter().take(n).map(|b| e4m3_decode(*b) * s)),
        DType::Fp8E5M2 => out.extend(bytes.iter().take(n).map(|b| e5m2_decode(*b) * s)),
        DType::Int64 => out.extend(le::<8>(bytes).take(n).map(|b| i64::from_le_bytes(b) as f32 * s)),
        DType::Int32 => out.extend(le::<4>(bytes).take(n).map(|b| i32::from_le_bytes(b) as f32 * s)),
        DType::Int16 => out.extend(le::<2>(bytes).take(n).map(|b| f32::from(i16::from_le_bytes(b)) * s)),
        DType::Uint64 => out.extend(le::<8>(bytes).take(n).map(|b| u64::from_le_bytes(b) as f32 * s)),
        DType::Uint32 => out.extend(le::<4>(bytes).take(n).map(|b| u32::from_le_bytes(b) as f32 * s)),
        DType::Uint16 => out.extend(le::<2>(bytes).take(n).map(|b| f32::from(u16::from_le_bytes(b)) * s)),
        DType::Int8 => out.extend(bytes.iter().take(n).map(|b| f32::from(*b as i8) * s)),
        DType::Uint8 => out.extend(bytes.iter().take(n).map(|b| f32::from(*b) * s)),
        DType::Fp4 => out.extend(
            unpack_codes(dt, bytes)
                .into_iter()
                .take(n)
                .map(|c| FP4_TABLE[c as usize] * s),
        ),
        DType::Uint4 | DType::Uint2 => {
            out.extend(unpack_codes(dt, bytes).into_iter().take(n).map(|c| f32::from(c) * s))
        }
        DType::Int4 | DType::Int2 | DType::Ternary | DType::Binary => out.extend(
            unpack_codes(dt, bytes)
                .into_iter()
                .take(n)
                .map(|c| f32::from(c as i8) * s),
        ),
    }
    out
}

/// Loom's `GetActive(dt)` on a quantized Version: the float32 values forward uses (at most `n`).
pub fn dequantize(dt: DType, bytes: &[u8], scale: f32, n: usize) -> Vec<f32> {
    decode(dt, bytes, scale, dt == DType::Fp4, n)
}

/// Loom's `Unpack`, which rebuilds the float32 master after a load (at most `n` values). It differs from
/// [`dequantize`] only for scale 0, which int8, int4, int2, ternary, binary and fp4 read as 1.
pub fn unpack(dt: DType, bytes: &[u8], scale: f32, n: usize) -> Vec<f32> {
    let zero_is_one = matches!(
        dt,
        DType::Int8 | DType::Int4 | DType::Int2 | DType::Ternary | DType::Binary | DType::Fp4
    );
    decode(dt, bytes, scale, zero_is_one, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_wraps_instead_of_clamping() {
        // q = 200 → wraps to -56.
        let b = quantize(DType::Int8, &[2.0], 0.01);
        assert_eq!(b, vec![200u8]);
        assert_eq!(dequantize(DType::Int8, &b, 0.01, 1), vec![-56.0 * 0.01]);
    }

    #[test]
    fn unsigned_types_lose_sign_or_clamp() {
        assert_eq!(quantize(DType::Uint16, &[-3.0], 1.0), 3u16.to_le_bytes());
        assert_eq!(quantize(DType::Uint8, &[-3.0], 1.0), vec![0]);
        assert_eq!(quantize(DType::Uint4, &[30.0], 1.0), vec![0xF0]);
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(quantize(DType::Int4, &[2.5, -2.5], 1.0), vec![0x3D]);
    }

    #[test]
    fn sub_byte_packing_is_msb_first() {
        assert_eq!(pack_codes(DType::Int4, &[1, 2, 3]), vec![0x12, 0x30]);
        assert_eq!(
            pack_codes(DType::Ternary, &[255, 0, 1, 1, 255]),
            vec![0b1100_0101, 0b1100_0000]
        );
        assert_eq!(pack_codes(DType::Binary, &[1, 255, 1]), vec![0b1010_0000]);
        // Padding bits of binary decode to -1 and re-encode to 0.
        let codes = unpack_codes(DType::Binary, &[0b1010_0000]);
        assert_eq!(codes, vec![1, 255, 1, 255, 255, 255, 255, 255]);
        assert_eq!(pack_codes(DType::Binary, &codes), vec![0b1010_0000]);
    }

    #[test]
    fn fp4_picks_first_nearest_code() {
        // 0.375 is equidistant from 0 and 0.75: the earlier code (0) wins; -0 is never chosen.
        assert_eq!(quantize(DType::Fp4, &[0.375, -0.1], 1.0), vec![0x00]);
        assert_eq!(quantize(DType::Fp4, &[100.0, -2.6], 1.0), vec![0x5D]);
    }

    #[test]
    fn auto_scale_rules() {
        assert_eq!(auto_scale(DType::Int8, &[0.5, -1.27]), 1.27f32 / 127.0);
        assert_eq!(auto_scale(DType::Int8, &[0.0, 0.0]), 1.0);
        assert_eq!(auto_scale(DType::Binary, &[1.0, -2.0]), 1.5);
        assert_eq!(auto_scale(DType::Float32, &[5.0]), 1.0);
    }

    #[test]
    fn zero_scale_only_matters_for_unpack() {
        let b = quantize(DType::Int4, &[3.0], 1.0);
        assert_eq!(dequantize(DType::Int4, &b, 0.0, 1), vec![0.0]);
        assert_eq!(unpack(DType::Int4, &b, 0.0, 1), vec![3.0]);
    }
}

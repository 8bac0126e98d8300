//! One block of each computable type to float32, in gguf-py's operation order (`gguf/quants.py`): products and
//! sums are separate float32 roundings (never fused), and K-quant sub-block scales are `d·sc` rounded first.

use serde::Serialize;

use super::GgmlType;

pub(super) fn half(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Dequantizes one block (`block.len() == t.block_bytes()`, `out.len() == t.block_len()`); `t` can compute.
pub(super) fn dequantize_block(t: GgmlType, block: &[u8], out: &mut [f32]) {
    match t {
        GgmlType::F32 => out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        GgmlType::F16 => out[0] = half(block),
        GgmlType::BF16 => out[0] = f32::from_bits(u32::from(u16::from_le_bytes([block[0], block[1]])) << 16),
        GgmlType::Q4_0 => {
            let d = half(block);
            for (j, &q) in block[2..18].iter().enumerate() {
                out[j] = d * f32::from(i16::from(q & 0xF) - 8);
                out[j + 16] = d * f32::from(i16::from(q >> 4) - 8);
            }
        }
        GgmlType::Q4_1 => {
            let (d, m) = (half(block), half(&block[2..]));
            for (j, &q) in block[4..20].iter().enumerate() {
                out[j] = d * f32::from(q & 0xF) + m;
                out[j + 16] = d * f32::from(q >> 4) + m;
            }
        }
        GgmlType::Q5_0 => {
            let d = half(block);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            for (v, q) in out.iter_mut().zip(q5_codes(qh, &block[6..22])) {
                *v = d * f32::from(i16::from(q) - 16);
            }
        }
        GgmlType::Q5_1 => {
            let (d, m) = (half(block), half(&block[2..]));
            let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            for (v, q) in out.iter_mut().zip(q5_codes(qh, &block[8..24])) {
                *v = d * f32::from(q) + m;
            }
        }
        GgmlType::Q8_0 => {
            let d = half(block);
            for (v, &q) in out.iter_mut().zip(&block[2..34]) {
                *v = f32::from(q as i8) * d;
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (half(block), half(&block[2..]));
            let (sc, mn) = k_scale_min(&block[4..16]);
            let (qs, qh) = k_bits(t, block);
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let scale = d * f32::from(sc[s]);
                let min = dmin * f32::from(mn[s]);
                for (l, v) in out.iter_mut().enumerate() {
                    *v = scale * f32::from(k_code(qs, qh, s, l)) - min;
                }
            }
        }
        GgmlType::Q6_K => {
            let (scales, d) = (&block[192..208], half(&block[208..]));
            // Sub-block (16 elements) e / 16 has scale d·scales[e / 16].
            for (e, v) in out.iter_mut().enumerate() {
                let q = i16::from(q6_code(block, e)) - 32;
                *v = d * f32::from(scales[e / 16] as i8) * f32::from(q);
            }
        }
        GgmlType::LoomQ4_0 => {
            let s = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
            for (j, &b) in block[4..20].iter().enumerate() {
                out[2 * j] = f32::from(nibble_i4(b)) * s;
                out[2 * j + 1] = f32::from(nibble_i4(b >> 4)) * s;
            }
        }
        _ => unreachable!("dequantize_block is only called for types that can compute"),
    }
}

/// Elements sharing one scale in a block's stored codes: value = `scale`·(code − `zero`) + `min`, in float32 in
/// that order (for the ggml types, as gguf-py computes them).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, ts_rs::TS)]
pub struct CodeGroup {
    pub len: usize,
    pub scale: f32,
    pub min: f32,
    pub zero: i32,
}

/// Appends one block's stored integer codes (one per element, in value order) and its groups of shared scale to
/// `codes` and `groups`; false for types without integer codes (floats, and types that cannot compute).
pub(super) fn block_codes(t: GgmlType, block: &[u8], codes: &mut Vec<i32>, groups: &mut Vec<CodeGroup>) -> bool {
    let group = |len, scale, min, zero| CodeGroup { len, scale, min, zero };
    match t {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let qs = if t == GgmlType::Q4_0 {
                &block[2..18]
            } else {
                &block[4..20]
            };
            codes.extend(qs.iter().map(|q| i32::from(q & 0xF)));
            codes.extend(qs.iter().map(|q| i32::from(q >> 4)));
            groups.push(if t == GgmlType::Q4_0 {
                group(32, half(block), 0.0, 8)
            } else {
                group(32, half(block), half(&block[2..]), 0)
            });
        }
        GgmlType::Q5_0 => {
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            codes.extend(q5_codes(qh, &block[6..22]).map(i32::from));
            groups.push(group(32, half(block), 0.0, 16));
        }
        GgmlType::Q5_1 => {
            let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            codes.extend(q5_codes(qh, &block[8..24]).map(i32::from));
            groups.push(group(32, half(block), half(&block[2..]), 0));
        }
        GgmlType::Q8_0 => {
            codes.extend(block[2..34].iter().map(|&q| i32::from(q as i8)));
            groups.push(group(32, half(block), 0.0, 0));
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (half(block), half(&block[2..]));
            let (sc, mn) = k_scale_min(&block[4..16]);
            let (qs, qh) = k_bits(t, block);
            for s in 0..8 {
                codes.extend((0..32).map(|l| i32::from(k_code(qs, qh, s, l))));
                // − dmin·m added is the subtraction gguf-py does (a − b = a + (−b) exactly).
                groups.push(group(32, d * f32::from(sc[s]), -(dmin * f32::from(mn[s])), 0));
            }
        }
        GgmlType::Q6_K => {
            let d = half(&block[208..]);
            codes.extend((0..256).map(|e| i32::from(q6_code(block, e))));
            groups.extend(
                block[192..208]
                    .iter()
                    .map(|&sc| group(16, d * f32::from(sc as i8), 0.0, 32)),
            );
        }
        GgmlType::LoomQ4_0 => {
            let scale = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
            let q = block[4..20].iter().flat_map(|&b| [nibble_i4(b), nibble_i4(b >> 4)]);
            codes.extend(q.map(i32::from));
            groups.push(group(32, scale, 0.0, 0));
        }
        _ => return false,
    }
    true
}

/// Q4_K/Q5_K's 4-bit codes and, for Q5_K, the bytes holding each code's bit 4.
fn k_bits(t: GgmlType, block: &[u8]) -> (&[u8], Option<&[u8]>) {
    if t == GgmlType::Q5_K {
        (&block[48..176], Some(&block[16..48]))
    } else {
        (&block[16..144], None)
    }
}

/// Q4_K/Q5_K element `l` of sub-block `s`: nibble `s % 2` of `qs[32·(s / 2) + l]`, plus bit `s` of `qh[l]` as
/// bit 4 (Q5_K).
fn k_code(qs: &[u8], qh: Option<&[u8]>, s: usize, l: usize) -> u8 {
    let q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF;
    qh.map_or(q, |qh| q | (((qh[l] >> s) & 1) << 4))
}

/// Q6_K element `e`'s 6-bit code: half h = e / 128; within it r = e % 128 takes nibble r / 64 of
/// `ql[64h + r % 64]` and bits 2·(r / 32).. of `qh[32h + r % 32]`.
pub(super) fn q6_code(block: &[u8], e: usize) -> u8 {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let (h, r) = (e / 128, e % 128);
    let lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    let hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    lo | (hi << 4)
}

/// The low nibble of `b` as a 4-bit two's-complement number.
pub(super) fn nibble_i4(b: u8) -> i8 {
    (((b & 0xF) ^ 8) as i8) - 8
}

/// Q5_0/Q5_1's 32 five-bit codes: element `j < 16` is the low nibble of `qs[j]`, `j + 16` its high nibble; bit
/// `j` of `qh` is bit 4.
fn q5_codes(qh: u32, qs: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let low = qs.iter().map(|q| q & 0xF);
    let high = qs.iter().map(|q| q >> 4);
    low.chain(high)
        .enumerate()
        .map(move |(j, q)| q | ((((qh >> j) & 1) as u8) << 4))
}

/// Q4_K/Q5_K's eight sub-block scales `d·sc` and minima `dmin·m` as float32, rounded as gguf-py rounds them.
#[cfg(target_arch = "x86_64")]
pub(super) fn k_scales(block: &[u8]) -> ([f32; 8], [f32; 8]) {
    let (d, dmin) = (half(block), half(&block[2..]));
    let (sc, mn) = k_scale_min(&block[4..16]);
    (sc.map(|s| d * f32::from(s)), mn.map(|m| dmin * f32::from(m)))
}

/// Q4_K/Q5_K's eight 6-bit sub-block scales and mins from their 12 packed bytes (gguf-py's `get_scale_min`). Inlined
/// always: the AVX2 decode calls it once a super-block (called, 19% of a Q4_K decode).
#[inline(always)]
pub(super) fn k_scale_min(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0; 8];
    let mut mn = [0; 8];
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        mn[j] = s[j + 4] & 0x3F;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}

/// A half's bits as float32, branch-free (wasm has no conversion instruction; the `half` crate's software path
/// branches on every class): the 15 magnitude bits shifted into float32's exponent and mantissa fields, times
/// 2^112 to rebias the exponent (which also normalises subnormals exactly); an all-ones exponent (∞, NaN) is made
/// float32's all-ones exponent; then the sign.
#[cfg(any(test, all(target_arch = "wasm32", target_feature = "simd128")))]
pub(super) fn half_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let mut bits = (f32::from_bits((h & 0x7FFF) << 13) * f32::from_bits(0x7780_0000)).to_bits();
    if h & 0x7C00 == 0x7C00 {
        bits |= 0x7F80_0000;
    }
    f32::from_bits(bits | (h & 0x8000) << 16)
}

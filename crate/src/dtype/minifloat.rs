//! Loom's truncating float16 / FP8 encoders, its FP8 decoders and its (non-OCP) FP4 table (spec §3).

/// Loom's FP4 code table: codes 0–7 are positive, 8–15 their negatives. Not the OCP E2M1 grid.
pub const FP4_TABLE: [f32; 16] = [
    0.0,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    f32::INFINITY,
    f32::NAN,
    -0.0,
    -0.75,
    -1.0,
    -1.5,
    -2.0,
    -3.0,
    f32::NEG_INFINITY,
    f32::NAN,
];

fn split(x: f32) -> (u32, i32, u32) {
    let b = x.to_bits();
    (b >> 31, ((b >> 23) & 0xFF) as i32, b & 0x7F_FFFF)
}

/// float32 → IEEE half bits by truncation: no rounding, no subnormals, NaN becomes Inf.
pub fn f16_trunc(x: f32) -> u16 {
    let (sign, exp8, mant) = split(x);
    let sign = (sign << 15) as u16;
    let e = exp8 - 127 + 15;
    if (exp8 == 0 && mant == 0) || e <= 0 {
        sign
    } else if e >= 31 {
        sign | 0x7C00
    } else {
        sign | ((e as u16) << 10) | (mant >> 13) as u16
    }
}

/// float32 → FP8 E4M3 by truncation; overflow saturates to the code for 480.
pub fn e4m3_trunc(x: f32) -> u8 {
    let (sign, exp8, mant) = split(x);
    let sign = (sign << 7) as u8;
    let e = exp8 - 127 + 7;
    if e <= 0 {
        sign
    } else if e >= 15 {
        sign | 0x7F
    } else {
        sign | ((e as u8) << 3) | (mant >> 20) as u8
    }
}

/// FP8 E4M3 → float32 as Loom decodes it: exponent 15 is an ordinary exponent (no NaN).
pub fn e4m3_decode(b: u8) -> f32 {
    let sign = u32::from(b & 0x80) << 24;
    let exp = u32::from((b >> 3) & 0xF);
    let mant = u32::from(b & 7);
    if exp == 0 {
        if mant == 0 {
            return f32::from_bits(sign);
        }
        return f32::from_bits(sign | (120 << 23) | (mant << 20)) * 0.125;
    }
    f32::from_bits(sign | ((exp + 120) << 23) | (mant << 20))
}

/// float32 → FP8 E5M2 by truncation; overflow becomes Inf.
pub fn e5m2_trunc(x: f32) -> u8 {
    let (sign, exp8, mant) = split(x);
    let sign = (sign << 7) as u8;
    let e = exp8 - 127 + 15;
    if e <= 0 {
        sign
    } else if e >= 31 {
        sign | 0x7C
    } else {
        sign | ((e as u8) << 2) | (mant >> 21) as u8
    }
}

/// FP8 E5M2 → float32 as Loom decodes it (exponent 0 with a mantissa is read as a normal number).
pub fn e5m2_decode(b: u8) -> f32 {
    let sign = u32::from(b & 0x80) << 24;
    let exp = u32::from((b >> 2) & 0x1F);
    let mant = u32::from(b & 3);
    if exp == 31 {
        return if mant == 0 {
            f32::from_bits(sign | 0x7F80_0000)
        } else {
            f32::NAN
        };
    }
    if exp == 0 && mant == 0 {
        return f32::from_bits(sign);
    }
    f32::from_bits(sign | ((exp + 112) << 23) | (mant << 21))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_trunc_edges() {
        assert_eq!(f16_trunc(0.0), 0);
        assert_eq!(f16_trunc(-0.0), 0x8000);
        assert_eq!(f16_trunc(1.0), 0x3C00);
        // 1 + 1.5 half-ulps rounds to 2 ulps in IEEE; Loom truncates to 1.
        assert_eq!(f16_trunc(1.0 + 2f32.powi(-10) + 2f32.powi(-11)), 0x3C00 | 1);
        assert_eq!(f16_trunc(1e-6), 0); // would be a half subnormal: flushed
        assert_eq!(f16_trunc(70000.0), 0x7C00);
        assert_eq!(f16_trunc(f32::NAN), 0x7C00);
        assert_eq!(f16_trunc(-f32::INFINITY), 0xFC00);
    }

    #[test]
    fn e4m3_saturates_to_480_and_decodes_subnormals() {
        assert_eq!(e4m3_decode(e4m3_trunc(1e6)), 480.0);
        assert_eq!(e4m3_decode(e4m3_trunc(-1e6)), -480.0);
        assert_eq!(e4m3_decode(e4m3_trunc(1.0)), 1.0);
        assert_eq!(e4m3_decode(e4m3_trunc(1.2)), 1.125);
        // Loom reads exponent-0 codes as 2^-7·(1 + m/8)·0.125, not as IEEE subnormals.
        assert_eq!(e4m3_decode(0x01), 1.125 * 2f32.powi(-10));
        assert_eq!(e4m3_decode(e4m3_trunc(0.001)), 0.0);
    }

    #[test]
    fn e5m2_overflow_is_inf() {
        assert_eq!(e5m2_decode(e5m2_trunc(1e6)), f32::INFINITY);
        assert_eq!(e5m2_decode(e5m2_trunc(-1.75)), -1.75);
        assert!(e5m2_decode(0x7D).is_nan());
        assert_eq!(e5m2_decode(0x80).to_bits(), (-0.0f32).to_bits());
    }
}

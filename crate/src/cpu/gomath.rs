//! Go's `math` functions as Loom (welvet, linux/amd64, Go 1.26) evaluates them, bit for bit.
//!
//! Rust's `f64::exp`/`tanh`/`powf`/`sin`/`cos` call the platform libm (glibc natively, a musl port on wasm32), whose
//! last bits differ from Go's. Loom's forward feeds these values into f64 chains that are rounded to f32 only at the
//! end, so a one-ulp difference can flip an output bit. These are re-implementations of the algorithms Go uses:
//! - `exp`: the amd64 assembly (Shibata's method, from SLEEF), taking its FMA branch, which every x86-64 CPU with
//!   AVX and FMA runs.
//! - `log`: the amd64 assembly (FreeBSD's `e_log.c` without FMA).
//! - `tanh`, `sin`, `cos` (with Payne–Hanek reduction beyond 2^29): the portable Go code (from Cephes); Go does not
//!   fuse multiply-adds on amd64.
//!
//! Every multiply-add below is deliberately either fused (`mul_add`) or not, as Go's machine code does.

#![allow(clippy::excessive_precision)] // the constants keep the digits of their sources

const SIGN: u64 = 1 << 63;
const POS_INF: u64 = 0x7FF0_0000_0000_0000;
const NEG_INF: u64 = 0xFFF0_0000_0000_0000;

/// `math.Exp` on amd64 with FMA.
pub(crate) fn exp(x: f64) -> f64 {
    const LN2U: f64 = 0.693_147_180_559_662_956_511_601_805_686_950_683_593_75;
    const LN2L: f64 = 0.282_352_905_630_315_771_225_884_481_750_134_360_255_254_120_68e-12;
    const OVERFLOW: f64 = 7.097_827_128_933_84e2;
    // Taylor coefficients 1/8! … 1/3!, then 1/2 and 1.
    const C: [f64; 8] = [
        2.480_158_730_158_730_158_7e-5,
        1.984_126_984_126_984_127e-4,
        1.388_888_888_888_888_888_9e-3,
        8.333_333_333_333_333_333_3e-3,
        4.166_666_666_666_666_666_7e-2,
        1.666_666_666_666_666_666_7e-1,
        0.5,
        1.0,
    ];
    let bits = x.to_bits();
    if bits & !SIGN >= POS_INF {
        // -Inf → 0; +Inf and NaN are returned unchanged.
        return if bits == NEG_INF { 0.0 } else { x };
    }
    if x > OVERFLOW {
        return f64::INFINITY;
    }
    // CVTSD2SL: round half to even; out of range gives the "integer indefinite" i32::MIN.
    let t = (std::f64::consts::LOG2_E * x).round_ties_even();
    let k = if (-2_147_483_648.0..=2_147_483_647.0).contains(&t) {
        t as i32
    } else {
        i32::MIN
    };
    let kf = f64::from(k);
    let mut r = (-kf).mul_add(LN2U, x);
    r = (-kf).mul_add(LN2L, r);
    r *= 0.0625;
    let mut p = C[0];
    for c in &C[1..] {
        p = p.mul_add(r, *c);
    }
    r *= p;
    // Four squarings of (1 + r) - 1, the last one fused with the final + 1.
    for _ in 0..3 {
        r *= r + 2.0;
    }
    r = r.mul_add(r + 2.0, 1.0);
    let biased = k + 0x3FF;
    if biased <= 0 {
        // Subnormal: scale by 2^(k+1022), then by 2^-1022 (two roundings); below 2^-1074 or so, 0.
        if biased < -52 {
            return 0.0;
        }
        return r * f64::from_bits(((biased + 0x3FE) as u64) << 52) * f64::from_bits(1 << 52);
    }
    if biased >= 0x7FF {
        return f64::INFINITY;
    }
    r * f64::from_bits((biased as u64) << 52)
}

/// `math.Log` on amd64.
pub(crate) fn log(x: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    const L: [f64; 7] = [
        6.666_666_666_666_735_130e-1,
        3.999_999_999_940_941_908e-1,
        2.857_142_874_366_239_149e-1,
        2.222_219_843_214_978_396e-1,
        1.818_357_216_161_805_012e-1,
        1.531_383_769_920_937_332e-1,
        1.479_819_860_511_658_591e-1,
    ];
    let bits = x.to_bits();
    if bits & !SIGN == 0 {
        return f64::NEG_INFINITY;
    }
    if (bits as i64) < 0 {
        return f64::from_bits(0x7FF8_0000_0000_0001);
    }
    if bits >= POS_INF {
        return x;
    }
    // The assembly's frexp ignores subnormals: the mantissa bits are read as if the number were normal.
    let mut f1 = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0.5f64.to_bits());
    let mut k = f64::from(((bits >> 52) & 0x7FF) as i32 - 0x3FE);
    // CMPSD's "not less than" (HSqrt2 ≥ f1): unlike the Go source, f1 == √2/2 is adjusted too.
    if f1 <= std::f64::consts::FRAC_1_SQRT_2 {
        k -= 1.0;
        f1 *= 2.0;
    }
    let f = f1 - 1.0;
    let s = f / (2.0 + f);
    let s2 = s * s;
    let s4 = s2 * s2;
    let t1 = s2 * (((L[6] * s4 + L[4]) * s4 + L[2]) * s4 + L[0]);
    let t2 = s4 * ((L[5] * s4 + L[3]) * s4 + L[1]);
    let r = t1 + t2;
    let hfsq = 0.5 * f * f;
    k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)
}

/// `math.Tanh`.
pub(crate) fn tanh(x: f64) -> f64 {
    const MAXLOG: f64 = 8.802_969_193_111_305_429_598_8e1;
    const P: [f64; 3] = [
        -9.643_991_794_250_522_386_28e-1,
        -9.928_772_310_019_185_865_64e1,
        -1.614_687_684_417_084_479_52e3,
    ];
    const Q: [f64; 3] = [
        1.128_116_784_916_329_314_02e2,
        2.235_488_390_601_004_485_83e3,
        4.844_063_053_251_254_860_48e3,
    ];
    let z = x.abs();
    if z > 0.5 * MAXLOG {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    if z >= 0.625 {
        let s = exp(2.0 * z);
        let z = 1.0 - 2.0 / (s + 1.0);
        return if x < 0.0 { -z } else { z };
    }
    if x == 0.0 {
        return x;
    }
    let s = x * x;
    x + x * s * ((P[0] * s + P[1]) * s + P[2]) / (((s + Q[0]) * s + Q[1]) * s + Q[2])
}

/// `1/(1+math.Exp(-x))`, the logistic function as Loom writes it.
pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + exp(-x))
}

/// `math.Pow(x, y)` for what RoPE asks: `x > 0`, `0 ≤ y < 1`.
pub(crate) fn pow_frac(x: f64, y: f64) -> f64 {
    debug_assert!(x > 0.0 && (0.0..1.0).contains(&y));
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if x.is_infinite() {
        return x;
    }
    if y == 0.5 {
        return x.sqrt();
    }
    // Go: yi, yf := Modf(y) gives (0, y); a fraction above 1/2 borrows one from the integer part.
    let (yf, yi) = if y > 0.5 { (y - 1.0, 1) } else { (y, 0) };
    let mut a1 = exp(yf * log(x));
    let mut ae = 0i64;
    if yi == 1 {
        let (x1, xe) = frexp(x);
        a1 *= x1;
        ae += xe;
    }
    ldexp(a1, ae)
}

/// `math.Frexp` for finite non-zero `x`: `x = frac · 2^exp` with `|frac|` in [1/2, 1).
fn frexp(x: f64) -> (f64, i64) {
    let (f, e) = if x.abs() < f64::MIN_POSITIVE {
        (x * (1u64 << 52) as f64, -52)
    } else {
        (x, 0)
    };
    let bits = f.to_bits();
    let exp = e + ((bits >> 52) & 0x7FF) as i64 - 1022;
    (f64::from_bits((bits & !(0x7FF << 52)) | (1022 << 52)), exp)
}

/// `math.Ldexp`: `frac · 2^exp`, rounding once when the result is subnormal.
fn ldexp(frac: f64, exp: i64) -> f64 {
    if frac == 0.0 || !frac.is_finite() {
        return frac;
    }
    let (f, e) = if frac.abs() < f64::MIN_POSITIVE {
        (frac * (1u64 << 52) as f64, -52)
    } else {
        (frac, 0)
    };
    let bits = f.to_bits();
    let exp = exp.saturating_add(e + ((bits >> 52) & 0x7FF) as i64 - 1023);
    if exp < -1075 {
        return 0.0f64.copysign(frac);
    }
    if exp > 1023 {
        return f64::INFINITY.copysign(frac);
    }
    let (m, exp) = if exp < -1022 {
        (1.0 / (1u64 << 53) as f64, exp + 53)
    } else {
        (1.0, exp)
    };
    m * f64::from_bits((bits & !(0x7FF << 52)) | (((exp + 1023) as u64) << 52))
}

/// `math.Cos`.
pub(crate) fn cos(x: f64) -> f64 {
    if !x.is_finite() {
        return f64::NAN;
    }
    let (mut j, z) = reduce(x.abs());
    let mut sign = false;
    if j > 3 {
        j -= 4;
        sign = !sign;
    }
    if j > 1 {
        sign = !sign;
    }
    let y = if j == 1 || j == 2 { sin_poly(z) } else { cos_poly(z) };
    if sign {
        -y
    } else {
        y
    }
}

/// `math.Sin`.
pub(crate) fn sin(x: f64) -> f64 {
    if x == 0.0 || x.is_nan() {
        return x;
    }
    if x.is_infinite() {
        return f64::NAN;
    }
    let mut sign = x < 0.0;
    let (mut j, z) = reduce(x.abs());
    if j > 3 {
        sign = !sign;
        j -= 4;
    }
    let y = if j == 1 || j == 2 { cos_poly(z) } else { sin_poly(z) };
    if sign {
        -y
    } else {
        y
    }
}

fn sin_poly(z: f64) -> f64 {
    const S: [f64; 6] = [
        1.589_623_015_765_465_680_60e-10,
        -2.505_074_776_285_780_728_66e-8,
        2.755_731_362_138_572_452_13e-6,
        -1.984_126_982_958_953_859_96e-4,
        8.333_333_333_322_118_588_78e-3,
        -1.666_666_666_666_663_072_95e-1,
    ];
    let zz = z * z;
    z + z * zz * (((((S[0] * zz + S[1]) * zz + S[2]) * zz + S[3]) * zz + S[4]) * zz + S[5])
}

fn cos_poly(z: f64) -> f64 {
    const C: [f64; 6] = [
        -1.135_853_652_138_768_173_00e-11,
        2.087_570_084_197_473_167_78e-9,
        -2.755_731_417_929_673_881_12e-7,
        2.480_158_728_885_170_453_48e-5,
        -1.388_888_888_887_305_641_16e-3,
        4.166_666_666_666_659_292_18e-2,
    ];
    let zz = z * z;
    1.0 - 0.5 * zz + zz * zz * (((((C[0] * zz + C[1]) * zz + C[2]) * zz + C[3]) * zz + C[4]) * zz + C[5])
}

/// Octant `j` (0..8) and remainder `z` of `x ≥ 0` modulo π/4, zeros mapped to the origin.
fn reduce(x: f64) -> (u64, f64) {
    const PI4A: f64 = 7.853_981_256_484_985_351_56e-1;
    const PI4B: f64 = 3.774_894_707_930_798_176_68e-8;
    const PI4C: f64 = 2.695_151_429_079_059_526_45e-15;
    const REDUCE_THRESHOLD: f64 = (1u64 << 29) as f64;
    if x >= REDUCE_THRESHOLD {
        return trig_reduce(x);
    }
    // Go's constant 4/Pi is 4/π rounded once: twice the rounded 2/π.
    let mut j = (x * (2.0 * std::f64::consts::FRAC_2_PI)) as u64;
    let mut y = j as f64;
    if j & 1 == 1 {
        j += 1;
        y += 1.0;
    }
    (j & 7, ((x - y * PI4A) - y * PI4B) - y * PI4C)
}

/// Payne–Hanek reduction by π/4 for `x ≥ 2^29` (Go's `trigReduce`).
fn trig_reduce(x: f64) -> (u64, f64) {
    // The binary digits of 4/π: 4/π = Σ M_PI4[i]·2^(−64·i).
    const M_PI4: [u64; 20] = [
        0x0000_0000_0000_0001,
        0x45f3_06dc_9c88_2a53,
        0xf84e_afa3_ea69_bb81,
        0xb6c5_2b32_7887_2083,
        0xfca2_c757_bd77_8ac3,
        0x6e48_dc74_849b_a5c0,
        0x0c92_5dd4_13a3_2439,
        0xfc3b_d639_6253_4e7d,
        0xd104_6bea_5d76_8909,
        0xd338_e04d_68be_fc82,
        0x7323_ac73_06a6_73e9,
        0x3908_bf17_7bf2_5076,
        0x3ff1_2fff_bc0b_301f,
        0xde5e_2316_b414_da3e,
        0xda6c_fd9e_4f96_136e,
        0x9e8c_7ecd_3cbf_d45a,
        0xea4f_758f_d7cb_e2f6,
        0x7a0e_73ef_14a5_25d4,
        0xd7f6_bf62_3f1a_ba10,
        0xac06_608d_f8f6_d757,
    ];
    let bits = x.to_bits();
    // x = ix · 2^exp with exp ≥ 29 − 52, so exp + 61 > 0.
    let exp = ((bits >> 52) & 0x7FF) as usize + 61 - 1023 - 52;
    let ix = (bits & !(0x7FF << 52)) | (1 << 52);
    let (digit, shift) = (exp / 64, (exp % 64) as u32);
    let join = |i: usize| (M_PI4[i] << shift) | M_PI4[i + 1].checked_shr(64 - shift).unwrap_or(0);
    let (z0, z1, z2) = (join(digit), join(digit + 1), join(digit + 2));
    let mul = |a: u64, b: u64| {
        let p = u128::from(a) * u128::from(b);
        ((p >> 64) as u64, p as u64)
    };
    let (z2hi, _) = mul(z2, ix);
    let (z1hi, z1lo) = mul(z1, ix);
    let z0lo = z0.wrapping_mul(ix);
    let (lo, carry) = z1lo.overflowing_add(z2hi);
    let hi = z0lo.wrapping_add(z1hi).wrapping_add(u64::from(carry));
    let mut j = hi >> 61;
    let hi = (hi << 3) | (lo >> 61);
    // Go's shifts by 64 or more give 0.
    let lz = hi.leading_zeros() + 1;
    let e = (1023 - u64::from(lz)) << 52;
    let frac =
        (hi.checked_shl(lz).unwrap_or(0) | 64u32.checked_sub(lz).and_then(|s| lo.checked_shr(s)).unwrap_or(0)) >> 12;
    let mut z = f64::from_bits(frac | e);
    if j & 1 == 1 {
        j = (j + 1) & 7;
        z -= 1.0;
    }
    (j, z * std::f64::consts::FRAC_PI_4)
}

#[cfg(test)]
mod tests {
    /// `(function, x, y, Go's result)` as f64 bits, printed by Go 1.19 on linux/amd64 with FMA (the same code as
    /// Go 1.26's): mostly arguments where Rust's libm answers differently, plus the edges (overflow, subnormal and
    /// underflowing `exp`, Payne–Hanek `sin`/`cos`). 2 million such arguments matched when this port was written.
    const GO: [(&str, u64, u64, u64); 44] = [
        ("exp", 0x4012260932257c8b, 0x0000000000000000, 0x40575b1cf933d3af),
        ("exp", 0xbff13c3dcbb0614c, 0x0000000000000000, 0x3fd5cb7e28f3b9fb),
        ("exp", 0xbff0663dc230b6f8, 0x0000000000000000, 0x3fd6f6bfc7794a46),
        ("exp", 0x3ffa3e85e031df12, 0x0000000000000000, 0x4014a04a1a6a93be),
        ("exp", 0xc0288f122e3fdfb3, 0x0000000000000000, 0x3ed37cf20935bc2d),
        ("exp", 0x400edee50c7b4d9d, 0x0000000000000000, 0x4047b47e32f15fcd),
        ("exp", 0x40862e6666666666, 0x0000000000000000, 0x7ff0000000000000),
        ("exp", 0xc086b12adcf430e2, 0x0000000000000000, 0x000000000540838c),
        ("exp", 0xc08749999999999a, 0x0000000000000000, 0x0000000000000000),
        ("exp", 0xfff0000000000000, 0x0000000000000000, 0x0000000000000000),
        ("log", 0x3fe38eea42f57544, 0x0000000000000000, 0xbfdf8277a39f1f08),
        ("log", 0x3ff4eb3115b392a0, 0x0000000000000000, 0x3fd127d2c33c5270),
        ("log", 0x3ffa2a88d4592a50, 0x0000000000000000, 0x3fdf7aed5e1f9378),
        ("log", 0x3fcc2c5a473ae120, 0x0000000000000000, 0xbff837f0a4244540),
        ("log", 0x400bf1082c413aca, 0x0000000000000000, 0x3ff402c1471140ba),
        ("log", 0x3fb57770cbc63810, 0x0000000000000000, 0xc003d4569f00e6b6),
        ("tanh", 0xbfcf9799acea7fd4, 0x0000000000000000, 0xbfcef747f983ea67),
        ("tanh", 0xbff3b7f5f8fb50d6, 0x0000000000000000, 0xbfeafc215924cdd0),
        ("tanh", 0xbfe03c3c7d789dc0, 0x0000000000000000, 0xbfddf1c0167988b0),
        ("tanh", 0xbfef6993cf14c824, 0x0000000000000000, 0xbfe81eeac0d1c370),
        ("tanh", 0x3febe9d822bd0d54, 0x0000000000000000, 0x3fe67b320aea37d3),
        ("tanh", 0xbfee5c56e5aafdaa, 0x0000000000000000, 0xbfe7a7be762618d2),
        ("sin", 0x40676fced2313900, 0x0000000000000000, 0xbfeaf43cded4457f),
        ("sin", 0x40b5a9bf1c4f97f2, 0x0000000000000000, 0xbfe7bb6802e45030),
        ("sin", 0x42012e4f78d5bae4, 0x0000000000000000, 0xbfdd0bc9d0a3c67e),
        ("sin", 0x401d058f4b9684da, 0x0000000000000000, 0x3fea6fd6d3fda982),
        ("sin", 0x408585e163da4c26, 0x0000000000000000, 0xbfe54024a253b25f),
        ("sin", 0x40727a17b379acc3, 0x0000000000000000, 0x3fd4329acc595326),
        ("sin", 0x430c6bf526340000, 0x0000000000000000, 0x3feb76f88136ceba),
        ("sin", 0x41e65a0bc0000000, 0x0000000000000000, 0x3fef958b458cc91a),
        ("cos", 0xc0020b82076ffe76, 0x0000000000000000, 0xbfe43dbba0de0d0c),
        ("cos", 0x3ff80838095734d2, 0x0000000000000000, 0x3fb198a6b101f939),
        ("cos", 0x3ff847bce3e08a36, 0x0000000000000000, 0x3fab448037c3cfc3),
        ("cos", 0x409ec16f9e737f61, 0x0000000000000000, 0xbfc347d724383e4e),
        ("cos", 0x40d804ba30b0ac2d, 0x0000000000000000, 0xbfea0ce53358aa28),
        ("cos", 0xc585349cea4e1618, 0x0000000000000000, 0x3fec4382ca0773a7),
        ("cos", 0x7e37e43c8800759c, 0x0000000000000000, 0xbfe2699022adc4c1),
        ("cos", 0x41e65a0bc0000000, 0x0000000000000000, 0xbfc4917f746fa4f0),
        ("pow", 0x407b3f5cba1d16a5, 0x3fd8d3dcb08d3dcb, 0x402521f34be10778),
        ("pow", 0x40c3880000000000, 0x3feb400000000000, 0x40a3e897ef59e4e4),
        ("pow", 0x411e848200000000, 0x3fdae78a99461d5a, 0x406f17ada208cee8),
        ("pow", 0x3f7ec0c2eb74d539, 0x3fe72a67a80c907e, 0x3f9dabe0db5f73df),
        ("pow", 0x4127c10f9a05a68d, 0x3f96816816816817, 0x3ff58eb2b67ebfbb),
        ("pow", 0x40c3880000000000, 0x3fe8000000000000, 0x408f3ffffffffffe),
    ];

    #[test]
    fn matches_go_bit_for_bit() {
        for (f, x, y, want) in GO {
            let (x, y) = (f64::from_bits(x), f64::from_bits(y));
            let got = match f {
                "exp" => super::exp(x),
                "log" => super::log(x),
                "tanh" => super::tanh(x),
                "sin" => super::sin(x),
                "cos" => super::cos(x),
                _ => super::pow_frac(x, y),
            };
            assert_eq!(
                got.to_bits(),
                want,
                "{f}({x:e}, {y}) = {got:e}, Go gives {:e}",
                f64::from_bits(want)
            );
        }
    }

    #[test]
    fn special_values_follow_go() {
        assert_eq!(super::exp(f64::INFINITY), f64::INFINITY);
        assert!(super::exp(f64::NAN).is_nan());
        assert_eq!(super::log(0.0), f64::NEG_INFINITY);
        assert!(super::log(-1.0).is_nan());
        assert_eq!(super::tanh(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(super::tanh(50.0), 1.0);
        assert!(super::sin(f64::INFINITY).is_nan() && super::cos(f64::NAN).is_nan());
        assert_eq!(super::pow_frac(10000.0, 0.0), 1.0);
        assert_eq!(super::pow_frac(f64::INFINITY, 0.25), f64::INFINITY);
        assert_eq!(super::pow_frac(16.0, 0.5), 4.0);
        assert_eq!(super::sigmoid(0.0), 0.5);
    }
}

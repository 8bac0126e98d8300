//! The decoder's exponentials (SwiGLU's silu, attention's softmax) against float64 math over the range the
//! decoder meets, natively (libm's `expf`) and in wasm (a four-lane polynomial: `tests-wasm` runs this file too).

use loom_wasm::cpu::ops::{silu_mul, softmax};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Inputs from −120 to 120 in uneven steps, and the edges of float32's exponential.
fn inputs() -> Vec<f32> {
    let mut x: Vec<f32> = (0..2401)
        .map(|i| -120.0 + i as f32 * 0.1 + (i % 7) as f32 * 1e-3)
        .collect();
    x.extend([0.0, -0.0, 1e-30, -1e-30, 87.0, -87.0, 88.5, -88.5, 0.5, -0.5]);
    x
}

#[test]
fn silu_is_within_float32_rounding_of_float64() {
    let x = inputs();
    let up: Vec<f32> = x.iter().enumerate().map(|(i, _)| 1.0 + (i % 5) as f32 * 0.25).collect();
    let mut got = x.clone();
    silu_mul(&mut got, &up);
    for ((&x, &u), &got) in x.iter().zip(&up).zip(&got) {
        let (x64, u64) = (f64::from(x), f64::from(u));
        let want = x64 / (1.0 + (-x64).exp()) * u64;
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= 1e-6 * want.abs() + 1e-30,
            "silu({x}) · {u} = {got}, float64 {want}"
        );
    }
}

#[test]
fn softmax_is_within_float32_rounding_of_float64() {
    // Rows of attention-like scores: wide and narrow spreads, one dominant value, odd lengths (a lane tail).
    for (len, spread) in [(1, 1.0), (3, 0.5), (37, 4.0), (64, 30.0), (129, 120.0)] {
        let x: Vec<f32> = (0..len)
            .map(|i| ((i * 7919) % 97) as f32 / 97.0 * spread - spread / 2.0)
            .collect();
        let mut got = x.clone();
        softmax(&mut got);
        let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let total: f64 = x.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        for (&x, &got) in x.iter().zip(&got) {
            let want = (f64::from(x) - max).exp() / total;
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= 2e-6 * want + 1e-38,
                "softmax of {len} values, {x}: {got}, float64 {want}"
            );
        }
        assert!((got.iter().map(|&v| f64::from(v)).sum::<f64>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn a_nan_stays_nan() {
    let mut g = [1.0, f32::NAN, -2.0, 3.0, 0.5];
    silu_mul(&mut g, &[1.0; 5]);
    assert!(g[1].is_nan() && g.iter().enumerate().all(|(i, v)| i == 1 || v.is_finite()));
    let mut s = [0.0, f32::NAN, 1.0, 2.0, 3.0];
    softmax(&mut s);
    assert!(s[1].is_nan());
}

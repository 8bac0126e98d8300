//! Device-agnostic helpers of the GPU suites: reproducible data, one-layer networks and their CPU forward, and the
//! tolerance checks that print each kernel's largest error (to stderr natively, to the console in the browser).
#![allow(dead_code, unused_macros)]

use loom_wasm::cpu::{CpuModel, Tensor};
use loom_wasm::formats::loom_json;
use loom_wasm::network::{Network, WeightStore};

/// Prints a line: stderr natively, the browser console (what the test runner shows) in wasm.
macro_rules! note {
    ($($arg:tt)*) => {{
        #[cfg(target_arch = "wasm32")]
        wasm_bindgen_test::console_log!($($arg)*);
        #[cfg(not(target_arch = "wasm32"))]
        eprintln!($($arg)*);
    }};
}

/// A file of `testdata/`, embedded at compile time (the browser has no file system). Both test crates sit one
/// level below the repository root.
macro_rules! testdata {
    ($path:expr) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/", $path))
    };
}

/// [`testdata!`] as bytes.
macro_rules! testdata_bytes {
    ($path:expr) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/", $path))
    };
}

/// `n` reproducible values uniform in `[lo, hi)` (SplitMix64).
pub fn data(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            lo + (hi - lo) * ((z >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// A one-layer network from one layer's architecture JSON (weights seeded uniform in [-0.1, 0.1]).
pub fn one_layer(layer_json: &str) -> Network {
    let arch = format!(
        r#"{{"depth":1,"rows":1,"cols":1,"layers_per_cell":1,"layers":[{{"z":0,"y":0,"x":0,"l":0,{layer_json}}}]}}"#
    );
    loom_json::build(arch.as_bytes()).unwrap()
}

/// Replaces the only layer's weights.
pub fn with_weights(mut net: Network, w: Vec<f32>) -> Network {
    net.layers[0].weights = Some(WeightStore::from_master(w));
    net
}

/// The only layer with its weights morphed to `dt` (quantized and dequantized as Loom stores them).
pub fn with_dtype(mut net: Network, dt: loom_wasm::DType) -> Network {
    net.layers[0].weights.as_mut().unwrap().morph(dt);
    net.layers[0].dtype = dt;
    net
}

/// The CPU forward of `net` on `x` shaped `shape`.
pub fn cpu(net: &Network, x: &[f32], shape: &[usize]) -> Tensor {
    CpuModel::new(net.clone()).forward(x, shape).unwrap()
}

/// Largest |gpu − cpu| seen by [`close`].
#[derive(Default, Clone, Copy)]
pub struct MaxErr {
    pub abs: f32,
    pub rel: f32,
}

/// Asserts `|gpu − cpu| ≤ abs + rel·|cpu|` everywhere (NaN must match NaN) and prints the largest errors.
pub fn close(what: &str, gpu: &[f32], cpu: &[f32], abs: f32, rel: f32) -> MaxErr {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    let mut m = MaxErr::default();
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        if c.is_nan() || g.is_nan() {
            assert!(c.is_nan() && g.is_nan(), "{what}[{i}]: gpu {g} cpu {c}");
            continue;
        }
        if g == c {
            continue;
        }
        let err = (g - c).abs();
        m.abs = m.abs.max(err);
        if *c != 0.0 {
            m.rel = m.rel.max(err / c.abs());
        }
        assert!(
            err <= abs + rel * c.abs(),
            "{what}[{i}]: gpu {g} cpu {c} (|err| {err:e})"
        );
    }
    note!(
        "{what}: {} values, max |err| {:.3e}, max rel {:.3e} (tolerance {abs:e} + {rel:e}·|cpu|)",
        gpu.len(),
        m.abs,
        m.rel
    );
    m
}

/// Asserts bit-identical values.
pub fn exact(what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            g.to_bits() == c.to_bits() || (g.is_nan() && c.is_nan()),
            "{what}[{i}]: gpu {g} cpu {c}"
        );
    }
    note!("{what}: {} values, bit-identical", gpu.len());
}

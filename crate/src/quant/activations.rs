//! Decode activations as 16-bit integers, per block of 32: `x ≈ a · scale`, with each block's exact float32 sum
//! kept for the Q4_1 minimum. Rounding to 1/65534 of a block's largest magnitude moves a dot by at most
//! `Σ|w|·scale/2`, about 256 times less than llama.cpp's 8-bit activations (SmolLM2's logits move by 0.003; see
//! BENCHMARKS.md). In exchange, the products are exact integer dots of 16-bit pairs (`i32x4.dot_i16x8_s`), which
//! make wasm decode 1.6× faster. (On AVX2 the same scheme measured slower than the float32 FMA kernels, so native
//! code does not use it.)

use super::GgmlType;

/// One token's activations, rounded per block of 32.
pub(super) struct Activations16 {
    pub(super) a: Vec<i16>,
    pub(super) scale: Vec<f32>,
    pub(super) sum: Vec<f32>,
}

/// The block types the 16-bit kernels compute.
pub(super) fn has_16bit_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::LoomQ4_0
    )
}

impl Activations16 {
    /// `None` when `x` is not whole blocks of 32 or holds a value that is not finite (the float32 path then keeps
    /// NaN and ±∞ as they are).
    pub(super) fn new(x: &[f32]) -> Option<Activations16> {
        if !x.len().is_multiple_of(32) || !x.iter().all(|v| v.is_finite()) {
            return None;
        }
        let blocks = x.len() / 32;
        let mut out = Activations16 {
            a: Vec::with_capacity(x.len()),
            scale: Vec::with_capacity(blocks),
            sum: Vec::with_capacity(blocks),
        };
        for block in x.chunks_exact(32) {
            let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let inv = if max > 0.0 { 32767.0 / max } else { 0.0 };
            out.a.extend(block.iter().map(|v| (v * inv).round() as i16));
            out.scale.push(max / 32767.0);
            out.sum.push(block.iter().sum());
        }
        Some(out)
    }
}

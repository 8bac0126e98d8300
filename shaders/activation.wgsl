// Loom's activations in f32 (ids: 0 ReLU, 1 Silu, 2 GELU, 3 Tanh, 4 Sigmoid, 5 LeakyReLU, 6 ReLU2, 7 Linear).
// Prepended to the kernels that apply an activation (and to recurrent.wgsl for its tanh and sigmoid). GPU maths is
// f32: close to, not bit-equal with, the CPU path.

// tanh saturates to ±1 in f32 long before ±15; clamping keeps implementations that compute it from exp finite
// (SwiftShader's tanh(x) is NaN once exp(2x) overflows, past x ≈ 44).
fn tanh_f32(v: f32) -> f32 {
    return tanh(clamp(v, -15.0, 15.0));
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

fn activate(x: f32, act: u32) -> f32 {
    switch act {
        case 0u: { return max(x, 0.0); }
        case 1u: { return x / (1.0 + exp(-x)); }
        case 2u: { return 0.5 * x * (1.0 + tanh_f32(0.7978845608 * (x + 0.044715 * x * x * x))); }
        case 3u: { return tanh_f32(x); }
        case 4u: { return sigmoid(x); }
        case 5u: { return select(x, x * 0.01, x < 0.0); }
        case 6u: { let r = max(x, 0.0); return r * r; }
        default: { return x; }
    }
}

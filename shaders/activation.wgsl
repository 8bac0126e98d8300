// Loom's activations in f32 (ids: 0 ReLU, 1 Silu, 2 GELU, 3 Tanh, 4 Sigmoid, 5 LeakyReLU, 6 ReLU2, 7 Linear).
// Prepended to the kernels that apply an activation. GPU maths is f32: close to, not bit-equal with, the CPU path.

fn activate(x: f32, act: u32) -> f32 {
    switch act {
        case 0u: { return max(x, 0.0); }
        case 1u: { return x / (1.0 + exp(-x)); }
        case 2u: { return 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x * x * x))); }
        case 3u: { return tanh(x); }
        case 4u: { return 1.0 / (1.0 + exp(-x)); }
        case 5u: { return select(x, x * 0.01, x < 0.0); }
        case 6u: { let r = max(x, 0.0); return r * r; }
        default: { return x; }
    }
}

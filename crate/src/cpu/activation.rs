//! Loom's activations on float32 values; transcendental functions are Go's (`gomath`), in f64, then rounded.

use super::gomath;
use crate::network::Activation;

/// Applies `act` to one value as Loom does.
pub fn activate(act: Activation, x: f32) -> f32 {
    match act {
        Activation::ReLU => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::Silu => {
            let s = gomath::sigmoid(f64::from(x)) as f32;
            x * s
        }
        Activation::GELU => {
            let v = f64::from(x);
            let c = (2.0 / std::f64::consts::PI).sqrt();
            (0.5 * v * (1.0 + gomath::tanh(c * (v + 0.044715 * v * v * v)))) as f32
        }
        Activation::Tanh => gomath::tanh(f64::from(x)) as f32,
        Activation::Sigmoid => gomath::sigmoid(f64::from(x)) as f32,
        Activation::LeakyReLU => {
            if x < 0.0 {
                // 0.01 is a float64 constant in Loom: the product is rounded once, from f64.
                (f64::from(x) * 0.01) as f32
            } else {
                x
            }
        }
        Activation::ReLU2 => {
            if x < 0.0 {
                0.0
            } else {
                x * x
            }
        }
        Activation::Linear => x,
    }
}

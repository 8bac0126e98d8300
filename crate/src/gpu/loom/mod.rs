//! Loom networks on the GPU, built on the ops of `super::ops`: the network model (one command submission per
//! forward), MultiHeadAttention, the streaming loader, the Loom-only layer kernels (conv, recurrent, KMeans), and
//! each op family's Loom layer (its weights and row rules: norm, softmax, embedding).

mod conv;
mod embedding;
mod kmeans;
mod mha;
mod model;
mod norm;
mod recurrent;
mod softmax;
mod stream;
mod weights;

pub use conv::Conv;
pub use kmeans::KMeans;
pub use mha::{Mha, MHA_MAX_SEQ};
pub use model::{ForwardStats, GpuModel};
pub use norm::NormWeights;
pub use recurrent::Recurrent;
pub use stream::GpuStream;
pub use weights::{dense_weights, F32Weights};

use super::Pointwise;
use crate::network::Activation;

impl From<Activation> for Pointwise {
    fn from(a: Activation) -> Pointwise {
        match a {
            Activation::ReLU => Pointwise::Relu,
            Activation::Silu => Pointwise::Silu,
            Activation::GELU => Pointwise::Gelu,
            Activation::Tanh => Pointwise::Tanh,
            Activation::Sigmoid => Pointwise::Sigmoid,
            Activation::LeakyReLU => Pointwise::LeakyRelu,
            Activation::ReLU2 => Pointwise::Relu2,
            Activation::Linear => Pointwise::Identity,
        }
    }
}

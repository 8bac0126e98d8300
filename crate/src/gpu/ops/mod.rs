//! GPU ops: one host per op family (`shaders/`, one WGSL file each), knowing tensors, buffers and shapes but
//! nothing of Loom's `Network` (this module never imports `crate::network`). Each op has its CPU twin (the f32
//! ops of `crate::cpu::ops` and `crate::quant`, or for the Loom families the bit-exact layers of `crate::cpu`),
//! and tests run both on the same data. Loom's layers (`super::loom`) and the LLM decoder are built from these.

mod argmax;
mod attention;
mod elementwise;
mod embedding;
pub(crate) mod kernel;
mod matvec;
mod norm;
mod rope;
mod sample;
mod softmax;
mod tensor;

pub use argmax::{first_argmax, Argmax, ARGMAX_SLICE};
pub use attention::{
    AttendArgs, Attention, KvCache, KvWrite, NewKv, RopeIn, ATTENTION_MAX_SPLITS, ATTENTION_RUN_POSITIONS,
};
pub use elementwise::Elementwise;
pub use embedding::{Embedding, EmbeddingTable};
pub use matvec::{
    binding_parts, packed_values, MatVec, MatVecOptions, PackedWeights, Packing, RowLayout, XRead, GPU_GGML_TYPES,
    MAX_WEIGHT_BINDINGS, TILED_FULL_GROUPS,
};
pub use norm::{Norm, LAYER_NORM_EPS, RMS_NORM_EPS};
pub use rope::{rope_table, Rope};
pub use sample::{is_allowed, mask_logits, LogitMask, Sample, SampleArgs, GPU_SAMPLE_MAX};
pub use softmax::{Softmax, SoftmaxVariant};
pub use tensor::{GpuTensor, Rows};

/// A pointwise function the kernels apply to their outputs (`shaders/activation.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointwise {
    Relu,
    Silu,
    Gelu,
    Tanh,
    Sigmoid,
    LeakyRelu,
    /// ReLU squared.
    Relu2,
    Identity,
}

impl Pointwise {
    /// The id `shaders/activation.wgsl` knows it by.
    pub fn id(self) -> u32 {
        match self {
            Pointwise::Relu => 0,
            Pointwise::Silu => 1,
            Pointwise::Gelu => 2,
            Pointwise::Tanh => 3,
            Pointwise::Sigmoid => 4,
            Pointwise::LeakyRelu => 5,
            Pointwise::Relu2 => 6,
            Pointwise::Identity => 7,
        }
    }
}

/// WGSL shared by kernels that apply a [`Pointwise`] function.
pub const ACTIVATION_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/activation.wgsl"));

/// WGSL shared by kernels that reduce a row in one 64-lane workgroup.
pub const REDUCE_WGSL: &str = include_str!(concat!(env!("OUT_DIR"), "/shaders/reduce.wgsl"));

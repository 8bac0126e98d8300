//! One Loom layer: its configuration (every persisted field, spec §5.3) and its weights.

use super::kinds::{Activation, LayerType, SoftmaxType};
use super::weights::WeightStore;
use crate::dtype::DType;
use crate::error::{LoomError, Result};

/// One `meta_rules` entry of a Metacognition layer (Go field names, spec §5.3).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MetaRule {
    pub condition: i64,
    pub threshold: f64,
    pub command: f32,
    pub param: f32,
    pub cooldown: i64,
    pub self_only: bool,
}

/// A blob that belongs to a layer beside its own weights (transformer `.entity` files, spec §8):
/// Q4_0 components `q4_0.<key>`, SwiGLU `biases`, MHA `q_norm` / `k_norm`. Kept as read, in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtraBlob {
    /// Path suffix after the layer's own path, e.g. `q4_0.200` or `biases`.
    pub suffix: String,
    /// `Q4_0` or a dtype name.
    pub dtype: String,
    pub scale: f32,
    pub native: bool,
    pub bytes: bytes::Bytes,
}

/// A Loom layer. Integer fields are Go `int`s; zero means "unset" and is omitted on save.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub z: i64,
    pub y: i64,
    pub x: i64,
    pub l: i64,
    pub layer_type: LayerType,
    pub activation: Activation,
    pub dtype: DType,
    pub input_height: i64,
    pub input_width: i64,
    pub input_depth: i64,
    pub output_height: i64,
    pub output_width: i64,
    pub output_depth: i64,
    pub input_channels: i64,
    pub filters: i64,
    pub kernel_size: i64,
    pub stride: i64,
    pub padding: i64,
    pub output_padding: i64,
    pub num_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub query_dim: i64,
    pub d_model: i64,
    pub seq_length: i64,
    pub rope_freq_base: f64,
    pub vocab_size: i64,
    pub embedding_dim: i64,
    pub num_clusters: i64,
    pub kmeans_temperature: f64,
    pub output_mode: String,
    pub softmax_type: SoftmaxType,
    pub temperature: f64,
    pub softmax_rows: i64,
    pub softmax_cols: i64,
    pub entmax_alpha: f64,
    pub gumbel_noise: bool,
    /// `None` for weightless layers, and for weighted layers whose file carried no weights.
    pub weights: Option<WeightStore>,
    pub parallel_branches: Vec<Layer>,
    pub combine_mode: String,
    pub sequential_layers: Vec<Layer>,
    pub use_tiling: bool,
    pub tile_size: i64,
    pub is_disabled: bool,
    pub meta_rules: Vec<MetaRule>,
    pub meta_observed_layer: Option<Box<Layer>>,
    pub extra_blobs: Vec<ExtraBlob>,
    /// Weights read from JSON, decoded once the layer's size is known (see `formats::loom_json`).
    pub(crate) pending: Option<crate::formats::loom_json::PendingWeights>,
}

impl Default for Layer {
    /// Loom's default grid cell: a weightless Dense/ReLU/float32 layer.
    fn default() -> Layer {
        Layer {
            z: 0,
            y: 0,
            x: 0,
            l: 0,
            layer_type: LayerType::Dense,
            activation: Activation::ReLU,
            dtype: DType::Float32,
            input_height: 0,
            input_width: 0,
            input_depth: 0,
            output_height: 0,
            output_width: 0,
            output_depth: 0,
            input_channels: 0,
            filters: 0,
            kernel_size: 0,
            stride: 0,
            padding: 0,
            output_padding: 0,
            num_heads: 0,
            num_kv_heads: 0,
            head_dim: 0,
            query_dim: 0,
            d_model: 0,
            seq_length: 0,
            rope_freq_base: 0.0,
            vocab_size: 0,
            embedding_dim: 0,
            num_clusters: 0,
            kmeans_temperature: 0.0,
            output_mode: String::new(),
            softmax_type: SoftmaxType::Standard,
            temperature: 0.0,
            softmax_rows: 0,
            softmax_cols: 0,
            entmax_alpha: 0.0,
            gumbel_noise: false,
            weights: None,
            parallel_branches: Vec::new(),
            combine_mode: String::new(),
            sequential_layers: Vec::new(),
            use_tiling: false,
            tile_size: 0,
            is_disabled: false,
            meta_rules: Vec::new(),
            meta_observed_layer: None,
            extra_blobs: Vec::new(),
            pending: None,
        }
    }
}

/// Multiplies non-negative dimensions, refusing negatives and overflow.
fn product(what: &str, dims: &[i64]) -> Result<usize> {
    let overflow = || LoomError::ShapeOverflow {
        what: what.to_string(),
        shape: dims.iter().map(|d| *d as u64).collect(),
    };
    dims.iter().try_fold(1usize, |acc, d| {
        let d = usize::try_from(*d)
            .map_err(|_| LoomError::InvalidNetwork(format!("{what}: negative dimension {d} in {dims:?}")))?;
        acc.checked_mul(d).ok_or_else(overflow)
    })
}

fn sum(what: &str, parts: &[usize]) -> Result<usize> {
    parts.iter().try_fold(0usize, |acc, p| {
        acc.checked_add(*p).ok_or_else(|| LoomError::ShapeOverflow {
            what: what.to_string(),
            shape: parts.iter().map(|p| *p as u64).collect(),
        })
    })
}

impl Layer {
    /// True for the layer types that own a WeightStore.
    pub fn is_weighted(&self) -> bool {
        !matches!(
            self.layer_type,
            LayerType::Softmax
                | LayerType::Parallel
                | LayerType::Sequential
                | LayerType::Residual
                | LayerType::Metacognition
        )
    }

    /// MHA query width: `query_dim`, else `d_model` (spec §6.2).
    pub fn mha_query_dim(&self) -> i64 {
        if self.query_dim > 0 {
            self.query_dim
        } else {
            self.d_model
        }
    }

    /// Number of weights the layer's WeightStore holds (spec §6.2); 0 for weightless types.
    pub fn weight_count(&self) -> Result<usize> {
        let what = self.layer_type.name();
        let k = if self.kernel_size == 0 { 1 } else { self.kernel_size };
        let (c, f) = (self.input_channels, self.filters);
        let (i, o) = (self.input_height, self.output_height);
        match self.layer_type {
            LayerType::Dense => product(what, &[i, o]),
            LayerType::MultiHeadAttention => {
                let d = self.d_model;
                let q = self.mha_query_dim();
                let kv = product(what, &[self.num_kv_heads, self.head_dim])?;
                let kv = i64::try_from(kv).map_err(|_| LoomError::ShapeOverflow {
                    what: what.to_string(),
                    shape: vec![self.num_kv_heads as u64, self.head_dim as u64],
                })?;
                let parts = [
                    product(what, &[q, d])?,
                    product(what, &[2, kv, d])?,
                    product(what, &[d, q])?,
                    product(what, &[q])?,
                    product(what, &[2, kv])?,
                    product(what, &[d])?,
                ];
                sum(what, &parts)
            }
            LayerType::SwiGLU => {
                let parts = [
                    product(what, &[3, i, o])?,
                    product(what, &[2, o])?,
                    product(what, &[i])?,
                ];
                sum(what, &parts)
            }
            LayerType::RMSNorm => product(what, &[i]),
            LayerType::LayerNorm => product(what, &[2, i]),
            LayerType::RNN | LayerType::LSTM => {
                let one = sum(
                    what,
                    &[product(what, &[o, i])?, product(what, &[o, o])?, product(what, &[o])?],
                )?;
                let gates = if self.layer_type == LayerType::LSTM { 4 } else { 1 };
                one.checked_mul(gates).ok_or_else(|| LoomError::ShapeOverflow {
                    what: what.to_string(),
                    shape: vec![one as u64, gates as u64],
                })
            }
            LayerType::CNN1 | LayerType::ConvTransposed1D => product(what, &[f, c, k]),
            LayerType::CNN2 | LayerType::ConvTransposed2D => product(what, &[f, c, k, k]),
            LayerType::CNN3 | LayerType::ConvTransposed3D => product(what, &[f, c, k, k, k]),
            LayerType::Embedding => product(what, &[self.vocab_size, self.embedding_dim]),
            LayerType::KMeans => product(what, &[self.num_clusters, i]),
            _ => Ok(0),
        }
    }

    /// Loom's load-time defaults (spec §5.3 step 3): `seq_length` 1 and the derived MHA head sizes.
    /// Applied recursively to nested layers.
    pub fn apply_load_defaults(&mut self) {
        if self.seq_length == 0 {
            self.seq_length = 1;
        }
        if self.layer_type == LayerType::MultiHeadAttention {
            if self.head_dim == 0 && self.num_heads > 0 {
                self.head_dim = self.d_model / self.num_heads;
            }
            if self.num_kv_heads == 0 {
                self.num_kv_heads = self.num_heads;
            }
        }
        self.for_each_child(|c| c.apply_load_defaults());
    }

    /// Calls `f` on every directly nested layer, in Loom's order.
    pub fn for_each_child(&mut self, mut f: impl FnMut(&mut Layer)) {
        self.parallel_branches.iter_mut().for_each(&mut f);
        self.sequential_layers.iter_mut().for_each(&mut f);
        if let Some(m) = self.meta_observed_layer.as_deref_mut() {
            f(m);
        }
    }

    /// All directly nested layers with their blob path segment, in Loom's order.
    pub fn children(&self) -> Vec<(String, &Layer)> {
        let mut out = Vec::new();
        for (j, b) in self.parallel_branches.iter().enumerate() {
            out.push((format!("parallel_branches.{j}"), b));
        }
        for (j, s) in self.sequential_layers.iter().enumerate() {
            out.push((format!("sequential_layers.{j}"), s));
        }
        if let Some(m) = self.meta_observed_layer.as_deref() {
            out.push(("meta_observed_layer".to_string(), m));
        }
        out
    }

    /// Total weights in this layer and everything nested in it.
    pub fn total_weights(&self) -> usize {
        self.weights.as_ref().map_or(0, WeightStore::len)
            + self.children().iter().map(|(_, c)| c.total_weights()).sum::<usize>()
    }
}

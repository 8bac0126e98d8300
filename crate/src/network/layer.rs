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

/// One segment of a layer's WeightStore: a name (`q_weight`, `gate_bias`, `weight`), a row-major shape, and where
/// its values lie in the store.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WeightPart {
    pub name: String,
    pub shape: Vec<u64>,
    /// Index of its first value in the store.
    pub start: usize,
    pub len: usize,
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

/// Store segments with fixed names, as [`Layer::weight_parts`] lists them.
fn named<const N: usize>(segments: [(&str, Vec<i64>); N]) -> Vec<(String, Vec<i64>)> {
    segments
        .into_iter()
        .map(|(name, dims)| (name.to_string(), dims))
        .collect()
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
        Ok(self.weight_parts()?.last().map_or(0, |p| p.start + p.len))
    }

    /// The segments of the layer's WeightStore in store order (spec §6.2): MHA's Q/K/V/O weights and biases,
    /// SwiGLU's gate/up/down, LSTM's four gates; one part for single-matrix layers; none for weightless types.
    pub fn weight_parts(&self) -> Result<Vec<WeightPart>> {
        let what = self.layer_type.name();
        let k = if self.kernel_size == 0 { 1 } else { self.kernel_size };
        let (c, f) = (self.input_channels, self.filters);
        let (i, o) = (self.input_height, self.output_height);
        let segments: Vec<(String, Vec<i64>)> = match self.layer_type {
            LayerType::Dense => named([("weight", vec![o, i])]),
            LayerType::MultiHeadAttention => {
                let (d, q) = (self.d_model, self.mha_query_dim());
                let kv = product(what, &[self.num_kv_heads, self.head_dim])?;
                let kv = i64::try_from(kv).map_err(|_| LoomError::ShapeOverflow {
                    what: what.to_string(),
                    shape: vec![self.num_kv_heads as u64, self.head_dim as u64],
                })?;
                named([
                    ("q_weight", vec![q, d]),
                    ("k_weight", vec![kv, d]),
                    ("v_weight", vec![kv, d]),
                    ("o_weight", vec![d, q]),
                    ("q_bias", vec![q]),
                    ("k_bias", vec![kv]),
                    ("v_bias", vec![kv]),
                    ("o_bias", vec![d]),
                ])
            }
            // SwiGLU: in = hidden H, out = intermediate I.
            LayerType::SwiGLU => named([
                ("gate_weight", vec![o, i]),
                ("up_weight", vec![o, i]),
                ("down_weight", vec![i, o]),
                ("gate_bias", vec![o]),
                ("up_bias", vec![o]),
                ("down_bias", vec![i]),
            ]),
            LayerType::RMSNorm => named([("gamma", vec![i])]),
            LayerType::LayerNorm => named([("gamma", vec![i]), ("beta", vec![i])]),
            LayerType::RNN => named([("w_ih", vec![o, i]), ("w_hh", vec![o, o]), ("bias", vec![o])]),
            LayerType::LSTM => ["i", "f", "g", "o"]
                .iter()
                .flat_map(|g| {
                    [
                        (format!("{g}.w_ih"), vec![o, i]),
                        (format!("{g}.w_hh"), vec![o, o]),
                        (format!("{g}.bias"), vec![o]),
                    ]
                })
                .collect(),
            LayerType::CNN1 | LayerType::ConvTransposed1D => named([("weight", vec![f, c, k])]),
            LayerType::CNN2 | LayerType::ConvTransposed2D => named([("weight", vec![f, c, k, k])]),
            LayerType::CNN3 | LayerType::ConvTransposed3D => named([("weight", vec![f, c, k, k, k])]),
            LayerType::Embedding => named([("weight", vec![self.vocab_size, self.embedding_dim])]),
            LayerType::KMeans => named([("centers", vec![self.num_clusters, i])]),
            _ => Vec::new(),
        };
        let mut start = 0usize;
        let mut parts = Vec::with_capacity(segments.len());
        for (name, dims) in segments {
            let len = product(what, &dims)?;
            parts.push(WeightPart {
                name,
                // Non-negative: `product` refused negative dimensions.
                shape: dims.iter().map(|&d| d as u64).collect(),
                start,
                len,
            });
            start = start.checked_add(len).ok_or_else(|| LoomError::ShapeOverflow {
                what: what.to_string(),
                shape: parts.iter().map(|p| p.len as u64).collect(),
            })?;
        }
        Ok(parts)
    }

    /// The shapes of one input row and of the output row it gives (spec §6.2, §7), when the layer's config says:
    /// per position for sequence layers (MHA, SwiGLU, norms), per id for Embedding, `[seq, features]` for
    /// RNN/LSTM, `[channels, …]` for convolutions. `None` for containers, for layers whose size comes from the
    /// input (Softmax without a grid), and when a size is unset.
    pub fn io_shapes(&self) -> Option<(Vec<u64>, Vec<u64>)> {
        let (i, o) = (self.input_height, self.output_height);
        let (c, f) = (self.input_channels, self.filters);
        let (input, output) = match self.layer_type {
            LayerType::Dense => (vec![i], vec![o]),
            LayerType::MultiHeadAttention => (vec![self.d_model], vec![self.d_model]),
            LayerType::SwiGLU | LayerType::RMSNorm | LayerType::LayerNorm => (vec![i], vec![i]),
            LayerType::RNN | LayerType::LSTM => (vec![self.seq_length, i], vec![self.seq_length, o]),
            LayerType::CNN1 => (vec![c, i], vec![f, o]),
            LayerType::ConvTransposed1D => (vec![c, self.input_width], vec![f, self.output_width]),
            LayerType::CNN2 | LayerType::ConvTransposed2D => {
                (vec![c, i, self.input_width], vec![f, o, self.output_width])
            }
            LayerType::CNN3 | LayerType::ConvTransposed3D => (
                vec![c, self.input_depth, i, self.input_width],
                vec![f, self.output_depth, o, self.output_width],
            ),
            LayerType::Embedding => (vec![1], vec![self.embedding_dim]),
            LayerType::KMeans if self.output_mode == "features" => (vec![i], vec![i]),
            LayerType::KMeans => (vec![i], vec![self.num_clusters]),
            LayerType::Softmax if self.softmax_rows > 0 && self.softmax_cols > 0 => {
                let grid = vec![self.softmax_rows, self.softmax_cols];
                (grid.clone(), grid)
            }
            _ => return None,
        };
        let positive = |dims: Vec<i64>| -> Option<Vec<u64>> {
            dims.iter().map(|&d| u64::try_from(d).ok().filter(|&d| d > 0)).collect()
        };
        Some((positive(input)?, positive(output)?))
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

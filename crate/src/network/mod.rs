//! The Loom network model: a grid of cells `(z, y, x)`, each holding `layers_per_cell` layers, stored flat in
//! `((z·rows + y)·cols + x)·lpc + l` order (spec §5.2).

mod input;
mod kinds;
mod layer;
mod weights;

pub use input::InputSpec;
pub use kinds::{Activation, LayerType, SoftmaxType};
pub use layer::{ExtraBlob, Layer, MetaRule, WeightPart};
pub use weights::{f32_bytes, WeightStore};

use crate::error::{LoomError, Result};

/// Grids larger than this many cells are refused: a hostile header cannot make us allocate millions of layers.
pub const MAX_CELLS: usize = 1 << 20;

/// Grid cells a parsed file may declare whatever its size. Beyond that a file must be large enough to describe
/// its cells, one per [`BYTES_PER_CELL`] bytes (Loom writes every cell, each over 80 bytes), so that a few
/// header bytes cannot allocate a grid of default layers (about 512 bytes each) thousands of times their size.
pub const FREE_CELLS: usize = 4096;
/// See [`FREE_CELLS`].
pub const BYTES_PER_CELL: usize = 16;

/// The most grid cells a file of `input_len` bytes may declare.
pub fn cell_budget(input_len: usize) -> usize {
    (input_len / BYTES_PER_CELL).clamp(FREE_CELLS, MAX_CELLS)
}

/// The most weights [`Network::init_random_weights`] creates in total (1 GiB of float32), so that a short
/// architecture JSON cannot ask for an allocation that aborts the process.
pub const MAX_INIT_WEIGHTS: usize = 1 << 28;

/// A Loom network.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub depth: usize,
    pub rows: usize,
    pub cols: usize,
    pub layers_per_cell: usize,
    /// Every grid cell's layer in flat order.
    pub layers: Vec<Layer>,
    /// The `.entity` transformer section, when the file had one.
    pub transformer: Option<Transformer>,
}

impl Network {
    /// A grid of default (weightless Dense) cells.
    pub fn new(depth: usize, rows: usize, cols: usize, layers_per_cell: usize) -> Result<Network> {
        Network::new_bounded(depth, rows, cols, layers_per_cell, MAX_CELLS)
    }

    /// [`Network::new`] refusing grids of more than `max_cells` cells.
    pub fn new_bounded(
        depth: usize,
        rows: usize,
        cols: usize,
        layers_per_cell: usize,
        max_cells: usize,
    ) -> Result<Network> {
        let max_cells = max_cells.min(MAX_CELLS);
        let cells = depth
            .checked_mul(rows)
            .and_then(|n| n.checked_mul(cols))
            .and_then(|n| n.checked_mul(layers_per_cell))
            .filter(|n| *n <= max_cells)
            .ok_or_else(|| {
                LoomError::InvalidNetwork(format!(
                    "grid {depth}×{rows}×{cols}×{layers_per_cell} exceeds {max_cells} layers"
                ))
            })?;
        let mut layers = Vec::with_capacity(cells);
        for idx in 0..cells {
            let (z, y, x, l) = Network::coords_of(idx, rows, cols, layers_per_cell);
            layers.push(Layer {
                z,
                y,
                x,
                l,
                ..Layer::default()
            });
        }
        Ok(Network {
            depth,
            rows,
            cols,
            layers_per_cell,
            layers,
            transformer: None,
        })
    }

    fn coords_of(idx: usize, rows: usize, cols: usize, lpc: usize) -> (i64, i64, i64, i64) {
        let l = idx % lpc;
        let x = (idx / lpc) % cols;
        let y = (idx / lpc / cols) % rows;
        let z = idx / lpc / cols / rows;
        (z as i64, y as i64, x as i64, l as i64)
    }

    /// Flat index of cell `(z, y, x, l)`, or an error naming the coordinates when they lie outside the grid.
    pub fn flat_index(&self, z: i64, y: i64, x: i64, l: i64) -> Result<usize> {
        let inside = |v: i64, n: usize| v >= 0 && (v as u64) < n as u64;
        if !(inside(z, self.depth) && inside(y, self.rows) && inside(x, self.cols) && inside(l, self.layers_per_cell)) {
            return Err(LoomError::InvalidNetwork(format!(
                "layer at (z={z}, y={y}, x={x}, l={l}) lies outside the {}×{}×{}×{} grid",
                self.depth, self.rows, self.cols, self.layers_per_cell
            )));
        }
        let (z, y, x, l) = (z as usize, y as usize, x as usize, l as usize);
        Ok(((z * self.rows + y) * self.cols + x) * self.layers_per_cell + l)
    }

    /// Calls `f(path, layer)` on every layer, nested ones included, in Loom's blob order (`layers.<i>` then its
    /// parallel branches, sequential layers and meta-observed layer, depth first).
    pub fn for_each_layer(&self, f: &mut dyn FnMut(&str, &Layer)) {
        fn visit(layer: &Layer, path: String, f: &mut dyn FnMut(&str, &Layer)) {
            f(&path, layer);
            for (seg, child) in layer.children() {
                visit(child, format!("{path}.{seg}"), f);
            }
        }
        for (i, layer) in self.layers.iter().enumerate() {
            visit(layer, format!("layers.{i}"), f);
        }
    }

    /// Total number of weights, nested layers included.
    pub fn total_weights(&self) -> usize {
        self.layers.iter().map(Layer::total_weights).sum()
    }

    /// Fills every weighted layer that has no weights with deterministic uniform values in [-0.1, 0.1].
    /// Loom seeds this from the clock; we seed from `seed` so that builds are reproducible.
    /// At most [`MAX_INIT_WEIGHTS`] weights are created in all; more is a [`LoomError::TooLarge`].
    pub fn init_random_weights(&mut self, seed: u64) -> Result<()> {
        // Count first, so that nothing is allocated for a network that is refused.
        fn needed(layer: &Layer, total: &mut usize) -> Result<()> {
            if layer.is_weighted() && layer.weights.is_none() {
                *total = total.saturating_add(layer.weight_count()?);
            }
            layer.children().iter().try_for_each(|(_, c)| needed(c, total))
        }
        let mut total = 0;
        self.layers.iter().try_for_each(|l| needed(l, &mut total))?;
        if total > MAX_INIT_WEIGHTS {
            return Err(LoomError::TooLarge {
                what: "network weights (float32)".into(),
                len: (total as u64).saturating_mul(4),
                max: MAX_INIT_WEIGHTS as u64 * 4,
            });
        }
        let mut rng = SplitMix64(seed);
        fn visit(layer: &mut Layer, rng: &mut SplitMix64) -> Result<()> {
            if layer.is_weighted() && layer.weights.is_none() {
                let n = layer.weight_count()?;
                if n > 0 {
                    let master = (0..n).map(|_| rng.uniform() * 0.2 - 0.1).collect();
                    layer.weights = Some(WeightStore::from_master(master));
                }
            }
            let mut result = Ok(());
            layer.for_each_child(|c| {
                if result.is_ok() {
                    result = visit(c, rng);
                }
            });
            result
        }
        self.layers.iter_mut().try_for_each(|l| visit(l, &mut rng))
    }
}

/// A small, well-known PRNG for reproducible weight initialisation.
struct SplitMix64(u64);

impl SplitMix64 {
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The `.entity` transformer section (`EntityTransformerSpec`, spec §8) and its global tensors.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Transformer {
    pub architecture: String,
    pub hidden_size: i64,
    pub vocab_size: i64,
    pub lm_head_tied: bool,
    pub has_final_norm: bool,
    pub weight_dtype: String,
    pub dims: TransformerDims,
    /// float32 little-endian bytes of `transformer.embeddings`, `.lm_head`, `.final_norm` as read.
    pub embeddings: Option<bytes::Bytes>,
    pub lm_head: Option<bytes::Bytes>,
    pub final_norm: Option<bytes::Bytes>,
}

/// `dims` of the transformer section.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TransformerDims {
    pub num_layers: i64,
    pub num_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub query_dim: i64,
    pub kv_dim: i64,
    pub intermediate_size: i64,
    pub rms_norm_eps: f64,
    pub rope_freq_base: f64,
    pub activation: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_coordinates_round_trip() {
        let net = Network::new(2, 1, 2, 2).unwrap();
        for (i, layer) in net.layers.iter().enumerate() {
            assert_eq!(net.flat_index(layer.z, layer.y, layer.x, layer.l).unwrap(), i);
        }
        assert!(net.flat_index(0, 0, 2, 0).is_err());
        assert!(net.flat_index(-1, 0, 0, 0).is_err());
        assert!(Network::new(1 << 20, 1 << 20, 1, 1).is_err());
    }
}

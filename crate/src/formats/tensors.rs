//! A Loom network seen as named tensors, with Loom's safetensors naming (spec §10): `layer_<flatIndex>.weights`.

use super::safetensors::{self as st, TensorData};
use crate::error::Result;
use crate::network::Network;

/// A layer's float32 master weights under its tensor name.
pub struct NamedTensor {
    pub name: String,
    pub values: Vec<f32>,
}

/// Tensor name of the layer at blob path `path` (`layers.3` → `layer_3.weights`; nested layers, which Loom
/// does not export, keep their nested path: `layer_0.parallel_branches.1.weights`).
pub fn tensor_name(path: &str) -> String {
    let rest = path.strip_prefix("layers.").unwrap_or(path);
    format!("layer_{rest}.weights")
}

/// The float32 masters of every layer with weights, top-level only (as Loom) or nested too.
pub fn master_tensors(net: &Network, nested: bool) -> Vec<NamedTensor> {
    let mut out = Vec::new();
    net.for_each_layer(&mut |path, layer| {
        // Top-level paths have no dot after `layers.<i>`.
        let top_level = path.matches('.').count() == 1;
        if let (Some(ws), true) = (&layer.weights, nested || top_level) {
            out.push(NamedTensor {
                name: tensor_name(path),
                values: ws.master_values(),
            });
        }
    });
    out
}

/// Loom's `SaveSafetensorsToBytes`: one F32 tensor `[len]` per top-level layer with weights, holding the master.
pub fn write_loom_safetensors(net: &Network) -> Result<Vec<u8>> {
    let tensors = master_tensors(net, false);
    let shapes: Vec<[u64; 1]> = tensors.iter().map(|t| [t.values.len() as u64]).collect();
    let items: Vec<TensorData> = tensors
        .iter()
        .zip(&shapes)
        .map(|(t, shape)| TensorData {
            name: &t.name,
            shape,
            values: &t.values,
        })
        .collect();
    st::write_loom(&items)
}

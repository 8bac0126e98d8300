//! A Loom network seen as named tensors, with Loom's safetensors naming (spec §10): `layer_<flatIndex>.weights`.

use super::safetensors::{self as st, TensorData};
use crate::error::Result;
use crate::network::{Layer, Network};

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
    fn visit(layer: &Layer, path: String, nested: bool, out: &mut Vec<NamedTensor>) {
        if let Some(ws) = &layer.weights {
            out.push(NamedTensor {
                name: tensor_name(&path),
                values: ws.master_values(),
            });
        }
        if nested {
            for (seg, child) in layer.children() {
                visit(child, format!("{path}.{seg}"), nested, out);
            }
        }
    }
    let mut out = Vec::new();
    for (i, layer) in net.layers.iter().enumerate() {
        visit(layer, format!("layers.{i}"), nested, &mut out);
    }
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

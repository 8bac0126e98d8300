//! Conversion between Loom JSON, `.entity` and safetensors, with an exact report of what a conversion loses.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{LoomError, Result};
use crate::formats::gojson::GoJson;
use crate::formats::loom_json::{self, Dialect, Target};
use crate::formats::safetensors::{self as st, Dtype, TensorData};
use crate::formats::{self, Header};
use crate::formats::{entity, tensors};
use crate::network::{Layer, Network, WeightStore};

/// `__metadata__` key under which a safetensors file written by us carries the Loom topology.
pub const TOPOLOGY_KEY: &str = "loom_network";

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Entity,
    Json,
    /// safetensors with F32, F16 or BF16 tensors.
    Safetensors(Dtype),
}

impl OutputFormat {
    /// The format for a file name's extension (`.entity`, `.json`, `.safetensors` as F32).
    pub fn from_extension(name: &str) -> Option<OutputFormat> {
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "entity" => Some(OutputFormat::Entity),
            "json" => Some(OutputFormat::Json),
            "safetensors" => Some(OutputFormat::Safetensors(Dtype::F32)),
            _ => None,
        }
    }
}

/// What changed in one layer's weights.
#[derive(Clone, Debug, PartialEq, Serialize, ts_rs::TS)]
pub struct LayerLoss {
    pub path: String,
    pub from: String,
    pub to: String,
    /// Weights whose value changed.
    pub changed: usize,
    pub total: usize,
    pub max_abs_error: f32,
}

/// Every layer whose weights a conversion changes; empty when it is lossless.
#[derive(Clone, Debug, Default, PartialEq, Serialize, ts_rs::TS)]
pub struct LossReport {
    pub layers: Vec<LayerLoss>,
}

impl LossReport {
    pub fn is_lossless(&self) -> bool {
        self.layers.is_empty()
    }

    /// One line per changed layer.
    pub fn describe(&self) -> String {
        self.layers
            .iter()
            .map(|l| {
                format!(
                    "{} ({} → {}): {} of {} weights change, max abs error {:e}",
                    l.path, l.from, l.to, l.changed, l.total, l.max_abs_error
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Reads a network from any supported file. safetensors must carry the topology we write (`loom_network`);
/// its layers come back as float32 masters.
/// `file` is kept, not copied: `.entity` weights stay slices of it.
pub fn read_network(file: bytes::Bytes) -> Result<Network> {
    match formats::open_bytes(&file)?.header {
        Header::Entity(_) => entity::read_bytes(file.clone()),
        Header::LoomJson(net) => Ok(net),
        Header::Safetensors(_) => network_from_safetensors(&file),
        Header::Gguf(_) => Err(LoomError::Unsupported(
            "converting a GGUF file as a Loom network (a language model converts with `loom convert`)".into(),
        )),
    }
}

fn network_from_safetensors(bytes: &[u8]) -> Result<Network> {
    let file = st::SafetensorsFile::from_bytes(bytes)?;
    let topology = file.header().metadata().get(TOPOLOGY_KEY).ok_or_else(|| {
        LoomError::Unsupported(format!(
            "this safetensors file has no Loom topology (__metadata__.{TOPOLOGY_KEY}); only its tensors can be inspected"
        ))
    })?;
    let value = loom_json::parse_json(topology.as_bytes(), "safetensors loom_network metadata")?;
    let mut net = loom_json::network_from_value(&value, Dialect::Persisted, topology.len())?;
    let mut missing = None;
    for_each_layer_mut(&mut net, &mut |path, layer| {
        if !layer.is_weighted() || missing.is_some() {
            return;
        }
        let name = tensors::tensor_name(path);
        match file.tensor(&name).and_then(|t| t.to_f32(st::Semantics::Standard)) {
            Ok(values) => match layer.weight_count() {
                Ok(n) if n == values.len() => {
                    layer.dtype = DType::Float32;
                    layer.weights = Some(WeightStore::from_master(values));
                }
                Ok(n) => {
                    missing = Some(LoomError::InvalidNetwork(format!(
                        "{name}: {} values for {n} weights",
                        values.len()
                    )))
                }
                Err(e) => missing = Some(e),
            },
            Err(_) if layer.weight_count().unwrap_or(0) == 0 => {}
            Err(e) => missing = Some(e),
        }
    });
    missing.map_or(Ok(net), Err)
}

/// Calls `f(path, layer)` on every layer, nested ones included, in Loom's blob order.
pub fn for_each_layer_mut(net: &mut Network, f: &mut dyn FnMut(&str, &mut Layer)) {
    fn visit(layer: &mut Layer, path: String, f: &mut dyn FnMut(&str, &mut Layer)) {
        f(&path, layer);
        let segs: Vec<String> = layer.children().into_iter().map(|(s, _)| s).collect();
        let mut i = 0;
        layer.for_each_child(|c| {
            visit(c, format!("{path}.{}", segs[i]), f);
            i += 1;
        });
    }
    for (i, layer) in net.layers.iter_mut().enumerate() {
        visit(layer, format!("layers.{i}"), f);
    }
}

/// The weights forward reads, per layer path.
fn active_values(net: &Network) -> BTreeMap<String, (DType, Vec<f32>)> {
    let mut out = BTreeMap::new();
    net.for_each_layer(&mut |path, layer| {
        if let Some(ws) = &layer.weights {
            out.insert(path.to_string(), (layer.dtype, ws.active(layer.dtype)));
        }
    });
    out
}

/// Converts `net` to `format`, first re-quantizing every layer with weights to `dtype` when given (from its
/// current values, with a fresh auto-scale). Returns the file bytes and what the conversion changes.
pub fn convert(net: &mut Network, format: OutputFormat, dtype: Option<DType>) -> Result<(Vec<u8>, LossReport)> {
    convert_with(net, format, dtype, &BTreeMap::new())
}

/// [`convert`] with a dtype per layer path (`layers.1`, `layers.2.parallel_branches.0`) that overrides the global
/// `dtype` for that layer. Every path must name a layer with weights.
pub fn convert_with(
    net: &mut Network,
    format: OutputFormat,
    dtype: Option<DType>,
    layer_dtypes: &BTreeMap<String, DType>,
) -> Result<(Vec<u8>, LossReport)> {
    let before = active_values(net);
    if let Some(path) = layer_dtypes.keys().find(|p| !before.contains_key(*p)) {
        return Err(LoomError::InvalidInput(format!(
            "{path}: no layer with weights at this path"
        )));
    }
    if dtype.is_some() || !layer_dtypes.is_empty() {
        if let OutputFormat::Safetensors(_) = format {
            let dt = dtype
                .or_else(|| layer_dtypes.values().next().copied())
                .map_or("", DType::name);
            return Err(LoomError::InvalidInput(format!(
                "safetensors output holds float tensors; choose F32, F16 or BF16 instead of {dt}"
            )));
        }
        for_each_layer_mut(net, &mut |path, layer| {
            let Some(dt) = layer_dtypes.get(path).copied().or(dtype) else {
                return;
            };
            if let Some(ws) = layer.weights.as_mut() {
                if layer.dtype != dt {
                    let mut fresh = WeightStore::from_master(ws.active(layer.dtype));
                    fresh.morph(dt);
                    *ws = fresh;
                    layer.dtype = dt;
                }
            }
        });
    }
    let bytes = match format {
        OutputFormat::Entity => entity::write(net)?,
        OutputFormat::Json => loom_json::write(net)?,
        OutputFormat::Safetensors(st_dtype) => write_safetensors(net, &before, st_dtype)?,
    };
    // The report describes the file, not `net`: each format stores some layers its own way (`.entity` keeps
    // RMSNorm in float32, safetensors rounds to its tensor type), so decode the bytes about to be written.
    let bytes = bytes::Bytes::from(bytes);
    let after = active_values(&read_network(bytes.clone())?);
    let target_name = |dt: DType| match format {
        OutputFormat::Safetensors(d) => d.to_string(),
        _ => dt.name().to_string(),
    };
    let mut report = LossReport::default();
    for (path, (from, old)) in &before {
        let Some((to, new)) = after.get(path) else { continue };
        report.compare(path, from.name(), &target_name(*to), old, new);
    }
    Ok((bytes.into(), report))
}

impl LossReport {
    /// Adds `path` when `new` differs from `old` anywhere (NaN stays NaN: no change).
    fn compare(&mut self, path: &str, from: &str, to: &str, old: &[f32], new: &[f32]) {
        let mut changed = 0;
        let mut max_abs_error = 0f32;
        for (a, b) in old.iter().zip(new) {
            if a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()) {
                changed += 1;
                max_abs_error = max_abs_error.max((a - b).abs());
            }
        }
        if changed > 0 {
            self.layers.push(LayerLoss {
                path: path.to_string(),
                from: from.to_string(),
                to: to.to_string(),
                changed,
                total: old.len(),
                max_abs_error,
            });
        }
    }
}

/// Re-exports a safetensors file (one without a Loom topology: an HF checkpoint, say) with every tensor stored as
/// `dtype` (F32, F16 or BF16), keeping names, shapes and `__metadata__`. Tensors of other types are refused by
/// name: integers and 8-bit floats are not weights this can round, and F64 would lose precision before the report
/// could see it. The report compares each tensor as the written file holds it with its source values.
pub fn retype_safetensors(bytes: &[u8], dtype: Dtype) -> Result<(Vec<u8>, LossReport)> {
    let file = st::SafetensorsFile::from_bytes(bytes)?;
    let mut sources = Vec::new();
    for t in file.tensors() {
        if !matches!(t.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(LoomError::Unsupported(format!(
                "re-exporting tensor {:?} of type {}: only F32, F16 and BF16 tensors change type",
                t.name(),
                t.dtype()
            )));
        }
        sources.push((t.name(), t.dtype(), t.shape(), t.to_f32(st::Semantics::Standard)?));
    }
    let items: Vec<TensorData> = sources
        .iter()
        .map(|(name, _, shape, values)| TensorData { name, shape, values })
        .collect();
    let out = st::write(&items, dtype, file.header().metadata())?;
    let written = st::SafetensorsFile::from_bytes(out.as_slice())?;
    let mut report = LossReport::default();
    for (name, from, _, old) in &sources {
        let new = written.tensor(name)?.to_f32(st::Semantics::Standard)?;
        report.compare(name, &from.to_string(), &dtype.to_string(), old, &new);
    }
    Ok((out, report))
}

/// Every layer's current values as 1-D tensors named as Loom names them, plus the topology in `__metadata__`.
fn write_safetensors(net: &mut Network, values: &BTreeMap<String, (DType, Vec<f32>)>, dtype: Dtype) -> Result<Vec<u8>> {
    let mut w = GoJson::new(false);
    loom_json::write_network(&mut w, net, Target::EntityHeader)?;
    let metadata = BTreeMap::from([(TOPOLOGY_KEY.to_string(), w.finish())]);
    let names: Vec<(String, [u64; 1])> = values
        .iter()
        .map(|(path, (_, v))| (tensors::tensor_name(path), [v.len() as u64]))
        .collect();
    let items: Vec<TensorData> = names
        .iter()
        .zip(values.values())
        .map(|((name, shape), (_, v))| TensorData { name, shape, values: v })
        .collect();
    st::write(&items, dtype, &metadata)
}

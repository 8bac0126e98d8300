//! Loom's JSON persistence (`SerializeNetwork` / `DeserializeNetwork`, spec §5) and architecture-only JSON
//! (`BuildNetworkFromJSON`, §5.4). The layer reader and writer here are shared with the `.entity` header.

use base64::Engine;
use serde_json::{Map, Value};

use super::gojson::GoJson;
use crate::dtype::DType;
use crate::error::{json_err, LoomError, Result};
use crate::network::{cell_budget, Activation, Layer, LayerType, MetaRule, Network, SoftmaxType, WeightStore};

/// Seed of the reproducible weights [`build`] gives a network (Loom uses the clock).
pub const BUILD_SEED: u64 = 0x4C4F_4F4D;

/// How a layer object is being read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Persistence JSON (a saved network, or an `.entity` header): weights are read.
    Persisted,
    /// Architecture JSON: no weights; some keys are not part of it (spec §5.4).
    Architecture,
}

/// How a layer object is being written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// `SerializeNetwork`: pretty, with `weights` / `native` / `scale`.
    Json,
    /// The `.entity` header: compact, weights stripped, `seq_length: 1` dropped for most types.
    EntityHeader,
}

/// Parses Loom persistence JSON (a saved network) into a network with its weights.
pub fn read(bytes: &[u8]) -> Result<Network> {
    let value = parse_json(bytes, "Loom JSON")?;
    network_from_value(&value, Dialect::Persisted, bytes.len())
}

/// Builds a network from Loom's architecture-only JSON, as `BuildNetworkFromJSON` does: defaults applied and
/// weights initialised (reproducibly seeded, uniform in [-0.1, 0.1]), nothing morphed.
pub fn build(bytes: &[u8]) -> Result<Network> {
    let value = parse_json(bytes, "architecture JSON")?;
    let mut net = network_from_value(&value, Dialect::Architecture, bytes.len())?;
    net.init_random_weights(BUILD_SEED)?;
    Ok(net)
}

/// Serialises a network exactly as Loom's `SerializeNetwork` does. Like Loom, a layer whose dtype version does
/// not exist yet is morphed (so the network is changed), and the scale written is the one before that morph.
pub fn write(net: &mut Network) -> Result<Vec<u8>> {
    let mut w = GoJson::new(true);
    write_network(&mut w, net, Target::Json)?;
    Ok(w.finish().into_bytes())
}

pub(crate) fn parse_json(bytes: &[u8], context: &str) -> Result<Value> {
    let text = std::str::from_utf8(bytes).map_err(|e| json_err(context, e))?;
    serde_json::from_str(text).map_err(|e| json_err(context, e))
}

fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| json_err(what, "expected a JSON object"))
}

fn type_err(key: &str, expected: &str) -> LoomError {
    json_err(&format!("field \"{key}\""), format!("expected {expected}"))
}

fn number_text(v: &Value, key: &str, expected: &str) -> Result<String> {
    match v {
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(type_err(key, expected)),
    }
}

/// A Go `int` field: an integer literal only.
pub(crate) fn int_field(v: &Value, key: &str) -> Result<i64> {
    number_text(v, key, "an integer")?
        .parse()
        .map_err(|_| type_err(key, "an integer"))
}

/// A Go `float64` field, correctly rounded from its decimal text.
pub(crate) fn f64_field(v: &Value, key: &str) -> Result<f64> {
    let x: f64 = number_text(v, key, "a number")?
        .parse()
        .map_err(|_| type_err(key, "a number"))?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(type_err(key, "a finite number"))
    }
}

/// A Go `uint64` field: an integer literal in `0..=u64::MAX`.
pub(crate) fn u64_field(v: &Value, key: &str) -> Result<u64> {
    number_text(v, key, "a non-negative integer")?
        .parse()
        .map_err(|_| type_err(key, "a non-negative integer"))
}

/// A number rounded directly from its decimal text to float32 (as Go's decoder does); ±Inf when the literal lies
/// beyond float32's range (Go's decoder refuses those).
fn f32_value(v: &Value, key: &str) -> Result<f32> {
    number_text(v, key, "a number")?
        .parse()
        .map_err(|_| type_err(key, "a number"))
}

/// A Go `float32` field, rounded directly from its decimal text to float32 (as Go's decoder does).
pub(crate) fn f32_field(v: &Value, key: &str) -> Result<f32> {
    let x = f32_value(v, key)?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(type_err(key, "a number within float32 range"))
    }
}

/// A layer or blob `scale`: a float32 field whose out-of-range literals are an [`LoomError::InvalidScale`] of `path`.
pub(crate) fn scale_field(v: &Value, key: &str, path: &str) -> Result<f32> {
    let x = f32_value(v, key)?;
    check_scale(x, path)
}

/// Refuses a scale JSON could not hold (±Inf or NaN).
pub(crate) fn check_scale(scale: f32, path: &str) -> Result<f32> {
    if scale.is_finite() {
        Ok(scale)
    } else {
        Err(LoomError::InvalidScale {
            path: path.to_string(),
            scale,
        })
    }
}

pub(crate) fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    v.as_str().ok_or_else(|| type_err(key, "a string"))
}

pub(crate) fn bool_field(v: &Value, key: &str) -> Result<bool> {
    v.as_bool().ok_or_else(|| type_err(key, "a boolean"))
}

fn usize_field(v: &Value, key: &str) -> Result<usize> {
    let i = int_field(v, key)?;
    usize::try_from(i).map_err(|_| type_err(key, "a non-negative integer"))
}

/// Iterates an object's members as Go's decoder matches struct fields: keys case-insensitively, `null`
/// skipped (Go leaves the field unchanged), later duplicates overriding earlier ones.
pub(crate) fn members(map: &Map<String, Value>) -> impl Iterator<Item = (String, &Value)> {
    map.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
}

/// Builds the network a parsed file describes; `input_len` (the text's size) bounds the grid it may declare.
pub(crate) fn network_from_value(value: &Value, dialect: Dialect, input_len: usize) -> Result<Network> {
    let map = as_object(value, "network")?;
    let (mut depth, mut rows, mut cols, mut lpc) = (0, 0, 0, 0);
    let mut layer_values: &[Value] = &[];
    for (k, v) in members(map) {
        match k.as_str() {
            "depth" => depth = usize_field(v, &k)?,
            "rows" => rows = usize_field(v, &k)?,
            "cols" => cols = usize_field(v, &k)?,
            "layers_per_cell" => lpc = usize_field(v, &k)?,
            "layers" => layer_values = v.as_array().ok_or_else(|| type_err("layers", "an array"))?,
            _ => {}
        }
    }
    let mut net = Network::new_bounded(depth, rows, cols, lpc, cell_budget(input_len))?;
    for lv in layer_values {
        let mut layer = parse_layer(lv, dialect, true)?;
        let idx = net.flat_index(layer.z, layer.y, layer.x, layer.l)?;
        layer.apply_load_defaults();
        load_weights(&mut layer, &format!("layers.{idx}"))?;
        net.layers[idx] = layer;
    }
    Ok(net)
}

/// Parses one layer object (recursively). Nested layers get coordinates 0, as Loom never sets them.
/// Weights stay undecoded in `pending` until [`load_weights`] (they need the load defaults first).
pub(crate) fn parse_layer(value: &Value, dialect: Dialect, top_level: bool) -> Result<Layer> {
    let map = as_object(value, "layer")?;
    let mut layer = Layer::default();
    let (mut type_s, mut act_s, mut dtype_s, mut softmax) = ("", "", "", None);
    for (k, v) in members(map) {
        let key = k.as_str();
        let int = || int_field(v, key);
        match key {
            "z" => layer.z = int()?,
            "y" => layer.y = int()?,
            "x" => layer.x = int()?,
            "l" => layer.l = int()?,
            "type" => type_s = str_field(v, key)?,
            "activation" => act_s = str_field(v, key)?,
            "dtype" => dtype_s = str_field(v, key)?,
            "input_height" => layer.input_height = int()?,
            "input_width" => layer.input_width = int()?,
            "input_depth" => layer.input_depth = int()?,
            "output_height" => layer.output_height = int()?,
            "output_width" => layer.output_width = int()?,
            "output_depth" => layer.output_depth = int()?,
            "input_channels" => layer.input_channels = int()?,
            "filters" => layer.filters = int()?,
            "kernel_size" => layer.kernel_size = int()?,
            "stride" => layer.stride = int()?,
            "padding" => layer.padding = int()?,
            "num_heads" => layer.num_heads = int()?,
            "num_kv_heads" => layer.num_kv_heads = int()?,
            "d_model" => layer.d_model = int()?,
            "seq_length" => layer.seq_length = int()?,
            "vocab_size" => layer.vocab_size = int()?,
            "embedding_dim" => layer.embedding_dim = int()?,
            "num_clusters" => layer.num_clusters = int()?,
            "output_mode" => layer.output_mode = str_field(v, key)?.to_string(),
            "softmax_type" => softmax = Some(v),
            "temperature" => layer.temperature = f64_field(v, key)?,
            "softmax_rows" => layer.softmax_rows = int()?,
            "softmax_cols" => layer.softmax_cols = int()?,
            "entmax_alpha" => layer.entmax_alpha = f64_field(v, key)?,
            "combine_mode" => layer.combine_mode = str_field(v, key)?.to_string(),
            "use_tiling" => layer.use_tiling = bool_field(v, key)?,
            "tile_size" => layer.tile_size = int()?,
            "parallel_branches" => layer.parallel_branches = parse_layers(v, key, dialect)?,
            "sequential_layers" => layer.sequential_layers = parse_layers(v, key, dialect)?,
            _ if dialect == Dialect::Architecture => {}
            // Keys that only persistence JSON has (spec §5.4 lists the architecture keys).
            "output_padding" => layer.output_padding = int()?,
            "head_dim" => layer.head_dim = int()?,
            "query_dim" => layer.query_dim = int()?,
            "rope_freq_base" => layer.rope_freq_base = f64_field(v, key)?,
            "kmeans_temperature" => layer.kmeans_temperature = f64_field(v, key)?,
            "gumbel_noise" => layer.gumbel_noise = bool_field(v, key)?,
            "is_disabled" => layer.is_disabled = bool_field(v, key)?,
            "meta_rules" => layer.meta_rules = parse_meta_rules(v)?,
            "meta_observed_layer" => layer.meta_observed_layer = Some(Box::new(parse_layer(v, dialect, false)?)),
            "weights" | "native" | "scale" => {}
            _ => {}
        }
    }
    layer.layer_type = LayerType::parse(type_s)?;
    layer.activation = Activation::parse(act_s)?;
    layer.dtype = if dtype_s.is_empty() {
        DType::Float32
    } else {
        DType::parse(dtype_s)?
    };
    layer.softmax_type = match softmax {
        None => SoftmaxType::Standard,
        Some(Value::String(s)) => SoftmaxType::parse(s)?,
        Some(v) => SoftmaxType::from_id(int_field(v, "softmax_type")?)?,
    };
    if dialect == Dialect::Architecture {
        apply_build_defaults(&mut layer);
    }
    if !top_level {
        (layer.z, layer.y, layer.x, layer.l) = (0, 0, 0, 0);
    }
    if dialect == Dialect::Persisted {
        layer.pending = PendingWeights::from_map(map)?;
    }
    Ok(layer)
}

fn parse_layers(v: &Value, key: &str, dialect: Dialect) -> Result<Vec<Layer>> {
    v.as_array()
        .ok_or_else(|| type_err(key, "an array of layers"))?
        .iter()
        .map(|lv| parse_layer(lv, dialect, false))
        .collect()
}

fn parse_meta_rules(v: &Value) -> Result<Vec<MetaRule>> {
    let items = v.as_array().ok_or_else(|| type_err("meta_rules", "an array"))?;
    items
        .iter()
        .map(|item| {
            let mut rule = MetaRule::default();
            for (k, v) in members(as_object(item, "meta rule")?) {
                match k.as_str() {
                    "condition" => rule.condition = int_field(v, &k)?,
                    "threshold" => rule.threshold = f64_field(v, &k)?,
                    "command" => rule.command = f32_field(v, &k)?,
                    "param" => rule.param = f32_field(v, &k)?,
                    "cooldown" => rule.cooldown = int_field(v, &k)?,
                    "selfonly" => rule.self_only = bool_field(v, &k)?,
                    _ => {}
                }
            }
            Ok(rule)
        })
        .collect()
}

/// `BuildNetworkFromJSON` fills unset CNN2/CNN3 widths and depths from the height.
fn apply_build_defaults(layer: &mut Layer) {
    let fill = |v: &mut i64, from: i64| {
        if *v == 0 {
            *v = from;
        }
    };
    match layer.layer_type {
        LayerType::CNN2 => {
            fill(&mut layer.input_width, layer.input_height);
            fill(&mut layer.output_width, layer.output_height);
        }
        LayerType::CNN3 => {
            fill(&mut layer.input_width, layer.input_height);
            fill(&mut layer.output_width, layer.output_height);
            fill(&mut layer.input_depth, layer.input_height);
            fill(&mut layer.output_depth, layer.output_height);
        }
        _ => {}
    }
}

/// The `weights` / `native` / `scale` members of a persisted layer, kept until the layer's size is known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PendingWeights {
    pub bytes: Vec<u8>,
    pub native: bool,
    /// 0 when the key is absent, as in Loom.
    pub scale: f32,
}

impl PendingWeights {
    fn from_map(map: &Map<String, Value>) -> Result<Option<PendingWeights>> {
        let mut p = PendingWeights::default();
        for (k, v) in members(map) {
            match k.as_str() {
                "weights" => {
                    p.bytes = base64::engine::general_purpose::STANDARD
                        .decode(str_field(v, &k)?)
                        .map_err(|e| json_err("field \"weights\"", format!("invalid base64: {e}")))?
                }
                "native" => p.native = bool_field(v, &k)?,
                // Checked by `load_weights`, which knows the layer's path.
                "scale" => p.scale = f32_value(v, &k)?,
                _ => {}
            }
        }
        Ok((!p.bytes.is_empty() || !p.scale.is_finite()).then_some(p))
    }
}

/// Turns the pending JSON weights of a layer (and its nested layers) into WeightStores (spec §5.3 step 4).
fn load_weights(layer: &mut Layer, path: &str) -> Result<()> {
    if let Some(p) = layer.pending.take() {
        // Pending only with weights, or with a scale to refuse.
        check_scale(p.scale, path)?;
        if !layer.is_weighted() {
            return Err(LoomError::InvalidNetwork(format!(
                "{path}: a {} layer has no weights, but the file gives some",
                layer.layer_type
            )));
        }
        let count = layer.weight_count()?;
        layer.weights = Some(if p.native {
            WeightStore::from_native(layer.dtype, p.bytes, p.scale, count, path)?
        } else {
            WeightStore::from_legacy(layer.dtype, &p.bytes, p.scale, count, path)?
        });
    }
    let mut result = Ok(());
    let children: Vec<String> = layer.children().into_iter().map(|(seg, _)| seg).collect();
    let mut i = 0;
    layer.for_each_child(|c| {
        if result.is_ok() {
            result = load_weights(c, &format!("{path}.{}", children[i]));
        }
        i += 1;
    });
    result
}

pub(crate) fn write_network(w: &mut GoJson, net: &mut Network, target: Target) -> Result<()> {
    w.begin_object();
    w.key("id");
    w.string("network");
    for (k, v) in [
        ("depth", net.depth),
        ("rows", net.rows),
        ("cols", net.cols),
        ("layers_per_cell", net.layers_per_cell),
    ] {
        w.key(k);
        w.int(v as i64);
    }
    w.key("layers");
    w.begin_array();
    for layer in &mut net.layers {
        write_layer(w, layer, target)?;
    }
    w.end_array();
    w.end_object();
    Ok(())
}

/// Writes one layer object with Loom's key order and omission rules (spec §5.3).
pub(crate) fn write_layer(w: &mut GoJson, layer: &mut Layer, target: Target) -> Result<()> {
    w.begin_object();
    for (k, v) in [("z", layer.z), ("y", layer.y), ("x", layer.x), ("l", layer.l)] {
        w.key(k);
        w.int(v);
    }
    w.key("type");
    w.string(layer.layer_type.name());
    w.key("activation");
    w.string(layer.activation.name());
    w.key("dtype");
    w.string(layer.dtype.name());
    let seq_length =
        if target == Target::EntityHeader && layer.seq_length == 1 && !layer.layer_type.keeps_unit_seq_length() {
            0
        } else {
            layer.seq_length
        };
    let ints_a = [
        ("input_height", layer.input_height),
        ("input_width", layer.input_width),
        ("input_depth", layer.input_depth),
        ("output_height", layer.output_height),
        ("output_width", layer.output_width),
        ("output_depth", layer.output_depth),
        ("input_channels", layer.input_channels),
        ("filters", layer.filters),
        ("kernel_size", layer.kernel_size),
        ("stride", layer.stride),
        ("padding", layer.padding),
        ("output_padding", layer.output_padding),
        ("num_heads", layer.num_heads),
        ("num_kv_heads", layer.num_kv_heads),
        ("head_dim", layer.head_dim),
        ("query_dim", layer.query_dim),
        ("d_model", layer.d_model),
        ("seq_length", seq_length),
    ];
    write_nonzero_ints(w, &ints_a);
    write_nonzero_f64(w, "rope_freq_base", layer.rope_freq_base)?;
    write_nonzero_ints(
        w,
        &[
            ("vocab_size", layer.vocab_size),
            ("embedding_dim", layer.embedding_dim),
            ("num_clusters", layer.num_clusters),
        ],
    );
    write_nonzero_f64(w, "kmeans_temperature", layer.kmeans_temperature)?;
    if !layer.output_mode.is_empty() {
        w.key("output_mode");
        w.string(&layer.output_mode);
    }
    w.key("softmax_type");
    w.string(layer.softmax_type.name());
    write_nonzero_f64(w, "temperature", layer.temperature)?;
    write_nonzero_ints(
        w,
        &[
            ("softmax_rows", layer.softmax_rows),
            ("softmax_cols", layer.softmax_cols),
        ],
    );
    write_nonzero_f64(w, "entmax_alpha", layer.entmax_alpha)?;
    if layer.gumbel_noise {
        w.key("gumbel_noise");
        w.bool(true);
    }
    if target == Target::Json {
        write_weights(w, layer)?;
    }
    if !layer.parallel_branches.is_empty() {
        w.key("parallel_branches");
        w.begin_array();
        for b in &mut layer.parallel_branches {
            write_layer(w, b, target)?;
        }
        w.end_array();
    }
    if !layer.combine_mode.is_empty() {
        w.key("combine_mode");
        w.string(&layer.combine_mode);
    }
    if !layer.sequential_layers.is_empty() {
        w.key("sequential_layers");
        w.begin_array();
        for s in &mut layer.sequential_layers {
            write_layer(w, s, target)?;
        }
        w.end_array();
    }
    if layer.use_tiling {
        w.key("use_tiling");
        w.bool(true);
    }
    write_nonzero_ints(w, &[("tile_size", layer.tile_size)]);
    if layer.is_disabled {
        w.key("is_disabled");
        w.bool(true);
    }
    if !layer.meta_rules.is_empty() {
        w.key("meta_rules");
        w.begin_array();
        for r in &layer.meta_rules {
            w.begin_object();
            w.key("Condition");
            w.int(r.condition);
            w.key("Threshold");
            w.float(r.threshold, false, "meta rule Threshold")?;
            w.key("Command");
            w.float(f64::from(r.command), true, "meta rule Command")?;
            w.key("Param");
            w.float(f64::from(r.param), true, "meta rule Param")?;
            w.key("Cooldown");
            w.int(r.cooldown);
            w.key("SelfOnly");
            w.bool(r.self_only);
            w.end_object();
        }
        w.end_array();
    }
    if let Some(m) = layer.meta_observed_layer.as_deref_mut() {
        w.key("meta_observed_layer");
        write_layer(w, m, target)?;
    }
    w.end_object();
    Ok(())
}

/// Loom's per-layer save: record the scale, morph if needed, write the version's native bytes (spec §5.3).
fn write_weights(w: &mut GoJson, layer: &mut Layer) -> Result<()> {
    let dtype = layer.dtype;
    let Some(ws) = layer.weights.as_mut() else {
        return Ok(());
    };
    let scale = ws.scale();
    ws.morph(dtype);
    let bytes = ws
        .native_bytes(dtype)
        .ok_or_else(|| LoomError::Unsaveable(format!("no {dtype} weights to save")))?;
    if !bytes.is_empty() {
        w.key("weights");
        w.string(&base64::engine::general_purpose::STANDARD.encode(&bytes));
    }
    w.key("native");
    w.bool(true);
    if scale != 0.0 {
        w.key("scale");
        w.float(f64::from(scale), true, "scale")?;
    }
    Ok(())
}

fn write_nonzero_ints(w: &mut GoJson, fields: &[(&str, i64)]) {
    for (k, v) in fields {
        if *v != 0 {
            w.key(k);
            w.int(*v);
        }
    }
}

fn write_nonzero_f64(w: &mut GoJson, key: &str, v: f64) -> Result<()> {
    if v != 0.0 {
        w.key(key);
        w.float(v, false, key)?;
    }
    Ok(())
}

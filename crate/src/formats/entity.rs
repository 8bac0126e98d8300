//! ENTITY v1 (`.entity`, spec §8): `"ENTITY\0\0" | u16 version=1 | u16 flags | u64 header_len | header JSON |
//! payload`, the payload being the blobs back to back. Read, write (byte-identical to Loom), header-only
//! inspection and selective layer loading.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

use super::gojson::GoJson;
use super::loom_json::{
    bool_field, f64_field, int_field, members, network_from_value, parse_json, scale_field, str_field, u64_field,
    write_network, Dialect, Target,
};
use crate::dtype::{q4_0::Q4Blocks, DType};
use crate::error::{json_err, LoomError, Result};
use crate::network::{ExtraBlob, Layer, LayerType, Network, Transformer, WeightStore};

/// The 8 magic bytes.
pub const MAGIC: [u8; 8] = *b"ENTITY\0\0";
/// Bytes before the header JSON.
pub const PREAMBLE_LEN: usize = 20;
/// Loom refuses headers larger than this.
pub const MAX_HEADER_LEN: u64 = 256 << 20;

/// One entry of the header's `blobs` table.
#[derive(Clone, Debug, PartialEq)]
pub struct BlobEntry {
    pub path: String,
    /// Relative to the payload start.
    pub offset: u64,
    pub length: u64,
    /// A dtype name or `Q4_0`.
    pub dtype: String,
    /// 0 when absent.
    pub scale: f32,
    pub native: bool,
}

impl BlobEntry {
    /// The blob's byte range within a payload of `payload_len` bytes, or [`LoomError::BlobOutOfRange`].
    /// Compared as u64 before any cast: on wasm32 `as usize` would truncate a hostile offset.
    pub fn range(&self, payload_len: u64) -> Result<std::ops::Range<usize>> {
        let end = self.offset + self.length;
        if end > payload_len {
            return Err(LoomError::BlobOutOfRange {
                path: self.path.clone(),
                offset: self.offset,
                end,
                payload: payload_len,
            });
        }
        Ok(self.offset as usize..end as usize)
    }
}

/// What the first `20 + header_len` bytes of an `.entity` file say.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityHeader {
    pub header_len: u64,
    /// The topology, without weights.
    pub network: Network,
    pub blobs: Vec<BlobEntry>,
}

impl EntityHeader {
    /// File offset of the payload.
    pub fn payload_offset(&self) -> u64 {
        PREAMBLE_LEN as u64 + self.header_len
    }

    /// Bytes of payload the blob table covers (the end of its last blob).
    pub fn payload_len(&self) -> u64 {
        self.blobs.iter().map(|b| b.offset + b.length).max().unwrap_or(0)
    }
}

/// Checks the 20-byte preamble and returns `header_len`. Needs only the first 20 bytes.
pub fn header_len(prefix: &[u8]) -> Result<u64> {
    if prefix.len() < PREAMBLE_LEN {
        return Err(LoomError::Truncated {
            what: "ENTITY preamble".into(),
            needed: PREAMBLE_LEN as u64,
            available: prefix.len() as u64,
        });
    }
    if prefix[..8] != MAGIC {
        return Err(LoomError::BadMagic { format: "ENTITY" });
    }
    let version = u16::from_le_bytes([prefix[8], prefix[9]]);
    if version != 1 {
        return Err(LoomError::UnsupportedVersion {
            format: "ENTITY",
            version: u64::from(version),
        });
    }
    let len = u64::from_le_bytes(prefix[12..20].try_into().unwrap());
    if len > MAX_HEADER_LEN {
        return Err(LoomError::TooLarge {
            what: "ENTITY header".into(),
            len,
            max: MAX_HEADER_LEN,
        });
    }
    Ok(len)
}

/// Parses the header from a prefix of the file holding at least `20 + header_len` bytes; nothing beyond it is
/// read. Blob offsets are checked against the payload only by [`read`], which knows the file size.
pub fn read_header(prefix: &[u8]) -> Result<EntityHeader> {
    let len = header_len(prefix)?;
    let end = PREAMBLE_LEN as u64 + len;
    if (prefix.len() as u64) < end {
        return Err(LoomError::Truncated {
            what: "ENTITY header".into(),
            needed: end,
            available: prefix.len() as u64,
        });
    }
    let text = &prefix[PREAMBLE_LEN..end as usize];
    let value = parse_json(text, "ENTITY header")?;
    let map = value
        .as_object()
        .ok_or_else(|| json_err("ENTITY header", "expected a JSON object"))?;
    let mut network = None;
    let mut transformer = None;
    let mut blobs = Vec::new();
    for (k, v) in members(map) {
        match k.as_str() {
            "network" => network = Some(network_from_value(v, Dialect::Persisted, text.len())?),
            "transformer" => transformer = Some(parse_transformer(v)?),
            "blobs" => {
                blobs = v
                    .as_array()
                    .ok_or_else(|| json_err("ENTITY header", "\"blobs\" is not an array"))?
                    .iter()
                    .map(parse_blob_entry)
                    .collect::<Result<_>>()?
            }
            _ => {}
        }
    }
    let mut network = network.ok_or_else(|| json_err("ENTITY header", "no \"network\""))?;
    network.transformer = transformer;
    check_overlaps(&blobs)?;
    Ok(EntityHeader {
        header_len: len,
        network,
        blobs,
    })
}

fn parse_blob_entry(v: &Value) -> Result<BlobEntry> {
    let map = v
        .as_object()
        .ok_or_else(|| json_err("ENTITY blob table", "entry is not an object"))?;
    let mut b = BlobEntry {
        path: String::new(),
        offset: 0,
        length: 0,
        dtype: String::new(),
        scale: 0.0,
        native: false,
    };
    let mut scale = None;
    for (k, v) in members(map) {
        match k.as_str() {
            "path" => b.path = str_field(v, &k)?.to_string(),
            "offset" => b.offset = u64_field(v, &k)?,
            "length" => b.length = u64_field(v, &k)?,
            "dtype" => b.dtype = str_field(v, &k)?.to_string(),
            "scale" => scale = Some(v),
            "native" => b.native = bool_field(v, &k)?,
            _ => {}
        }
    }
    if let Some(v) = scale {
        b.scale = scale_field(v, "scale", &b.path)?;
    }
    if b.offset.checked_add(b.length).is_none() {
        return Err(LoomError::BlobOutOfRange {
            path: b.path,
            offset: b.offset,
            end: u64::MAX,
            payload: 0,
        });
    }
    Ok(b)
}

fn check_overlaps(blobs: &[BlobEntry]) -> Result<()> {
    let mut ranges: Vec<&BlobEntry> = blobs.iter().filter(|b| b.length > 0).collect();
    ranges.sort_by_key(|b| b.offset);
    for pair in ranges.windows(2) {
        if pair[0].offset + pair[0].length > pair[1].offset {
            return Err(LoomError::BlobOverlap {
                first: pair[0].path.clone(),
                second: pair[1].path.clone(),
            });
        }
    }
    Ok(())
}

fn parse_transformer(v: &Value) -> Result<Transformer> {
    let map = v
        .as_object()
        .ok_or_else(|| json_err("ENTITY transformer", "expected an object"))?;
    let mut t = Transformer::default();
    for (k, v) in members(map) {
        match k.as_str() {
            "architecture" => t.architecture = str_field(v, &k)?.to_string(),
            "hidden_size" => t.hidden_size = int_field(v, &k)?,
            "vocab_size" => t.vocab_size = int_field(v, &k)?,
            "lm_head_tied" => t.lm_head_tied = bool_field(v, &k)?,
            "has_final_norm" => t.has_final_norm = bool_field(v, &k)?,
            "weight_dtype" => t.weight_dtype = str_field(v, &k)?.to_string(),
            "dims" => {
                let dims = v
                    .as_object()
                    .ok_or_else(|| json_err("ENTITY transformer", "\"dims\" is not an object"))?;
                let d = &mut t.dims;
                for (k, v) in members(dims) {
                    match k.as_str() {
                        "num_layers" => d.num_layers = int_field(v, &k)?,
                        "num_heads" => d.num_heads = int_field(v, &k)?,
                        "num_kv_heads" => d.num_kv_heads = int_field(v, &k)?,
                        "head_dim" => d.head_dim = int_field(v, &k)?,
                        "query_dim" => d.query_dim = int_field(v, &k)?,
                        "kv_dim" => d.kv_dim = int_field(v, &k)?,
                        "intermediate_size" => d.intermediate_size = int_field(v, &k)?,
                        "rms_norm_eps" => d.rms_norm_eps = f64_field(v, &k)?,
                        "rope_freq_base" => d.rope_freq_base = f64_field(v, &k)?,
                        "activation" => d.activation = str_field(v, &k)?.to_string(),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

/// Reads a whole `.entity` file: topology and every blob (the weights are copied out of `bytes`).
pub fn read(bytes: &[u8]) -> Result<Network> {
    read_selected(bytes, None, None)
}

/// Reads a whole `.entity` file without copying its weights: every blob stays a slice of `file` (a buffer that
/// was read or memory-mapped), so loading costs about as much as parsing the header.
pub fn read_bytes(file: Bytes) -> Result<Network> {
    read_selected(&file, Some(&file), None)
}

/// Loom's selective load: the whole topology, but only the blobs of the listed top-level layers. Other
/// weighted layers have no weights (Loom would give them random ones).
pub fn read_layers(bytes: &[u8], layer_indices: &[usize]) -> Result<Network> {
    read_selected(bytes, None, Some(layer_indices))
}

/// `owner`, when given, is `bytes` as a shared buffer that blobs can slice instead of copying.
fn read_selected(bytes: &[u8], owner: Option<&Bytes>, only: Option<&[usize]>) -> Result<Network> {
    let header = read_header(bytes)?;
    let start = header.payload_offset() as usize;
    let payload = &bytes[start..];
    let mut net = header.network;
    for b in &header.blobs {
        let range = b.range(payload.len() as u64)?;
        let path = BlobPath::parse(&b.path)?;
        if let Some(only) = only {
            if !matches!(path.top, Some(i) if only.contains(&i)) {
                continue;
            }
        }
        let range = start + range.start..start + range.end;
        let data = match owner {
            Some(file) => file.slice(range),
            None => Bytes::copy_from_slice(&bytes[range]),
        };
        apply_blob(&mut net, &path, b, data)?;
    }
    Ok(net)
}

/// A parsed blob path: `layers.<i>` + nested segments + optional suffix, or `transformer.<name>`.
struct BlobPath<'a> {
    top: Option<usize>,
    nested: Vec<(&'a str, usize)>,
    suffix: Option<&'a str>,
    global: Option<&'a str>,
}

impl<'a> BlobPath<'a> {
    fn parse(path: &'a str) -> Result<BlobPath<'a>> {
        let bad = || LoomError::BadBlobPath(path.to_string());
        if let Some(name) = path.strip_prefix("transformer.") {
            return match name {
                "embeddings" | "lm_head" | "final_norm" => Ok(BlobPath {
                    top: None,
                    nested: Vec::new(),
                    suffix: None,
                    global: Some(name),
                }),
                _ => Err(bad()),
            };
        }
        let rest = path.strip_prefix("layers.").ok_or_else(bad)?;
        let mut parts = rest.split('.');
        let index = |s: Option<&str>| -> Result<usize> {
            let s = s.ok_or_else(bad)?;
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        let top = index(parts.next())?;
        let mut nested = Vec::new();
        let mut suffix = None;
        while let Some(seg) = parts.next() {
            match seg {
                "parallel_branches" | "sequential_layers" => nested.push((seg, index(parts.next())?)),
                "meta_observed_layer" => nested.push((seg, 0)),
                "q4_0" => {
                    let key = parts.next().ok_or_else(bad)?;
                    index(Some(key))?;
                    // The key must be the last segment before the suffix is sliced off the path's end.
                    if parts.next().is_some() {
                        return Err(bad());
                    }
                    suffix = Some(&path[path.len() - key.len() - 5..]);
                    break;
                }
                "biases" | "q_norm" | "k_norm" => {
                    suffix = Some(seg);
                    break;
                }
                _ => return Err(bad()),
            }
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(BlobPath {
            top: Some(top),
            nested,
            suffix,
            global: None,
        })
    }

    /// [`BlobPath::resolve`] without changing anything.
    fn resolve_ref<'n>(&self, net: &'n Network, full: &str) -> Result<&'n Layer> {
        let bad = || LoomError::BadBlobPath(full.to_string());
        let mut layer = net.layers.get(self.top.ok_or_else(bad)?).ok_or_else(bad)?;
        for (seg, j) in &self.nested {
            layer = match *seg {
                "parallel_branches" => layer.parallel_branches.get(*j),
                "sequential_layers" => layer.sequential_layers.get(*j),
                _ => layer.meta_observed_layer.as_deref(),
            }
            .ok_or_else(bad)?;
        }
        Ok(layer)
    }

    fn resolve<'n>(&self, net: &'n mut Network, full: &str) -> Result<&'n mut Layer> {
        let bad = || LoomError::BadBlobPath(full.to_string());
        let mut layer = net.layers.get_mut(self.top.ok_or_else(bad)?).ok_or_else(bad)?;
        for (seg, j) in &self.nested {
            layer = match *seg {
                "parallel_branches" => layer.parallel_branches.get_mut(*j),
                "sequential_layers" => layer.sequential_layers.get_mut(*j),
                _ => layer.meta_observed_layer.as_deref_mut(),
            }
            .ok_or_else(bad)?;
        }
        Ok(layer)
    }
}

fn apply_blob(net: &mut Network, path: &BlobPath, b: &BlobEntry, data: Bytes) -> Result<()> {
    if let Some(name) = path.global {
        let t = net.transformer.get_or_insert_with(Transformer::default);
        check_f32_bytes(&b.path, &data)?;
        let slot = match name {
            "embeddings" => &mut t.embeddings,
            "lm_head" => &mut t.lm_head,
            _ => &mut t.final_norm,
        };
        *slot = Some(data);
        return Ok(());
    }
    let layer = path.resolve(net, &b.path)?;
    install(layer, path.suffix, b, data)
}

/// Puts a layer blob's bytes into `layer`: an extra blob (`suffix`) or the layer's weights.
fn install(layer: &mut Layer, suffix: Option<&str>, b: &BlobEntry, data: Bytes) -> Result<()> {
    if let Some(suffix) = suffix {
        if b.dtype != "Q4_0" {
            // Kept as a string, but a typo must not survive a load-save cycle.
            DType::parse(&b.dtype)?;
        }
        if b.dtype == "Q4_0" || suffix.starts_with("q4_0.") {
            Q4Blocks::parse(&data)?;
        } else {
            check_f32_bytes(&b.path, &data)?;
        }
        layer.extra_blobs.push(ExtraBlob {
            suffix: suffix.to_string(),
            dtype: b.dtype.clone(),
            scale: b.scale,
            native: b.native,
            bytes: data,
        });
        return Ok(());
    }
    if !layer.is_weighted() {
        return Err(LoomError::InvalidNetwork(format!(
            "blob {} targets a {} layer, which has no weights",
            b.path, layer.layer_type
        )));
    }
    // The blob's dtype overrides the layer's (this is how Loom's RMSNorm comes back as float32).
    let dtype = DType::parse(&b.dtype)?;
    layer.dtype = dtype;
    let count = layer.weight_count()?;
    layer.weights = Some(if b.native {
        WeightStore::from_native(dtype, data, b.scale, count, &b.path)?
    } else {
        WeightStore::from_legacy(dtype, &data, b.scale, count, &b.path)?
    });
    Ok(())
}

fn check_f32_bytes(path: &str, data: &[u8]) -> Result<()> {
    if !data.len().is_multiple_of(4) {
        return Err(LoomError::BlobLength {
            path: path.to_string(),
            dtype: "float32".into(),
            count: (data.len() / 4) as u64,
            expected: (data.len() / 4 * 4) as u64,
            actual: data.len() as u64,
        });
    }
    Ok(())
}

/// Where one blob of an `.entity` file goes, for a reader that receives the blobs one at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobTarget {
    /// The weights or an extra blob (Q4_0 blocks, biases, q/k norms) of the layer at this path (`layers.3`,
    /// `layers.3.sequential_layers.0`, …).
    Layer(String),
    /// A transformer tensor (`transformer.embeddings`, `lm_head`, `final_norm`).
    Transformer,
}

impl BlobEntry {
    /// The layer the blob belongs to, checked against `net` (the header's topology) as [`read`] checks it:
    /// a malformed path or one naming no layer is [`LoomError::BadBlobPath`].
    pub fn target(&self, net: &Network) -> Result<BlobTarget> {
        let path = BlobPath::parse(&self.path)?;
        if path.global.is_some() {
            return Ok(BlobTarget::Transformer);
        }
        path.resolve_ref(net, &self.path)?;
        let end = path.suffix.map_or(self.path.len(), |s| self.path.len() - s.len() - 1);
        Ok(BlobTarget::Layer(self.path[..end].to_string()))
    }
}

/// Installs one blob's bytes into `layer`, the layer of [`BlobEntry::target`], with the checks [`read`] makes
/// (length against dtype and element count, dtype names, Q4_0 blocks, a blob on a layer without weights).
pub fn apply_layer_blob(layer: &mut Layer, b: &BlobEntry, data: Bytes) -> Result<()> {
    let path = BlobPath::parse(&b.path)?;
    if path.global.is_some() {
        return Err(LoomError::BadBlobPath(b.path.clone()));
    }
    install(layer, path.suffix, b, data)
}

/// Installs one blob's bytes into `net` (the header's topology, or a copy of it) as [`read`] does.
pub fn apply(net: &mut Network, b: &BlobEntry, data: Bytes) -> Result<()> {
    apply_blob(net, &BlobPath::parse(&b.path)?, b, data)
}

/// Checks a transformer blob's bytes as [`read`] does (whole float32 values).
pub fn check_transformer_blob(b: &BlobEntry, data: &[u8]) -> Result<()> {
    check_f32_bytes(&b.path, data)
}

/// Loom's `LayerPersistenceFromEntity(data, i)`: the raw bytes, scale and `native` flag of the blob whose
/// path is exactly `layers.<i>`, read without decoding anything else.
pub fn layer_blob(bytes: &[u8], i: usize) -> Result<Option<(&[u8], f32, bool)>> {
    let header = read_header(bytes)?;
    let want = format!("layers.{i}");
    let Some(b) = header.blobs.iter().find(|b| b.path == want) else {
        return Ok(None);
    };
    let payload = &bytes[header.payload_offset() as usize..];
    Ok(Some((&payload[b.range(payload.len() as u64)?], b.scale, b.native)))
}

/// One blob to write.
struct OutBlob<'a> {
    path: String,
    dtype: Cow<'a, str>,
    scale: f32,
    native: bool,
    bytes: Cow<'a, [u8]>,
}

/// Serialises a network exactly as Loom's `SerializeEntity` does. Un-morphed layers are morphed first (so, unlike
/// JSON, the first save already carries the right scale); RMSNorm blobs are float32 from the master.
pub fn write(net: &mut Network) -> Result<Vec<u8>> {
    for layer in &mut net.layers {
        morph_all(layer);
    }
    let mut w = GoJson::new(false);
    w.begin_object();
    w.key("format_version");
    w.int(1);
    w.key("network");
    write_network(&mut w, net, Target::EntityHeader)?;
    let mut blobs = Vec::new();
    for (i, layer) in net.layers.iter().enumerate() {
        collect_blobs(layer, format!("layers.{i}"), &mut blobs);
    }
    if let Some(t) = &net.transformer {
        w.key("transformer");
        write_transformer(&mut w, t)?;
        for (name, data) in [
            ("embeddings", &t.embeddings),
            ("lm_head", &t.lm_head),
            ("final_norm", &t.final_norm),
        ] {
            if let Some(d) = data {
                blobs.push(OutBlob {
                    path: format!("transformer.{name}"),
                    dtype: Cow::Borrowed("float32"),
                    scale: 0.0,
                    native: false,
                    bytes: Cow::Borrowed(d),
                });
            }
        }
    }
    w.key("blobs");
    if blobs.is_empty() {
        w.null();
    } else {
        w.begin_array();
        let mut offset = 0u64;
        for b in &blobs {
            w.begin_object();
            w.key("path");
            w.string(&b.path);
            w.key("offset");
            w.int(offset as i64);
            w.key("length");
            w.int(b.bytes.len() as i64);
            w.key("dtype");
            w.string(&b.dtype);
            if b.scale != 0.0 {
                w.key("scale");
                w.float(f64::from(b.scale), true, "blob scale")?;
            }
            w.key("native");
            w.bool(b.native);
            w.end_object();
            offset += b.bytes.len() as u64;
        }
        w.end_array();
    }
    w.end_object();
    let header = w.finish();
    let payload_len: usize = blobs.iter().map(|b| b.bytes.len()).sum();
    let mut out = Vec::with_capacity(PREAMBLE_LEN + header.len() + payload_len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for b in &blobs {
        out.extend_from_slice(&b.bytes);
    }
    Ok(out)
}

fn morph_all(layer: &mut Layer) {
    let dtype = layer.dtype;
    if let Some(ws) = layer.weights.as_mut() {
        ws.morph(dtype);
    }
    layer.for_each_child(morph_all);
}

fn collect_blobs<'a>(layer: &'a Layer, path: String, out: &mut Vec<OutBlob<'a>>) {
    if let Some(ws) = &layer.weights {
        // RMSNorm is always written as its float32 master, whatever its dtype (Loom's quirk, spec §8).
        let dtype = if layer.layer_type == LayerType::RMSNorm {
            DType::Float32
        } else {
            layer.dtype
        };
        let bytes = ws.native_bytes(dtype).expect("morph_all made every version");
        out.push(OutBlob {
            path: path.clone(),
            dtype: Cow::Borrowed(dtype.name()),
            scale: ws.scale(),
            native: true,
            bytes,
        });
    }
    for extra in &layer.extra_blobs {
        out.push(OutBlob {
            path: format!("{path}.{}", extra.suffix),
            dtype: Cow::Borrowed(&extra.dtype),
            scale: extra.scale,
            native: extra.native,
            bytes: Cow::Borrowed(&extra.bytes),
        });
    }
    for (seg, child) in layer.children() {
        collect_blobs(child, format!("{path}.{seg}"), out);
    }
}

fn write_transformer(w: &mut GoJson, t: &Transformer) -> Result<()> {
    w.begin_object();
    w.key("architecture");
    w.string(&t.architecture);
    w.key("hidden_size");
    w.int(t.hidden_size);
    w.key("vocab_size");
    w.int(t.vocab_size);
    if t.lm_head_tied {
        w.key("lm_head_tied");
        w.bool(true);
    }
    if t.has_final_norm {
        w.key("has_final_norm");
        w.bool(true);
    }
    if !t.weight_dtype.is_empty() {
        w.key("weight_dtype");
        w.string(&t.weight_dtype);
    }
    let d = &t.dims;
    w.key("dims");
    w.begin_object();
    for (k, v, always) in [
        ("num_layers", d.num_layers, true),
        ("num_heads", d.num_heads, true),
        ("num_kv_heads", d.num_kv_heads, true),
        ("head_dim", d.head_dim, true),
        ("query_dim", d.query_dim, false),
        ("kv_dim", d.kv_dim, false),
        ("intermediate_size", d.intermediate_size, true),
    ] {
        if always || v != 0 {
            w.key(k);
            w.int(v);
        }
    }
    for (k, v) in [("rms_norm_eps", d.rms_norm_eps), ("rope_freq_base", d.rope_freq_base)] {
        if v != 0.0 {
            w.key(k);
            w.float(v, false, k)?;
        }
    }
    if !d.activation.is_empty() {
        w.key("activation");
        w.string(&d.activation);
    }
    w.end_object();
    w.end_object();
    Ok(())
}
